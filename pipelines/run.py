"""Run the pipeline for an area through Dagster, in process: what ``make run`` and the tests call.

Every partition is materialised by Dagster (``materialize`` on the real assets
and resources, recorded in the given instance, so ``dagster dev`` shows the
materialisations). Only partitions that have scenes are run: the weeks are
found from the source first.
"""

from __future__ import annotations

import multiprocessing
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass, field
from datetime import date
from pathlib import Path
from typing import Any, NamedTuple

from dagster import AssetCheckSeverity, DagsterInstance, materialize

from pipelines.cluster import DaskResource
from pipelines.family_assets import CHECKS_STOPPED
from pipelines.instance import fail_dead_runs, run_tags
from pipelines.memory.assets import memory_rechecks
from pipelines.partitions import register_area_blocks, scene_key, week_key_of
from pipelines.resources import AreaResource, SceneSourceResource, StoreResource, load_area
from pipelines.sentinel1.assets import s1_backscatter, s1_items
from pipelines.sentinel2.assets import s2_indices, s2_items
from pipelines.tessera.assets import (
    geotessera_embeddings,
    geotessera_multi_year,
    geotessera_year_table,
    tessera_items,
)

__all__ = ["IngestReport", "RangeRun", "ingest_area", "materialize_range", "resources_for"]

SCENE_ASSETS = [s2_items, s2_indices, s1_items, s1_backscatter]
"""The assets of the scene partitions, materialised together."""

RANGE_WEEKS = 26
"""Weeks of one block per run (a single-run backfill range; every week is still its own commit).

Dagster's bookkeeping has a per-run part (run record, step events, data-version lookups,
check evaluations) and a per-partition part (a planned and a materialisation event per
asset). Half-year ranges share the per-run part among up to 26 partitions. A failed run
marks up to this many partitions failed (weeks it committed stay in the cube)."""

QUIET = {"loggers": {"console": {"config": {"log_level": "WARNING"}}}}
"""Run config: keep Dagster's per-event DEBUG lines off the terminal (they stay in the instance)."""

Progress = Callable[[str, int, int], None]


@dataclass
class IngestReport:
    """What one ingest run did."""

    partitions: int = 0
    """Scene partitions (week x block) materialised (weeks with scenes)."""
    years: list[int] = field(default_factory=list)
    """Tessera vintages materialised."""
    failed: list[str] = field(default_factory=list)
    """Partition keys whose run failed."""
    failed_checks: list[str] = field(default_factory=list)
    """``partition: check`` of checks that did not pass."""
    seconds: float = 0.0
    """Wall time."""
    scenes: int = 0
    """S2 + S1 items found."""
    skipped: list[str] = field(default_factory=list)
    """``asset: item id: [code] reason`` of every item found but not used (discovery or read), once."""
    held: list[str] = field(default_factory=list)
    """``asset week: item id: reason`` of the weeks held to keep what they store (not rewritten)."""


class RangeRun(NamedTuple):
    """What one run over a block's range of weeks did (:func:`materialize_range`)."""

    key: str
    """``first partition key..last week``."""
    ok: bool
    """The run succeeded (a run failed only because ERROR checks kept partitions out of the
    cube counts as succeeded: those partitions are in ``failed_checks`` and ``held``)."""
    failed_checks: list[str]
    """Checks that did not pass (``(warn)`` suffix for WARN severity)."""
    skipped: list[str]
    """``asset: item id: [code] reason`` from the cube assets' metadata."""
    held: list[str]
    """``asset week: item id: reason`` of the held weeks."""


def resources_for(
    data_dir: str | Path,
    catalog: str | Path,
    area: str | Path,
    dask: DaskResource | None = None,
) -> dict[str, Any]:
    """Explicit resources for a data directory, a static catalog and an area JSON.

    ``dask``: where the scene work runs (default: as the environment says, see
    :mod:`pipelines.cluster`).
    """
    return {
        "dask": dask or DaskResource(),
        "store": StoreResource(data_dir=str(data_dir)),
        "scenes": SceneSourceResource(kind="static", path=str(catalog)),
        "area": AreaResource(path=str(area)),
    }


