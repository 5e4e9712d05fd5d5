"""Ingestion bench: the Dagster ingest of the demo area vs reading and reprojecting the same scenes.

For growing prefixes of the demo period (about 10, 40 and 160 S2 + S1 scenes)
the scene partitions (week x block) are materialised through Dagster exactly
as :func:`pipelines.run.ingest_area` does (one run per block and range of up to
``RANGE_WEEKS`` weeks, the four scene assets, one cube commit per week, an
ephemeral instance, a fresh data directory), and timed. Baseline in the same run: the same partitions' scenes found, read and
reprojected onto the lattice and turned into indices by the pipeline's own
plain functions (:func:`pipelines.sentinel2.ingest.stack_week` and
:func:`pipelines.sentinel1.ingest.stack_week`) without writing and without
Dagster. A third pass writes those stacks with :class:`store.cube.CubeWriter`
(one transaction per asset and partition, as the assets do) but without
Dagster, so the table splits the cost into read+compute, writing, and Dagster's
per-run overhead (run creation, event log), which is part of what is measured.

Rates: scenes/s counts S2 + S1 items per partition (an item over two blocks
counts twice: it is read twice); cells/s counts lattice cells of the window x
items read.

Flatness: with T(n) the Dagster ingest time of n scenes, the target row is the
marginal cost per scene read between successive sizes,
(T(n_i) - T(n_{i-1})) / (reads_i - reads_{i-1}), largest over smallest: a fixed
cost (one instance, the first run) cancels out, so the ratio stays near 1
unless the cost per scene grows with size. The raw cost per scene, T(n) / reads at the largest size over
the smallest, is kept as information: it falls with size as the fixed cost spreads.

The largest size (``--flat-size``, default 1,000 scenes) comes from a
bench-only "long" catalog built once under ``bench/.cache`` at the demo's
density (about one scene per partition-week): the demo's S2 + S1 items, a copy
of each 104 weeks later (same weekday; the week partitions start 2022-12-29,
so time alone gives ~400 scenes), and ``LONG_TILES - 1`` copies of all of
those moved ``k * LONG_EAST_M`` east onto fresh level-8 blocks (each asset a GDAL VRT over
the demo's COG with the GeoTransform moved), ~1,600 scenes over 8 blocks. Its
prefix is ingested through Dagster once (no baseline passes); the run is
checked: no failed partition or error check, and every block has inventory
rows and cube chunks of S2 and S1.

    python -m bench.bench_ingest [--quick] [--sizes 10,40,160] [--flat-size 1000] [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass
from datetime import date, datetime, timedelta
from itertools import pairwise
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import CACHE_DIR, DemoArea, Timing, demo_area, machine, write_json

__all__ = ["main"]

S2, S1 = "sentinel-2-l2a", "sentinel-1-rtc"


def _log(msg: str) -> None:
    print(f"[bench_ingest] {msg}", file=sys.stderr, flush=True)


@dataclass(frozen=True)
class Plan:
    """The partitions of one prefix of the sample period."""

    weeks: list[str]
    """Week keys, ascending."""
    blocks: list[str]
    """Block ids of the area."""
    scenes: int
    """S2 + S1 items found over the whole area in those weeks."""
    scene_reads: int
    """Items summed over partitions (items over two blocks count twice)."""
    cells: int
    """Window cells x items summed over partitions."""

    @property
    def partitions(self) -> list[tuple[str, str]]:
        """``(week, block)`` pairs in run order."""
        return [(w, b) for w in self.weeks for b in self.blocks]


LONG_SHIFT_DAYS = 7 * 104
"""Shift of the long catalog's time copies: 104 weeks keeps weekdays and week phase."""
LONG_EAST_M = 2240.0
"""Easting shift of the long catalog's space copies: 112 x 20 m (a whole number of 10 m and 20 m
pixels), about one level-8 block (256 lattice columns) at 23.36 N, so copy ``k`` of the demo
footprint covers the two blocks of block column ``+k``, at the same place in them."""
LONG_TILES = 4
"""Copies in space of the demo footprint (the original plus ``LONG_TILES - 1`` eastward)."""
LONG_VERSION = 2


