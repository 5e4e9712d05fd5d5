"""Run the pipeline for an area through Dagster, in process: what ``make run`` and the tests call.

Every partition is materialised by Dagster (``materialize`` on the real assets
and resources, recorded in the given instance, so ``dagster dev`` shows the
materialisations). Only partitions that have scenes are run: the weeks are
found from the source first.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import date
from pathlib import Path
from typing import Any

from dagster import DagsterInstance, materialize

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

__all__ = ["IngestReport", "ingest_area", "resources_for"]

Progress = Callable[[str, int, int], None]


@dataclass
class IngestReport:
    """What one ingest run did."""

    partitions: int = 0
    """Scene partitions (week x block) materialised."""
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


def resources_for(data_dir: str | Path, catalog: str | Path, area: str | Path) -> dict[str, Any]:
    """Explicit resources for a data directory, a static catalog and an area JSON."""
    return {
        "store": StoreResource(data_dir=str(data_dir)),
        "scenes": SceneSourceResource(kind="static", path=str(catalog)),
        "area": AreaResource(path=str(area)),
    }


def _weeks_with_scenes(resources: dict[str, Any], start: date, end: date) -> tuple[list[str], int]:
    area: AreaResource = resources["area"]
    source = resources["scenes"].open()
    min_lat, min_lng, max_lat, max_lng = area.bbox
    weeks: set[str] = set()
    n = 0
    for collection in ("sentinel-2-l2a", "sentinel-1-rtc"):
        for item in source.search(collection, (min_lng, min_lat, max_lng, max_lat), start, end).items:
            weeks.add(week_key_of(item.datetime.date()))
            n += 1
    return sorted(weeks), n


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
) -> IngestReport:
    """Materialise every scene partition with data, then the Tessera vintages and k-NN tables."""
    t_start = time.perf_counter()
    Path(data_dir).mkdir(parents=True, exist_ok=True)
    resources = resources_for(data_dir, catalog, area)
    inst = instance or DagsterInstance.get()
    _, bbox = load_area(area)
    blocks = register_area_blocks(inst, bbox)
    weeks, n_scenes = _weeks_with_scenes(resources, start, end or date.today())
    report = IngestReport(scenes=n_scenes)
    todo = [(w, b) for w in weeks for b in blocks]
    for i, (w, b) in enumerate(todo):
        key = scene_key(w, b)
        result = materialize(
            [s2_items, s2_indices, s1_items, s1_backscatter],
            partition_key=str(key),
            resources=resources,
            instance=inst,
            raise_on_error=False,
        )
        _collect(result, str(key), report)
        report.partitions += 1
        if progress:
            progress("scene partitions (week x block)", i + 1, len(todo))
    tessera_years = years if years is not None else sorted({int(w[:4]) for w in weeks} | {int(w[:4]) + 1 for w in weeks[-1:]})
    for j, year in enumerate(tessera_years):
        result = materialize(
            [tessera_items, geotessera_embeddings, geotessera_year_table],
            partition_key=str(year),
            resources=resources,
            instance=inst,
            raise_on_error=False,
        )
        _collect(result, str(year), report)
        report.years.append(year)
        if progress:
            progress("tessera vintages", j + 1, len(tessera_years))
    result = materialize([geotessera_multi_year], resources=resources, instance=inst, raise_on_error=False)
    _collect(result, "multi_year", report)
    report.seconds = time.perf_counter() - t_start
    return report


def _collect(result: Any, key: str, report: IngestReport) -> None:
    if not result.success:
        report.failed.append(key)
    for ev in result.get_asset_check_evaluations():
        if not ev.passed:
            report.failed_checks.append(f"{key}: {ev.check_name}")
