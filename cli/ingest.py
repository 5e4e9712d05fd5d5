"""``earthmem ingest``: run the pipeline for an area through Dagster (in process)."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

from api.errors import InvalidArgument

__all__ = ["ingest", "register"]


def register(sub: Any) -> None:
    """Add ``ingest`` to the ``earthmem`` parser."""
    p = sub.add_parser(
        "ingest", help="materialise an area's scenes, embeddings and k-NN tables through Dagster"
    )
    p.add_argument("--data", default=os.environ.get("EARTHMEM_DATA", "data"), help="data directory")
    p.add_argument(
        "--catalog", default=None, help="static STAC catalog (default: <data>/sample/catalog.json)"
    )
    p.add_argument(
        "--area",
        default=None,
        help="area JSON with a GeoJSON-order bbox (default: the sample manifest)",
    )
    p.set_defaults(handler=_ingest)


def _ingest(args: argparse.Namespace) -> int:
    # a catalog that cannot be read raises pipelines.sources.errors.SourceError: cli.main
    # prints it as one line (catalog_unreachable: exit 2)
    report = ingest(Path(args.data), args.catalog, args.area)
    return 0 if not report.failed and not report.held else 1


def _check_inputs(data: Path, area_path: str) -> None:
    """Refuse a ``--data`` that is not a directory and an area file that is not an area JSON
    before anything is created (the Dagster home, the data directory).

    Raises:
        InvalidArgument: ``no_data_dir`` or ``invalid_area``.
    """
    from pipelines.resources import load_area  # deferred with the pipelines (start-up time)

    if data.exists() and not data.is_dir():
        raise InvalidArgument(f"--data {str(data)!r} is not a directory", code="no_data_dir")
    try:
        load_area(area_path)
    except FileNotFoundError:
        raise InvalidArgument(
            f"area file {area_path!r} does not exist (build the sample area: `earthmem sample"
            " build --out <data>/sample`, or pass --area)",
            code="invalid_area",
        ) from None
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise InvalidArgument(
            f"area file {area_path!r} is not an area JSON with a bbox [min_lng, min_lat,"
            f" max_lng, max_lat]: {exc}",
            code="invalid_area",
        ) from exc


def ingest(
    data: Path, catalog: str | None = None, area: str | None = None, workers: int = 3
) -> Any:
    """Ingest with a persistent Dagster instance under ``<data>/dagster_home``, printing progress.

    The summary names every item skipped (id, code, reason) and every week held
    because rewriting it would drop an overpass it stores; the command exits 1
    when a run failed or a week was held, 2 when the catalog cannot be read or the data
    directory or the area file is not one.
    """
    # Deferred: Dagster and the pipeline definitions take seconds to import; every other
    # `earthmem` command would pay for them at start-up.
    from pipelines.instance import open_instance
    from pipelines.run import ingest_area

    home = Path(os.environ.get("DAGSTER_HOME") or (data / "dagster_home"))
    cfg = Path(__file__).resolve().parents[1] / "deploy" / "dagster.yaml"
    catalog_path = catalog or str(data / "sample" / "catalog.json")
    area_path = area or str(data / "sample" / "manifest.json")
    _check_inputs(data, area_path)

    def progress(stage: str, done: int, total: int) -> None:
        end = "\n" if done >= total else ""
        print(f"\r  {stage}: {done}/{total}", end=end, file=sys.stderr, flush=True)

    with open_instance(home, cfg) as instance:
        report = ingest_area(
            data, catalog_path, area_path, instance=instance, progress=progress, workers=workers
        )
    errors = [c for c in report.failed_checks if not c.endswith("(warn)")]
    warnings = len(report.failed_checks) - len(errors)
    print(
        f"ingested {report.scenes} scenes in {report.partitions} partitions (week x block) and "
        f"Tessera vintages {report.years} in {report.seconds:.0f} s "
        f"({report.scenes / max(report.seconds, 1e-9):.2f} scenes/s); "
        f"failed runs: {report.failed or 'none'}; failed checks: {len(errors)}; "
        f"warnings (e.g. mostly cloudy weeks): {warnings}"
    )
    for c in errors[:10]:
        print(f"  check failed: {c}")
    print(
        f"skipped items: {len(report.skipped)}; weeks held to keep what they store: "
        f"{len(report.held)}"
    )
    for line in report.skipped:
        print(f"  skipped: {line}")
    for line in report.held:
        print(f"  held: {line}")
    return report
