"""Shared glue of the scene families: a run's (week, block) partitions, their windows and items.

A run materialises one partition or, in a single-run backfill, a range of
weeks of one block (Dagster splits multi-partition backfills per block).
Discovery searches the source once for the whole range and groups the items
by week, so a range costs one search, not one per week.

Writes run behind the reads (:class:`WriteBehind`): while week N is compressed
and committed on a background thread, week N+1 is read and reprojected on the
calling thread (GDAL's warp and the Blosc/Zstd codecs release the GIL, so on
two cores the two overlap). Each week is still its own commit with its own
partition key, in week order, and a write failure stops the run at the next
week.
"""

from __future__ import annotations

from collections import defaultdict, deque
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import date, timedelta
from types import TracebackType
from typing import Any, Generic, TypeVar

from dagster import AssetExecutionContext, MultiPartitionKey

from pipelines.lattice import LatticeWindow
from pipelines.partitions import week_key_of, week_t0
from pipelines.resources import AreaResource, SceneSourceResource
from pipelines.sources.models import SceneItem, Skip

__all__ = [
    "Discovery",
    "ScenePartition",
    "WriteBehind",
    "discover",
    "discovery_metadata",
    "partition_discovery_metadata",
    "scene_partitions",
    "skip_line",
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
    """Items the source could not use, with reasons (each once, also when several searches saw it)."""

    def skips_in(self, week: str) -> list[Skip]:
        """The skips whose item's acquisition time falls in ``week`` (those without a time: none)."""
        return [
            s for s in self.skipped if s.when is not None and week_key_of(s.when.date()) == week
        ]

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
    return Discovery(dict(by_week), tuple(dict.fromkeys(skipped)))


def discovery_metadata(found: Discovery) -> dict[str, Any]:
    """Asset metadata of a discovery: item ids per week, their count and the skips with reasons."""
    return {
        "items_by_week": found.ids(),
        "n_items": sum(len(v) for v in found.by_week.values()),
        "skipped": [skip_line(s) for s in found.skipped],
    }


def partition_discovery_metadata(found: Discovery, week: str) -> dict[str, Any]:
    """One partition's discovery metadata: its week's item ids, their count, its skips.

    Skips without an acquisition time cannot be placed in a week: every partition names them.
    """
    ids = [i.id for i in found.by_week.get(week, [])]
    skips = [*found.skips_in(week), *(s for s in found.skipped if s.when is None)]
    return {"item_ids": ids, "n_items": len(ids), "skipped": [skip_line(s) for s in skips]}


def skip_line(skip: Skip) -> str:
    """One skip as reported in metadata and the CLI summary: ``item id: [code] reason``."""
    return f"{skip.item_id}: [{skip.code}] {skip.reason}"


T = TypeVar("T")


class WriteBehind(Generic[T]):
    """Run a range's weekly cube writes on one background thread, behind the reads.

    ``submit`` queues a week's write (a callable that commits it and returns
    what the caller wants back, e.g. the snapshot id) and returns at once, so the caller reads the next week
    while this one is compressed and committed. At most ``depth`` writes wait
    or run at a time (memory stays bounded to ``depth + 1`` week stacks, each with the copy
    its open cube transaction holds until it is encoded);
    writes run one at a time, in submission order. A write that raised makes
    the next ``submit`` (or the exit of the ``with`` block) raise it, so a
    failing commit stops the range instead of being dropped. Leaving the block
    waits for every queued write, also when the block raised: a week that was
    handed over is committed or has failed before the asset returns.

    Args:
        depth: Writes that may be pending while the caller reads on (>= 1).
    """

    def __init__(self, depth: int = 1) -> None:
        if depth < 1:
            raise ValueError("depth must be >= 1")
        self.depth = depth
        self._pool: ThreadPoolExecutor | None = None
        self._pending: deque[tuple[str, Future[T]]] = deque()
        self._done: dict[str, T] = {}

    def __enter__(self) -> WriteBehind[T]:
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="earthmem-write")
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        pool, self._pool = self._pool, None
        try:
            if exc_type is None:
                self._wait(0)
            else:  # the block failed: let handed-over weeks finish, keep the block's error
                while self._pending:
                    week, fut = self._pending.popleft()
                    if fut.exception() is None:
                        self._done[week] = fut.result()
        finally:
            if pool is not None:
                pool.shutdown(wait=True)

    def submit(self, week: str, write: Callable[[], T]) -> None:
        """Queue one week's write (waits first while ``depth`` writes are pending).

        Args:
            week: The week's key (the key of :meth:`results`).
            write: Commits the week; returns what :meth:`results` gives for it.

        Raises:
            RuntimeError: Used outside its ``with`` block.
            Exception: Whatever an earlier write raised.
        """
        if self._pool is None:
            raise RuntimeError("WriteBehind.submit outside its with block")
        self._wait(self.depth - 1)
        self._pending.append((week, self._pool.submit(write)))

    def _wait(self, keep: int) -> None:
        while len(self._pending) > keep:
            week, fut = self._pending.popleft()
            self._done[week] = fut.result()

    def results(self) -> dict[str, T]:
        """Week key -> what the write returned, of the writes that finished (all after the block)."""
        return dict(self._done)
