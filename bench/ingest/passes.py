"""The ingest bench's plans and passes: Dagster ingest, and the same scenes without Dagster.

A :class:`Plan` is a prefix of the sample period; :func:`run_dagster`
materialises it as :func:`pipelines.run.ingest_area` does; :func:`run_baseline`
reads, reprojects and computes the same partitions with the pipeline's plain
functions (optionally writing them with :class:`store.cube.CubeWriter`).
"""

from __future__ import annotations

import shutil
import time
from collections import Counter
from dataclasses import dataclass
from datetime import date, timedelta
from pathlib import Path
from typing import Any

from bench.common import REPO, DemoArea
from bench.ingest.catalog import S1, S2

__all__ = [
    "DagsterPass",
    "Plan",
    "blocks_with_data",
    "local_executor",
    "materialise",
    "plans",
    "run_baseline",
    "run_dagster",
]


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


def local_executor() -> Any:
    """The in-process executor, whatever ``EARTHMEM_INGEST_EXECUTOR`` says: these passes
    time (and count the CPU of) this process, and Dask workers' CPU would escape them."""
    from pipelines.cluster import DaskResource

    return DaskResource(executor="local")


def materialise(resources: Any, inst: Any, partitions: list[tuple[str, str]]) -> DagsterPass:
    """Materialise ``(week, block)`` partitions in an open Dagster instance, as ingest_area does.

    One run per block and range of up to ``RANGE_WEEKS`` weeks (a single-run
    backfill range), one commit per week; the data directory of ``resources``
    keeps what it holds (an ingest into a store that already has data).
    """
    from pipelines.run import RANGE_WEEKS, materialize_range

    t0 = time.perf_counter()
    per: list[float] = []
    failed: list[str] = []
    failed_checks: list[str] = []
    by_block: dict[str, list[str]] = {}
    for w, b in partitions:
        by_block.setdefault(b, []).append(w)
    for b, weeks in sorted(by_block.items()):
        weeks = sorted(set(weeks))
        for i in range(0, len(weeks), RANGE_WEEKS):
            chunk = weeks[i : i + RANGE_WEEKS]
            tp = time.perf_counter()
            key, ok, checks, *_ = materialize_range(resources, inst, b, chunk[0], chunk[-1])
            per.append((time.perf_counter() - tp) / len(chunk))
            failed_checks += [f"{key}: {c}" for c in checks]
            if not ok:
                failed.append(key)
    return DagsterPass(time.perf_counter() - t0, per, failed, failed_checks)


DAGSTER_YAML = REPO / "deploy" / "dagster.yaml"
"""The instance configuration ``earthmem ingest`` uses."""


def run_dagster(area: DemoArea, plan: Plan, data: Path) -> DagsterPass:
    """Materialise the plan's partitions through Dagster into a fresh ``data``; wall time and per-partition times.

    The Dagster instance is the one ``earthmem ingest`` opens (``<data>/dagster_home`` with
    the repo's ``deploy/dagster.yaml``: its pooled SQLite storage), created fresh and opened
    before the clock starts (a user's home is created once, not per ingest). Before session
    13 this pass used Dagster's in-memory instance.
    """
    from pipelines.instance import open_instance
    from pipelines.partitions import register_area_blocks
    from pipelines.resources import load_area
    from pipelines.run import resources_for

    if data.exists():
        shutil.rmtree(data)
    data.mkdir(parents=True)
    with open_instance(data / "dagster_home", DAGSTER_YAML) as inst:
        t0 = time.perf_counter()
        resources = resources_for(data, area.catalog, area.manifest_path, local_executor())
        _, bbox = load_area(area.manifest_path)
        register_area_blocks(inst, bbox)
        dp = materialise(resources, inst, plan.partitions)
        wall = time.perf_counter() - t0
    return DagsterPass(wall, dp.per_partition, dp.failed, dp.failed_checks)


def blocks_with_data(data: Path) -> dict[str, dict[str, int]]:
    """Per level-8 block of an ingested data directory: inventory days and cube chunks written.

    ``s2_days`` / ``s1_days`` count inventory rows (overpasses); ``ndvi_chunks`` /
    ``vv_chunks`` count the cube's stored (non-fill) chunks of ``indices.ndvi``
    and ``s1.vv`` in the block.
    """
    from pipelines.partitions import PARTITION_BLOCK_LEVEL
    from store.blocks import Block
    from store.cube import CubeReader

    out: dict[str, dict[str, int]] = {}

    def bump(block: str, key: str) -> None:
        counts = out.setdefault(
            block, {"s2_days": 0, "s1_days": 0, "ndvi_chunks": 0, "vv_chunks": 0}
        )
        counts[key] += 1

    reader = CubeReader(data)
    table = reader.inventory.table()
    for band, block in zip(table["band"].to_pylist(), table["block"].to_pylist(), strict=True):
        if band in ("s2", "s1"):
            bump(block, f"{band}_days")
    up = PARTITION_BLOCK_LEVEL - reader.block_level  # a cube chunk is a block of that level
    for band, key in (("indices.ndvi", "ndvi_chunks"), ("s1.vv", "vv_chunks")):
        for _, y, x in reader.chunks(band)[:, :3].tolist():
            bump(Block(PARTITION_BLOCK_LEVEL, y >> up, x >> up).id, key)
    return dict(sorted(out.items()))


def run_baseline(area: DemoArea, plan: Plan, write_to: Path | None) -> tuple[float, list[float]]:
    """Find, read, reproject and compute the same partitions (optionally write them, no Dagster)."""
    import numpy as np

    from pipelines.partitions import week_t0
    from pipelines.sentinel1.assets import S1
    from pipelines.sentinel1.ingest import stack_week as s1_stack
    from pipelines.sentinel2.assets import S2
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
                    for name, band in S2.bands:
                        tx.write(band, slots, win.lat_q0, win.lng_q0, st2.values[name])
                    tx.write(S2.flag_band, slots, win.lat_q0, win.lng_q0, st2.clear)
                with writer.transaction(key, metadata={"asset": "bench"}) as tx:
                    for name, band in S1.bands:
                        tx.write(band, slots, win.lat_q0, win.lng_q0, st1.values[name])
                    tx.write(S1.flag_band, slots, win.lat_q0, win.lng_q0, st1.valid)
        per.append(time.perf_counter() - tp)
    return time.perf_counter() - t0, per