def _plan(resources: dict[str, Any], start: date, end: date) -> tuple[list[str], int, list[int]]:
    """Weeks with S2/S1 scenes, their scene count, and the years with Tessera tiles."""
    area: AreaResource = resources["area"]
    source = resources["scenes"].open()
    min_lat, min_lng, max_lat, max_lng = area.bbox
    bbox = (min_lng, min_lat, max_lng, max_lat)
    weeks: set[str] = set()
    n = 0
    for collection in ("sentinel-2-l2a", "sentinel-1-rtc"):
        for item in source.search(collection, bbox, start, end).items:
            weeks.add(week_key_of(item.datetime.date()))
            n += 1
    tiles = source.search("tessera-embeddings", bbox, start, end).items
    years = sorted({t.tessera_year or t.datetime.year for t in tiles})
    return sorted(weeks), n, years


def ingest_area(
    data_dir: str | Path,
    catalog: str | Path,
    area: str | Path,
    *,
    start: date = date(2017, 1, 1),
    end: date | None = None,
    years: list[int] | None = None,
    instance: DagsterInstance | None = None,
    progress: Progress | None = None,
    workers: int = 1,
    dask: DaskResource | None = None,
) -> IngestReport:
    """Materialise every scene partition with data, then the Tessera vintages and k-NN tables.

    Args:
        workers: processes materialising scene partitions at once. Only used with a
            persistent instance (``DAGSTER_HOME``), which every worker opens itself;
            cube commits are serialised by the store's commit lock, so partitions
            commit safely in parallel.
        dask: where each run's scene work runs (:mod:`pipelines.cluster`; default: as
            the environment says, in process unless a Dask executor is configured).
    """
    t_start = time.perf_counter()
    Path(data_dir).mkdir(parents=True, exist_ok=True)
    resources = resources_for(data_dir, catalog, area, dask)
    inst = instance or DagsterInstance.get()
    fail_dead_runs(inst)  # runs of killed ingests would stay STARTED for ever (no daemon)
    _, bbox = load_area(area)
    blocks = register_area_blocks(inst, bbox)
    weeks, n_scenes, found_years = _plan(resources, start, end or date.today())
    report = IngestReport(scenes=n_scenes)
    todo = [(b, chunk[0], chunk[-1]) for b in blocks for chunk in _chunks(weeks, RANGE_WEEKS)]
    n_weeks = {(b, w0, w1): sum(1 for w in weeks if w0 <= w <= w1) for b, w0, w1 in todo}
    parallel = workers > 1 and not inst.is_ephemeral and len(todo) > 1
    done = 0
    if parallel:
        ctx = multiprocessing.get_context("spawn")
        with ProcessPoolExecutor(
            max_workers=workers,
            mp_context=ctx,
            initializer=_worker_init,
            initargs=(str(data_dir), str(catalog), str(area)),
        ) as pool:
            futures = {pool.submit(_worker_materialize, *r): r for r in todo}
            for fut in as_completed(futures):
                _record_range(report, fut.result(), n_weeks[futures[fut]])
                done += n_weeks[futures[fut]]
                if progress:
                    progress("scene partitions (week x block)", done, sum(n_weeks.values()))
    else:
        for r in todo:
            _record_range(report, materialize_range(resources, inst, *r), n_weeks[r])
            done += n_weeks[r]
            if progress:
                progress("scene partitions (week x block)", done, sum(n_weeks.values()))
    tessera_years = years if years is not None else found_years
    for j, year in enumerate(tessera_years):
        result = materialize(
            [tessera_items, geotessera_embeddings, geotessera_year_table],
            partition_key=str(year),
            resources=resources,
            instance=inst,
            raise_on_error=False,
            run_config=QUIET,
            tags=run_tags(inst),
        )
        _collect(result, str(year), report)
        report.years.append(year)
        if progress:
            progress("tessera vintages", j + 1, len(tessera_years))
    result = materialize(
        [geotessera_multi_year],
        resources=resources,
        instance=inst,
        raise_on_error=False,
        run_config=QUIET,
        tags=run_tags(inst),
    )
    _collect(result, "multi_year", report)
    result = materialize(
        [memory_rechecks],
        resources=resources,
        instance=inst,
        raise_on_error=False,
        run_config=QUIET,
        tags=run_tags(inst),
    )
    _collect(result, "memory_rechecks", report)
    report.seconds = time.perf_counter() - t_start
    return report