def _vrt_xml(src: str, dx: float) -> str:
    """A VRT of a single-band raster ``src`` moved ``dx`` metres east (same pixels, same CRS)."""
    from xml.sax.saxutils import escape, quoteattr

    import rasterio

    with rasterio.open(src) as ds:
        if ds.count != 1 or ds.crs is None:
            raise ValueError(f"{src}: expected one band with a CRS")
        t = ds.transform
        dtype = {"uint8": "Byte", "uint16": "UInt16", "int16": "Int16", "float32": "Float32"}[
            ds.dtypes[0]
        ]
        nodata = "" if ds.nodata is None else f"<NoDataValue>{ds.nodata!r}</NoDataValue>"
        by, bx = ds.block_shapes[0]
        w, h, wkt = ds.width, ds.height, ds.crs.to_wkt()
    rect = f'xOff="0" yOff="0" xSize="{w}" ySize="{h}"'
    return (
        f'<VRTDataset rasterXSize="{w}" rasterYSize="{h}">\n'
        f'  <SRS dataAxisToSRSAxisMapping="1,2">{escape(wkt)}</SRS>\n'
        f"  <GeoTransform>{t.c + dx!r}, {t.a!r}, {t.b!r}, {t.f!r}, {t.d!r}, {t.e!r}</GeoTransform>\n"
        f'  <VRTRasterBand dataType="{dtype}" band="1">\n'
        f"    {nodata}\n"
        "    <SimpleSource>\n"
        f'      <SourceFilename relativeToVRT="0">{escape(src)}</SourceFilename>\n'
        "      <SourceBand>1</SourceBand>\n"
        f'      <SourceProperties RasterXSize="{w}" RasterYSize="{h}" DataType={quoteattr(dtype)} '
        f'BlockXSize="{bx}" BlockYSize="{by}"/>\n'
        f"      <SrcRect {rect}/>\n"
        f"      <DstRect {rect}/>\n"
        "    </SimpleSource>\n"
        "  </VRTRasterBand>\n"
        "</VRTDataset>\n"
    )


def _shift_item_east(item: dict[str, Any], k: int, hrefs: dict[str, str]) -> dict[str, Any]:
    """Copy ``k`` of an item moved ``k * LONG_EAST_M`` east in its UTM CRS.

    The footprint's vertices go to the item's ``proj:code`` CRS, move, and come
    back; ``bbox`` is their envelope; ``proj:bbox`` / ``proj:transform`` move by
    the same metres; asset hrefs are replaced through ``hrefs`` (COG -> VRT).
    """
    from pyproj import Transformer

    dx = k * LONG_EAST_M
    copy: dict[str, Any] = json.loads(json.dumps(item))
    copy["id"] = f"{item['id']}_e{k}"
    props = copy["properties"]
    to_utm = Transformer.from_crs("EPSG:4326", props["proj:code"], always_xy=True)
    to_ll = Transformer.from_crs(props["proj:code"], "EPSG:4326", always_xy=True)
    ring = copy["geometry"]["coordinates"][0]
    x, y = to_utm.transform([p[0] for p in ring], [p[1] for p in ring])
    lng, lat = to_ll.transform([v + dx for v in x], list(y))
    copy["geometry"]["coordinates"] = [
        [[round(a, 7), round(b, 7)] for a, b in zip(lng, lat, strict=True)]
    ]
    ring = copy["geometry"]["coordinates"][0]
    copy["bbox"] = [
        min(p[0] for p in ring),
        min(p[1] for p in ring),
        max(p[0] for p in ring),
        max(p[1] for p in ring),
    ]
    if "proj:bbox" in props:
        x0, y0, x1, y1 = props["proj:bbox"]
        props["proj:bbox"] = [x0 + dx, y0, x1 + dx, y1]
    for holder in (props, *copy["assets"].values()):
        tr = holder.get("proj:transform")
        if tr:
            holder["proj:transform"] = [*tr[:2], tr[2] + dx, *tr[3:]]
    for asset in copy["assets"].values():
        if asset.get("href") in hrefs:
            asset["href"] = hrefs[asset["href"]]
    return copy


