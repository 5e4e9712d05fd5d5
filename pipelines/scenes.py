"""Shared glue of the scene families: a run's (week, block) partitions, their windows and items.

A run materialises one partition or, in a single-run backfill, a range of
weeks of one block (Dagster splits multi-partition backfills per block).
Discovery searches the source once for the whole range and groups the items
by week, so a range costs one search, not one per week.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import date, timedelta
from typing import Any

from dagster import AssetCheckResult, AssetExecutionContext, MultiPartitionKey

from pipelines.lattice import LatticeWindow
from pipelines.partitions import week_key_of, week_t0
from pipelines.resources import AreaResource, SceneSourceResource
from pipelines.sources.models import SceneItem, Skip

__all__ = [
    "Discovery",
    "ScenePartition",
    "discover",
    "discovery_metadata",
    "merge_check_results",
    "scene_partitions",
]


@dataclass(frozen=True)
class ScenePartition:
    """One (week, block) partition resolved against the configured area."""

    key: str
    """The Dagster partition key (``"block|week"`` as Dagster orders dimensions)."""
    week: str
    """Week key (its Thursday, ``YYYY-MM-DD``)."""
    block: str
    """Block id."""
    t0: int
    """First day slot of the week."""
    window: LatticeWindow | None
    """The area's part of the block (None: the block misses the area)."""

    @property
    def days(self) -> tuple[date, date]:
        """Inclusive first and last date of the week."""
        first = date.fromisoformat(self.week)
        return first, first + timedelta(days=6)


@dataclass(frozen=True)
class Discovery:
    """Items of a run's partitions, grouped by week."""

    by_week: dict[str, list[SceneItem]] = field(default_factory=dict)
    """Week key -> the items of that week over the block (sorted by datetime, id)."""
    skipped: tuple[Skip, ...] = ()
    """Items the source could not use, with reasons."""

    def ids(self) -> dict[str, list[str]]:
        """Week key -> item ids (for asset metadata)."""
        return {w: [i.id for i in items] for w, items in sorted(self.by_week.items())}


def scene_partitions(context: AssetExecutionContext, area: AreaResource) -> list[ScenePartition]:
    """The run's partitions (one, or a range of weeks of one block), in week order."""
    out = []
    for key in context.partition_keys:
        mk = key if isinstance(key, MultiPartitionKey) else None
        if mk is None:
            dims = dict(zip(("block", "week"), str(key).split("|"), strict=True))
        else:
            dims = dict(mk.keys_by_dimension)
        out.append(
            ScenePartition(
                str(key),
                dims["week"],
                dims["block"],
                week_t0(dims["week"]),
                area.block_window(dims["block"]),
            )
        )
    return sorted(out, key=lambda p: (p.block, p.week))


def discover(
    collection: str, parts: Sequence[ScenePartition], scenes: SceneSourceResource
) -> Discovery:
    """Search the source once per block over the span of the partitions' weeks."""
    by_week: dict[str, list[SceneItem]] = defaultdict(list)
    skipped: list[Skip] = []
    source = scenes.open()
    blocks: dict[str, list[ScenePartition]] = defaultdict(list)
    for p in parts:
        if p.window is not None:
            blocks[p.block].append(p)
    for block_parts in blocks.values():
        window = block_parts[0].window
        assert window is not None
        weeks = {p.week for p in block_parts}
        start = min(p.days[0] for p in block_parts)
        end = max(p.days[1] for p in block_parts)
        found = source.search(collection, window.bounds(), start, end)
        skipped.extend(found.skipped)
        for item in found.items:
            week = week_key_of(item.datetime.date())
            if week in weeks:
                by_week[week].append(item)
    return Discovery(dict(by_week), tuple(skipped))


def discovery_metadata(found: Discovery) -> dict[str, Any]:
    """Asset metadata of a discovery: item ids per week, their count and the skips with reasons."""
    return {
        "items_by_week": found.ids(),
        "n_items": sum(len(v) for v in found.by_week.values()),
        "skipped": [f"{s.item_id}: {s.reason}" for s in found.skipped],
    }


def merge_check_results(per_week: dict[str, list[AssetCheckResult]]) -> list[AssetCheckResult]:
    """One result per check for a run: passed only if every week passed; failing weeks listed."""
    names: dict[str, list[tuple[str, AssetCheckResult]]] = defaultdict(list)
    for week, results in sorted(per_week.items()):
        for r in results:
            names[str(r.check_name)].append((week, r))
    merged = []
    for name, rows in names.items():
        failing = [(w, r) for w, r in rows if not r.passed]
        first = rows[0][1]
        metadata: dict[str, Any] = {
            "weeks_checked": len(rows),
            "weeks_failed": [w for w, _ in failing],
        }
        if failing:
            metadata["first_failure"] = {
                k: str(v.value) for k, v in (failing[0][1].metadata or {}).items()
            }
        merged.append(
            AssetCheckResult(
                check_name=name,
                asset_key=first.asset_key,
                passed=not failing,
                severity=first.severity,
                metadata=metadata,
            )
        )
    return merged
