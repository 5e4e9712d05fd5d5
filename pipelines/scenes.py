"""Shared glue of the scene families: partition -> window, week, items."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date, timedelta

from dagster import AssetExecutionContext, MultiPartitionKey

from pipelines.lattice import LatticeWindow
from pipelines.partitions import week_t0
from pipelines.resources import AreaResource, SceneSourceResource
from pipelines.sources.models import SearchResult

__all__ = ["ScenePartition", "discover", "scene_partition"]


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


def scene_partition(context: AssetExecutionContext, area: AreaResource) -> ScenePartition:
    """Resolve the run's partition."""
    key = context.partition_key
    if not isinstance(key, MultiPartitionKey):
        raise ValueError(f"expected a week x block partition key, got {key!r}")
    dims = key.keys_by_dimension
    return ScenePartition(
        str(key),
        dims["week"],
        dims["block"],
        week_t0(dims["week"]),
        area.block_window(dims["block"]),
    )


def discover(collection: str, part: ScenePartition, scenes: SceneSourceResource) -> SearchResult:
    """Search the source for a partition's items."""
    if part.window is None:
        return SearchResult(items=(), skipped=())
    start, end = part.days
    return scenes.open().search(collection, part.window.bounds(), start, end)