def _failed_checks(result: Any) -> list[str]:
    """Checks that did not pass; WARN-severity ones are suffixed ``(warn)``."""
    out = []
    for ev in result.get_asset_check_evaluations():
        if not ev.passed:
            warn = ev.severity == AssetCheckSeverity.WARN
            out.append(f"{ev.check_name} (warn)" if warn else ev.check_name)
    return out


def _record(
    report: IngestReport, key: str, ok: bool, failed_checks: list[str], partitions: int = 0
) -> None:
    report.partitions += partitions
    if not ok:
        report.failed.append(key)
    report.failed_checks.extend(f"{key}: {c}" for c in failed_checks)


def _record_range(report: IngestReport, run: RangeRun, partitions: int) -> None:
    _record(report, run.key, run.ok, run.failed_checks, partitions)
    report.skipped.extend(s for s in run.skipped if s not in report.skipped)
    report.held.extend(h for h in run.held if h not in report.held)


def _skips_and_held(result: Any) -> tuple[list[str], list[str]]:
    """The ``skipped`` and ``held`` metadata of a run's per-partition cube events, each once.

    Written partitions carry them on their materialisation, partitions kept out of the cube
    on their observation.
    """
    skipped: dict[str, None] = {}
    held: dict[str, None] = {}
    for ev in result.all_events:
        if ev.is_step_materialization:
            asset_event = ev.step_materialization_data.materialization
        elif ev.is_asset_observation:
            asset_event = ev.asset_observation_data.asset_observation
        else:
            continue
        asset = asset_event.asset_key.to_user_string()
        meta = asset_event.metadata
        week = str(asset_event.partition or "").rpartition("|")[2]
        if "skipped" in meta:
            skipped.update((f"{asset}: {s}", None) for s in meta["skipped"].value)
        if "held" in meta:
            held.update((f"{asset} {week}: {line}", None) for line in meta["held"].value)
    return list(skipped), list(held)


def _run_ok(result: Any) -> bool:
    """The run succeeded, or its only failures are checks keeping partitions out of the cube."""
    if result.success:
        return True
    failures = [ev for ev in result.all_events if ev.is_step_failure]
    return bool(failures) and all(
        CHECKS_STOPPED in getattr(ev.step_failure_data.user_failure_data, "metadata", {})
        for ev in failures
    )


def _collect(result: Any, key: str, report: IngestReport) -> None:
    _record(report, key, bool(result.success), _failed_checks(result))


_WORKER: dict[str, Any] = {}


def _worker_init(data_dir: str, catalog: str, area: str) -> None:
    _WORKER["resources"] = resources_for(data_dir, catalog, area)
    _WORKER["instance"] = DagsterInstance.get()


def _worker_materialize(block: str, first_week: str, last_week: str) -> RangeRun:
    return materialize_range(
        _WORKER["resources"], _WORKER["instance"], block, first_week, last_week
    )


def _chunks(weeks: list[str], size: int) -> list[list[str]]:
    """``weeks`` in the fewest runs of at most ``size`` weeks, their lengths within one.

    Even lengths rather than full runs and a short last one: a run's fixed cost is shared
    by as many weeks as the others', and on a Dask cluster no run is a lone task.
    """
    if not weeks:
        return []
    n = -(-len(weeks) // size)
    q, r = divmod(len(weeks), n)
    bounds = [i * q + min(i, r) for i in range(n + 1)]
    return [weeks[bounds[i] : bounds[i + 1]] for i in range(n)]


def materialize_range(
    resources: dict[str, Any],
    instance: DagsterInstance,
    block: str,
    first_week: str,
    last_week: str,
) -> RangeRun:
    """One run over a block's weeks ``first_week..last_week`` (a single-run backfill range)."""
    start, end = str(scene_key(first_week, block)), str(scene_key(last_week, block))
    result = materialize(
        SCENE_ASSETS,
        resources=resources,
        instance=instance,
        raise_on_error=False,
        run_config=QUIET,
        tags={
            **run_tags(instance),
            "dagster/asset_partition_range_start": start,
            "dagster/asset_partition_range_end": end,
        },
    )
    skipped, held = _skips_and_held(result)
    return RangeRun(f"{start}..{last_week}", _run_ok(result), _failed_checks(result), skipped, held)