def long_area(area: DemoArea) -> DemoArea:
    """A bench-only catalog ~8x the demo's scenes at its density (built once under ``bench/.cache``).

    Every demo S2 / S1 item, plus a copy 104 weeks later (copies dated after
    today are left out: their weeks are not partitions yet), each also copied
    ``LONG_TILES - 1`` times eastward by ``k * LONG_EAST_M`` onto fresh
    blocks. A space copy's assets are GDAL VRTs over the demo's COGs with the
    GeoTransform moved (real rasters at the new place, no pixel copies). The
    area file (``manifest.json``: name + bbox) is the envelope of every item.
    """
    from pipelines.sources.static import load_catalog_items

    root = CACHE_DIR / f"ingest_long_{area.size}_v{LONG_VERSION}"
    catalog = root / "catalog.json"
    if not catalog.exists():
        if root.exists():
            shutil.rmtree(root)
        tmp = root.with_name(root.name + ".tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        sample = area.sample.resolve()
        today = date.today().isoformat()
        vrts: dict[int, dict[str, str]] = {k: {} for k in range(1, LONG_TILES)}
        by_coll: dict[str, list[dict[str, Any]]] = {S2: [], S1: []}
        for _, item in load_catalog_items(area.catalog):
            coll = item.get("collection")
            if coll not in by_coll:
                continue
            copy = json.loads(json.dumps(item))
            props = copy["properties"]
            for key in ("datetime", "start_datetime", "end_datetime"):
                if isinstance(props.get(key), str):
                    t = datetime.fromisoformat(props[key].replace("Z", "+00:00"))
                    props[key] = (t + timedelta(days=LONG_SHIFT_DAYS)).strftime(
                        "%Y-%m-%dT%H:%M:%SZ"
                    )
            copy["id"] = f"{item['id']}_p104w"
            in_time = [item] + ([copy] if props["datetime"][:10] <= today else [])
            for k in range(1, LONG_TILES):
                dx = k * LONG_EAST_M
                for asset in item["assets"].values():
                    href = asset.get("href")
                    if isinstance(href, str) and href.endswith(".tif") and href not in vrts[k]:
                        rel = Path(href).resolve().relative_to(sample).with_suffix(".vrt")
                        dst = tmp / "vrt" / f"e{k}" / rel
                        dst.parent.mkdir(parents=True, exist_ok=True)
                        dst.write_text(_vrt_xml(href, dx))
                        vrts[k][href] = str(root / "vrt" / f"e{k}" / rel)
            for it in in_time:
                by_coll[coll].append(it)
                by_coll[coll] += [_shift_item_east(it, k, vrts[k]) for k in range(1, LONG_TILES)]
        links = []
        boxes = []
        for coll, items in by_coll.items():
            (tmp / coll).mkdir()
            item_links = []
            for it in items:
                it["links"] = []
                boxes.append(it["bbox"])
                (tmp / coll / f"{it['id']}.json").write_text(json.dumps(it))
                item_links.append({"rel": "item", "href": f"./{it['id']}.json"})
            doc = json.loads((area.sample / coll / "collection.json").read_text())
            doc["links"] = item_links
            (tmp / coll / "collection.json").write_text(json.dumps(doc))
            links.append({"rel": "child", "href": f"./{coll}/collection.json"})
        cat: dict[str, Any] = {
            "type": "Catalog",
            "id": "earthmem-bench-long",
            "stac_version": "1.1.0",
        }
        cat |= {
            "description": f"bench-only: demo items + 104-week copies, x{LONG_TILES} eastward",
            "links": links,
        }
        envelope = [
            min(b[0] for b in boxes),
            min(b[1] for b in boxes),
            max(b[2] for b in boxes),
            max(b[3] for b in boxes),
        ]
        area_doc = {"name": f"bench-long-{area.size}-x{LONG_TILES}", "bbox": envelope}
        (tmp / "manifest.json").write_text(json.dumps(area_doc, indent=2))
        (tmp / "catalog.json").write_text(json.dumps(cat))
        tmp.rename(root)
    return DemoArea(f"{area.size}-long", root, area.data, {"built_from": str(area.sample)})


def _weekly_counts(area: DemoArea) -> Counter[str]:
    from pipelines.partitions import week_key_of
    from pipelines.sources import SourceConfig, open_source

    src = open_source(SourceConfig(kind="static", path=str(area.catalog)))
    m = area.manifest()
    min_lng, min_lat, max_lng, max_lat = m["bbox"]
    counts: Counter[str] = Counter()
    for coll in (S2, S1):
        for it in src.search(
            coll, (min_lng, min_lat, max_lng, max_lat), date(2017, 1, 1), date.today()
        ).items:
            counts[week_key_of(it.datetime.date())] += 1
    return counts


def _partition_items(area: DemoArea, week: str, block: str) -> tuple[Any, list[Any], list[Any]]:
    """Window and S2 / S1 items of one partition, found as the discovery assets find them.

    The source is opened as the assets open it (``SceneSourceResource.open``: the
    static catalog is parsed once per process), so the baseline pays a search
    per partition, not a walk of the whole catalog per partition.
    """
    from pipelines.resources import AreaResource, SceneSourceResource

    win = AreaResource(path=str(area.manifest_path)).block_window(block)
    if win is None:
        return None, [], []
    src = SceneSourceResource(kind="static", path=str(area.catalog)).open()
    d0 = date.fromisoformat(week)
    d1 = d0 + timedelta(days=6)
    s2 = list(src.search(S2, win.bounds(), d0, d1).items)
    s1 = list(src.search(S1, win.bounds(), d0, d1).items)
    return win, s2, s1


def plans(area: DemoArea, sizes: list[int]) -> list[Plan]:
    """Prefixes of the sample's weeks holding at least each size of scenes."""
    from pipelines.partitions import area_blocks
    from pipelines.resources import load_area

    counts = _weekly_counts(area)
    weeks = sorted(counts)
    _, bbox = load_area(area.manifest_path)
    blocks = area_blocks(bbox)
    out = []
    for n in sizes:
        chosen, total = [], 0
        for w in weeks:
            if total >= n:
                break
            chosen.append(w)
            total += counts[w]
        reads = cells = 0
        for w in chosen:
            for b in blocks:
                win, s2, s1 = _partition_items(area, w, b)
                if win is not None:
                    reads += len(s2) + len(s1)
                    cells += win.shape[0] * win.shape[1] * (len(s2) + len(s1))
        out.append(Plan(chosen, blocks, total, reads, cells))
    return out


@dataclass(frozen=True)
class DagsterPass:
    """One timed Dagster ingest of a plan."""

    seconds: float
    """Wall time (resources, instance, every run)."""
    per_partition: list[float]
    """Seconds per partition (each run's time over its weeks)."""
    failed: list[str]
    """Run keys whose run failed."""
    failed_checks: list[str]
    """``run: check`` of checks that did not pass (``(warn)`` suffix for warnings)."""


def run_dagster(area: DemoArea, plan: Plan, data: Path) -> DagsterPass:
    """Materialise the plan's partitions through Dagster into ``data``; wall time and per-partition times."""
    from dagster import DagsterInstance

    from pipelines.partitions import register_area_blocks
    from pipelines.resources import load_area
    from pipelines.run import RANGE_WEEKS, materialize_range, resources_for

    if data.exists():
        shutil.rmtree(data)
    data.mkdir(parents=True)
    t0 = time.perf_counter()
    resources = resources_for(data, area.catalog, area.manifest_path)
    per: list[float] = []
    failed: list[str] = []
    failed_checks: list[str] = []
    # as pipelines.run.ingest_area does: one run per block and range of up to
    # RANGE_WEEKS weeks (a single-run backfill range), one commit per week
    by_block: dict[str, list[str]] = {}
    for w, b in plan.partitions:
        by_block.setdefault(b, []).append(w)
    with DagsterInstance.ephemeral() as inst:
        _, bbox = load_area(area.manifest_path)
        register_area_blocks(inst, bbox)
        for b, weeks in sorted(by_block.items()):
            weeks = sorted(set(weeks))
            for i in range(0, len(weeks), RANGE_WEEKS):
                chunk = weeks[i : i + RANGE_WEEKS]
                tp = time.perf_counter()
                key, ok, checks = materialize_range(resources, inst, b, chunk[0], chunk[-1])
                per.append((time.perf_counter() - tp) / len(chunk))
                failed_checks += [f"{key}: {c}" for c in checks]
                if not ok:
                    failed.append(key)
    return DagsterPass(time.perf_counter() - t0, per, failed, failed_checks)


def blocks_with_data(data: Path) -> dict[str, dict[str, int]]:
    """Per level-8 block of an ingested data directory: inventory days and cube chunks written.

    ``s2_days`` / ``s1_days`` count inventory rows (overpasses); ``ndvi_chunks`` /
    ``vv_chunks`` count the cube's stored (non-fill) chunks of ``indices.ndvi``
    and ``s1.vv`` in the block.
    """
    from pipelines.partitions import PARTITION_BLOCK_LEVEL
    from store.blocks import Block
    from store.cube import CubeReader
    from store.inventory import Inventory

    out: dict[str, dict[str, int]] = {}

    def bump(block: str, key: str) -> None:
        counts = out.setdefault(
            block, {"s2_days": 0, "s1_days": 0, "ndvi_chunks": 0, "vv_chunks": 0}
        )
        counts[key] += 1

    table = Inventory(data).table()
    for band, block in zip(table["band"].to_pylist(), table["block"].to_pylist(), strict=True):
        if band in ("s2", "s1"):
            bump(block, f"{band}_days")
    reader = CubeReader(data)
    up = PARTITION_BLOCK_LEVEL - reader.block_level  # a cube chunk is a block of that level
    for band, key in (("indices.ndvi", "ndvi_chunks"), ("s1.vv", "vv_chunks")):
        for _, y, x in reader.chunks(band)[:, :3].tolist():
            bump(Block(PARTITION_BLOCK_LEVEL, y >> up, x >> up).id, key)
    return dict(sorted(out.items()))


def marginal_costs(points: list[tuple[int, int, float]]) -> list[tuple[int, int, float]]:
    """Seconds per additional scene read between successive sizes.

    Args:
        points: ``(scenes, scene_reads, seconds)`` per size, ascending.

    Returns:
        ``(scenes[i-1], scenes[i], (T[i] - T[i-1]) / (reads[i] - reads[i-1]))`` for
        each step whose reads grow.
    """
    return [
        (s0, s1, (t1 - t0) / (r1 - r0))
        for (s0, r0, t0), (s1, r1, t1) in pairwise(points)
        if r1 > r0
    ]


def run_baseline(area: DemoArea, plan: Plan, write_to: Path | None) -> tuple[float, list[float]]:
    """Find, read, reproject and compute the same partitions (optionally write them, no Dagster)."""
    import numpy as np

    from pipelines.partitions import week_t0
    from pipelines.sentinel1.ingest import S1_BANDS
    from pipelines.sentinel1.ingest import stack_week as s1_stack
    from pipelines.sentinel2.compute import INDEX_NAMES
    from pipelines.sentinel2.ingest import stack_week as s2_stack
    from store.cube import CubeWriter

    writer = None
    if write_to is not None:
        if write_to.exists():
            shutil.rmtree(write_to)
        write_to.mkdir(parents=True)
    t0 = time.perf_counter()
    if write_to is not None:
        writer = CubeWriter(write_to)
    per: list[float] = []
    for w, b in plan.partitions:
        tp = time.perf_counter()
        win, s2, s1 = _partition_items(area, w, b)
        if win is not None:
            t = week_t0(w)
            st2 = s2_stack(s2, win, t)
            st1 = s1_stack(s1, win, t)
            if writer is not None:
                slots = np.arange(t, t + 7)
                key = f"{b}|{w}"
                with writer.transaction(key, metadata={"asset": "bench"}) as tx:
                    for name in INDEX_NAMES:
                        tx.write(f"indices.{name}", slots, win.lat_q0, win.lng_q0, st2.values[name])
                    tx.write("s2.clear", slots, win.lat_q0, win.lng_q0, st2.clear)
                with writer.transaction(key, metadata={"asset": "bench"}) as tx:
                    names = {"vv": "s1.vv", "vh": "s1.vh", "vh_vv": "indices.vh_vv"}
                    for k in S1_BANDS:
                        tx.write(names[k], slots, win.lat_q0, win.lng_q0, st1.values[k])
                    tx.write("s1.valid", slots, win.lat_q0, win.lng_q0, st1.valid)
        per.append(time.perf_counter() - tp)
    return time.perf_counter() - t0, per


def flatness_rows(
    points: list[tuple[int, int, float, int, float]], flat: dict[str, Any]
) -> list[dict[str, Any]]:
    """The cost-per-scene rows: marginal (the target) and raw (information).

    Args:
        points: ``(scenes, scene_reads, seconds, repeats, cells_per_read)`` per size.
        flat: Checks of the largest (long catalog) run; empty when it did not run.
    """
    points = sorted(points)
    steps = marginal_costs([(sc, r, t) for sc, r, t, _, _ in points])
    marg = [m for _, _, m in steps]
    sizes = ", ".join(
        f"{sc} scenes: {t:.1f} s (n={k}) / {r} reads = {t / r:.4f} s/read, {c / 1e3:.1f} k cells/read"
        for sc, r, t, k, c in points
    )
    step_text = ", ".join(f"{a}->{b}: {m:.4f}" for a, b, m in steps)
    ok_run = not flat or (
        not flat["failed_partitions"]
        and not flat["failed_error_checks"]
        and not flat["blocks_without_data"]
    )
    run_note = ""
    if flat:
        run_note = (
            f"; largest size: {flat['catalog']}, one pass, failed partitions "
            f"{len(flat['failed_partitions'])}, failed checks {flat['failed_checks']} "
            f"({len(flat['failed_error_checks'])} error), blocks without data "
            f"{flat['blocks_without_data'] or 'none'}"
        )
    lo, hi = points[0], points[-1]
    raw = (hi[2] / hi[1]) / (lo[2] / lo[1])
    ratio = max(marg) / min(marg) if len(marg) >= 2 and min(marg) > 0 else None
    return [
        {
            "case": f"cost per scene, marginal, {lo[0]} to {hi[0]} scenes (Dagster ingest)",
            "unit": "x",
            "median": ratio,
            "baseline_case": "smallest marginal s per added scene read",
            "baseline": {"median": min(marg) if marg else None},
            "ratio": ratio,
            "ratio_def": "largest / smallest marginal s per added scene read between successive sizes",
            "target": "<= 1.25 (cost per scene does not grow with size)",
            "met": None if len(marg) < 2 else (ratio is not None and ratio <= 1.25 and ok_run),
            "data": (
                f"marginal s/read {step_text}"
                + (f"; last/first step {marg[-1] / marg[0]:.3g}" if marg[0] > 0 else "")
                + (
                    "; a step is not positive (timing noise): not judged"
                    if ratio is None and len(marg) >= 2
                    else ""
                )
                + f"; {sizes}"
                if marg
                else sizes
            )
            + run_note,
            "marginal_s_per_read": marg,
            "sizes": [
                {"scenes": sc, "scene_reads": r, "seconds": t, "n": k, "cells_per_read": c}
                for sc, r, t, k, c in points
            ],
            "largest_run": flat,
        },
        {
            "case": f"cost per scene, raw, {hi[0]} vs {lo[0]} scenes (Dagster ingest)",
            "unit": "x",
            "median": raw,
            "baseline_case": f"s/scene read at {lo[0]} scenes",
            "baseline": {"median": lo[2] / lo[1]},
            "ratio": raw,
            "ratio_def": "s/scene read at the largest size / at the smallest",
            "target": "(info: the smallest size carries Dagster's fixed per-run cost)",
            "met": None,
            "data": sizes,
        },
    ]


def _fmt(x: float | None) -> str:
    return "-" if x is None else format(x, ".4g")


def _t(samples: list[float]) -> Timing:
    return Timing.of(samples)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--quick", action="store_true", help="tiny sample, 3 and 8 scenes, one repeat")
    ap.add_argument(
        "--sizes", default=None, help="comma-separated scene counts (default 10,40,160)"
    )
    ap.add_argument(
        "--repeats", type=int, default=None, help="repeats of the smallest size (default 3)"
    )
    ap.add_argument(
        "--flat-size",
        type=int,
        default=None,
        help="scenes of the long catalog ingested once for the cost-per-scene rows "
        "(default 1000; 0 = none; --quick: none)",
    )
    ap.add_argument("--size", choices=("demo", "tiny"), default=None)
    ap.add_argument("--json", help="write results as JSON here")
    args = ap.parse_args(argv)
    quick = args.quick
    size = args.size or ("tiny" if quick else "demo")
    sizes = [int(s) for s in (args.sizes or ("3,8" if quick else "10,40,160")).split(",")]
    small_repeats = args.repeats or (1 if quick else 3)
    t_start = time.perf_counter()
    area = demo_area(size)
    CACHE_DIR.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="ingest_tmp_", dir=CACHE_DIR))  # private: runs may overlap
    the_plans = plans(area, sizes)
    # warm-up (imports, Dagster, GDAL, the per-grid nearest-neighbour maps): one partition each way
    warm = Plan(the_plans[0].weeks[:1], the_plans[0].blocks, 0, 0, 0)
    run_baseline(area, warm, None)
    if not quick:
        run_dagster(area, warm, work / "warm")
    rows: list[dict[str, Any]] = []
    # (scenes, scene reads, median seconds, repeats, cells per read) per size, for the flatness rows
    points: list[tuple[int, int, float, int, float]] = []
    for i, plan in enumerate(the_plans):
        reps = small_repeats if i == 0 else (2 if i == 1 and not quick else 1)
        ing, base, bw = [], [], []
        per_ing: list[float] = []
        per_base: list[float] = []
        failed: list[str] = []
        failed_checks: list[str] = []
        for _ in range(reps):
            tb, pb = run_baseline(area, plan, None)
            base.append(tb)
            per_base += pb
            dp = run_dagster(area, plan, work / "dagster")
            failed, failed_checks = dp.failed, dp.failed_checks
            ing.append(dp.seconds)
            per_ing += dp.per_partition
            tw, _ = run_baseline(area, plan, work / "plain")
            bw.append(tw)
        for sub in ("dagster", "plain"):
            shutil.rmtree(work / sub, ignore_errors=True)
        n = plan.scene_reads
        ti_t, tb_t, tw_t = _t(ing), _t(base), _t(bw)
        points.append((plan.scenes, n, ti_t.median, ti_t.n, plan.cells / n))
        parts = len(plan.partitions)
        overhead = (ti_t.median - tw_t.median) / parts
        data = (
            f"{plan.scenes} scenes ({n} scene reads), {len(plan.weeks)} weeks x "
            f"{len(plan.blocks)} blocks = {parts} partitions, {plan.cells / 1e6:.1f} M cell reads"
        )
        ratio = tb_t.median / ti_t.median
        rows.append(
            {
                "case": f"Dagster ingest, {plan.scenes} scenes: seconds per scene read",
                "unit": "s/scene",
                "median": ti_t.median / n,
                "p10": ti_t.p10 / n,
                "p90": ti_t.p90 / n,
                "n": ti_t.n,
                "baseline_case": "stack_week S2 + S1 (find, read, reproject, indices; no write, no Dagster)",
                "baseline": {
                    "median": tb_t.median / n,
                    "p10": tb_t.p10 / n,
                    "p90": tb_t.p90 / n,
                    "n": tb_t.n,
                },
                "ratio": ratio,
                "ratio_def": "ingest rate / baseline rate",
                "target": ">= 0.8",
                "met": ratio >= 0.8 and not failed,
                "data": data,
                "scenes_per_s": n / ti_t.median,
                "cells_per_s": plan.cells / ti_t.median,
                "baseline_scenes_per_s": n / tb_t.median,
                "baseline_cells_per_s": plan.cells / tb_t.median,
                "per_partition_ms": {
                    "dagster_median": 1e3 * _t(per_ing).median,
                    "dagster_p90": 1e3 * _t(per_ing).p90,
                    "baseline_median": 1e3 * _t(per_base).median,
                    "plain_write_total_s": tw_t.median,
                    "dagster_overhead_per_partition_ms": 1e3 * overhead,
                },
                "failed_partitions": failed,
                "failed_checks": len(failed_checks),
            }
        )
        rows.append(
            {
                "case": f"read + compute + CubeWriter commits without Dagster, {plan.scenes} scenes",
                "unit": "s/scene",
                "median": tw_t.median / n,
                "p10": tw_t.p10 / n,
                "p90": tw_t.p90 / n,
                "n": tw_t.n,
                "baseline_case": "stack_week S2 + S1 (no write, no Dagster)",
                "baseline": {
                    "median": tb_t.median / n,
                    "p10": tb_t.p10 / n,
                    "p90": tb_t.p90 / n,
                    "n": tb_t.n,
                },
                "ratio": tb_t.median / tw_t.median,
                "ratio_def": "rate / baseline rate",
                "target": "(info: splits write cost from Dagster overhead)",
                "met": None,
                "data": data,
                "dagster_overhead_per_partition_ms": 1e3 * overhead,
            }
        )
        _log(f"{plan.scenes} scenes done ({time.perf_counter() - t_start:.0f} s)")
    flat_size = args.flat_size if args.flat_size is not None else (0 if quick else 1000)
    flat: dict[str, Any] = {}
    if flat_size and flat_size > max(p[0] for p in points):
        longer = long_area(area)
        plan = plans(longer, [flat_size])[0]
        run_baseline(longer, Plan(plan.weeks[:1], plan.blocks, 0, 0, 0), None)  # warm the new grids
        dp = run_dagster(longer, plan, work / "long")
        per_block = blocks_with_data(work / "long")
        shutil.rmtree(work / "long", ignore_errors=True)
        points.append((plan.scenes, plan.scene_reads, dp.seconds, 1, plan.cells / plan.scene_reads))
        empty = [b for b in plan.blocks if min(per_block.get(b, {"": 0}).values()) == 0]
        flat = {
            "catalog": f"{longer.sample.name}: {len(plan.weeks)} weeks x {len(plan.blocks)} blocks",
            "failed_partitions": dp.failed,
            "failed_checks": len(dp.failed_checks),
            "failed_error_checks": [c for c in dp.failed_checks if not c.endswith("(warn)")][:20],
            "blocks_without_data": empty,
            "per_block": per_block,
        }
        _log(
            f"{plan.scenes} scenes (long catalog) done in {dp.seconds:.0f} s "
            f"({time.perf_counter() - t_start:.0f} s)"
        )
    shutil.rmtree(work, ignore_errors=True)
    rows += flatness_rows(points, flat)
    from pipelines.run import RANGE_WEEKS

    doc = {
        "bench": "ingest",
        "title": "Ingestion: Dagster ingest vs reading and reprojecting the same scenes",
        "machine": machine(),
        "data": {"area": size, "sizes": sizes, "cached_full_ingest": area.report},
        "rows": rows,
        "notes": [
            "Dagster's per-run overhead (run record, event log, asset checks; one run per block "
            f"and range of up to {RANGE_WEEKS} weeks) is part of the ingest time; the 'without "
            "Dagster' row isolates it.",
            "Scenes are the demo sample's synthetic COGs (2 km area, 10/20 m UTM) on local disk. "
            "The demo holds 207 S2 + S1 scenes; the cost-per-scene rows' largest size comes from "
            f"a bench-only catalog at the demo's density: the demo's items, copies 104 weeks later, "
            f"and of both {LONG_TILES - 1} copies {LONG_EAST_M:.0f} m, {2 * LONG_EAST_M:.0f} m, ... "
            "east onto fresh blocks (GDAL VRTs over the demo's COGs with the GeoTransform moved), "
            "about 1,600 scenes over 8 blocks. Its partition windows hold ~12% more cells per scene "
            "read (the area's bbox spans the ~220 m gaps between copies) and a VRT read costs "
            "~0.8 ms more per band than the COG's: both make the largest size's cost per scene "
            "higher, never lower.",
            "The baseline finds items through the source as the assets do (the static catalog "
            "parsed once per process); before, it walked the whole catalog JSON per partition "
            "(~60 ms, about 40% of its time).",
        ],
        "seconds": time.perf_counter() - t_start,
    }
    write_json(args.json, doc)
    for r in rows:
        ratio_text = "n/a" if r["ratio"] is None else f"{r['ratio']:.3g}"
        print(
            f"{r['case'][:72]:72} {r['median'] if r['median'] is None else format(r['median'], '.4g')} "
            f"{r['unit']} base {_fmt(r['baseline']['median'])} "
            f"ratio {ratio_text} {r['target']} {'' if r['met'] is None else ('MET' if r['met'] else 'MISSED')}"
        )
        if r["case"].startswith("cost per scene"):
            print(f"    {r['data']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
