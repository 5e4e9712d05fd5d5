"""One ingest loop for every scene family (Sentinel-2, Sentinel-1): plain functions, no Dagster context.

A :class:`SceneFamily` says what differs between the families: the STAC
collection to discover, how a week of items is stacked onto a lattice window,
the checks run on the stack before it is written, the cube bands it fills and
the inventory rows it records. :func:`ingest_range` runs the same loop for
every family over a run's partitions (one, or a range of weeks of one block):
stack each week, check it, hand a week that passed to the write-behind thread
(one cube commit per week, with its partition key), and return each partition's
own outcome (its checks, metadata, snapshot, or why it wrote nothing).
:mod:`pipelines.family_assets` wires a family into its two Dagster assets.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Generic, Protocol, TypeVar

import numpy as np
import numpy.typing as npt
from dagster import AssetCheckResult, AssetCheckSeverity

from pipelines.lattice import LatticeWindow
from pipelines.scenes import (
    Discovery,
    ScenePartition,
    WriteBehind,
    skip_line,
)
from pipelines.sources.models import SceneItem, Skip
from store.cube import CubeReader, CubeTransaction, CubeWriter
from store.inventory import InventoryRow

__all__ = [
    "KEEP_CHECK",
    "FamilyCheck",
    "PartitionOutcome",
    "PartitionWork",
    "SceneFamily",
    "WeekArrays",
    "fill_week",
    "ingest_range",
    "partition_work",
    "prepare_week",
    "week_outcome",
    "write_week",
]


class WeekArrays(Protocol):
    """What the loop reads of a family's week stack: its per-band ``(7, h, w)`` arrays."""

    @property
    def values(self) -> Mapping[str, npt.NDArray[Any]]:
        """Stack band key -> ``(7, h, w)`` array (the keys of :attr:`SceneFamily.bands`)."""
        ...

    @property
    def skipped(self) -> tuple[Skip, ...]:
        """The week's items that could not be read, with reasons."""
        ...


W = TypeVar("W", bound=WeekArrays)


@dataclass(frozen=True)
class FamilyCheck:
    """One asset check of a family's cube asset."""

    name: str
    """Check name (the ``check_name`` of the results)."""
    description: str
    """What the check asserts (shown by Dagster)."""


@dataclass(frozen=True)
class SceneFamily(Generic[W]):
    """What one scene family discovers, stacks, checks, writes and records.

    Every callable is a plain function of the family's package; the loop
    (:func:`ingest_range`) and the asset wiring are the same for all families.
    """

    name: str
    """Short name: prefix of the asset names and of the inventory partitions, and the inventory band (``"s1"``)."""
    collection: str
    """STAC collection searched for the family's items."""
    group: str
    """Dagster asset group."""
    asset: str
    """Name of the cube asset (also the ``asset`` of its commits' metadata)."""
    title: str
    """Mission and product as people name them (``"Sentinel-1 RTC"``)."""
    description: str
    """Description of the cube asset."""
    checks: tuple[FamilyCheck, ...]
    """The cube asset's checks, in the order they are reported."""
    stack_week: Callable[[Sequence[SceneItem], LatticeWindow, int], W]
    """``(items, window, t0) -> week``: read the week's items onto the window."""
    evaluate_checks: Callable[[W, LatticeWindow], list[AssetCheckResult]]
    """``(week, window) -> results``: the checks over a stacked week (a failed ERROR check stops its write)."""
    bands: tuple[tuple[str, str], ...]
    """``(key in week.values, cube band)``, written in this order."""
    flag_band: str
    """Cube band of the week's per-cell flag, written after :attr:`bands`."""
    flags: Callable[[W], npt.NDArray[np.uint8]]
    """``week -> (7, h, w)`` flag array written to :attr:`flag_band`."""
    inventory_rows: Callable[[W, str, str], list[InventoryRow]]
    """``(week, band, block) -> rows``: the week's inventory rows (band is :attr:`name`)."""
    commit_items: bool = False
    """Record the week's sorted item ids as ``items`` in the commit metadata."""

    @property
    def all_checks(self) -> tuple[FamilyCheck, ...]:
        """The family's checks, then :data:`KEEP_CHECK` (every family has it)."""
        return (*self.checks, KEEP_CHECK)


KEEP_CHECK = FamilyCheck(
    "stored_overpasses_kept",
    "the week's new contents keep every overpass the partition already stores; otherwise the"
    " week is held: neither its cube chunks nor its inventory rows are rewritten",
)
"""The check behind the rule "a re-ingest never removes a stored overpass" (see :func:`ingest_range`)."""


@dataclass(frozen=True)
class PartitionOutcome:
    """What :func:`ingest_range` did with one (week, block) partition of a run.

    A partition is *written* (its snapshot committed, or nothing to change) or *stopped*: a
    failed ERROR check (a held week included) kept its week out of the cube, and
    :attr:`reason` says why. The Dagster wiring reports a written partition as a
    materialisation and a stopped one as a failure of the partition.
    """

    key: str
    """The Dagster partition key (``"block|week"``)."""
    week: str
    """Week key."""
    checks: tuple[AssetCheckResult, ...]
    """One result per check of :attr:`SceneFamily.all_checks`, in that order."""
    metadata: dict[str, Any] = field(default_factory=dict)
    """This partition's own metadata: scenes found, read and skipped, clear fraction,
    chunks written, the snapshot it committed (``"none"`` if it wrote nothing), held ids."""
    reason: str | None = None
    """Why nothing was written (None: written)."""

    @property
    def written(self) -> bool:
        """The partition's week is in the cube (or it had nothing to write)."""
        return self.reason is None

    def summary(self) -> str:
        """One operator-readable line: what the partition read, skipped, wrote or why it did not."""
        m = self.metadata
        head = (
            f"{self.key}: {m.get('scenes_read', 0)} of {len(m.get('scenes', []))} scenes read,"
            f" {len(m.get('skipped', []))} skipped"
        )
        if self.reason is not None:
            return f"{head}; nothing written: {self.reason}"
        if "outside_area" in m:
            return f"{head}; nothing to read: {m['outside_area']}"
        clear = m.get("clear_fraction")
        clear_text = f", clear {clear:.0%}" if isinstance(clear, float) else ""
        return (
            f"{head}{clear_text}; {m.get('chunks_written', 0)} chunks written,"
            f" snapshot {m.get('snapshot_id', 'none')}"
        )


def ingest_range(
    family: SceneFamily[W],
    parts: Sequence[ScenePartition],
    found: Discovery,
    writer: CubeWriter,
    warn: Callable[[str], None],
) -> list[PartitionOutcome]:
    """Stack, check and write each of a run's partitions, in week order.

    The rule that keeps what is stored: a week is rewritten (cube chunks and
    inventory rows together, all 7 days) only when its new contents keep every
    item id the partition's inventory rows already name. Otherwise the week is
    *held*: neither the cube nor the inventory is touched, its
    ``stored_overpasses_kept`` ERROR check fails with each missing id and why
    (the discovery or read skip that names it, a duplicate refused, "no longer
    discovered", "no observed cells"), and ``warn`` is told. The pipeline cannot
    tell a withdrawn scene from one that a broken entry hides (a moved bbox or a
    year-9999 datetime look like absence to a search), so it never removes one:
    removing a stored overpass is an operator's decision, not a side effect of a
    bad catalog or a half-downloaded file. A week with nothing stored is written
    with whatever could be read; its skips are reported.

    A partition without a window or items that stores nothing has its inventory
    rows removed (a commit only if it had some); a week whose ERROR checks fail is
    not written. The rows a week stores are read from the cube's tip inventory
    (versioned with the chunks) when the run starts. Week N is committed on a
    background thread while week N+1 is read. Every partition's outcome carries its
    own checks, skips (discovery skips without an acquisition time are named in every
    partition of the run: they cannot be placed in a week) and snapshot.

    Args:
        family: The scene family.
        parts: The run's partitions (:func:`pipelines.scenes.scene_partitions`).
        found: Their discovered items (:func:`pipelines.scenes.discover`).
        writer: The cube writer (the inventory rows are committed with the chunks).
        warn: Logs a warning (the run's logger).

    Returns:
        One outcome per partition, in week order.
    """
    # only the range's own partitions: the cost follows the range, not the store
    keys = [f"{family.name}|{p.key}" for p in parts]
    tip = CubeReader(writer.data_dir).inventory_of(keys)
    undated = [skip_line(s) for s in found.skipped if s.when is None]
    pending: list[tuple[ScenePartition, list[AssetCheckResult], dict[str, Any], str | None]] = []
    with WriteBehind[tuple[str, int]]() as behind:
        for part in sorted(parts, key=lambda p: (p.week, p.block)):
            work = partition_work(family, part, found, tip.partition_item_ids, undated)
            if work.items or work.stored:
                week, rows, results, meta, reason = prepare_week(family, work)
            else:
                week, rows, results, meta, reason = None, [], [], work.empty_meta(), None
            if reason is not None:
                warn(f"{family.name} {part.key}: {reason}")
            elif week is None:
                behind.submit(part.key, partial(_clear_week, family, writer, part))
            else:
                ids = sorted(i.id for i in work.items)
                lines = meta["skipped"][: len(meta["skipped"]) - len(undated)]
                behind.submit(
                    part.key, partial(write_week, family, writer, part, week, ids, rows, lines)
                )
            pending.append((part, results, meta, reason))
    written = behind.results()
    return [
        week_outcome(family, part, results, meta, reason, written.get(part.key))
        for part, results, meta, reason in pending
    ]


def week_outcome(
    family: SceneFamily[Any],
    part: ScenePartition,
    results: list[AssetCheckResult],
    meta: dict[str, Any],
    reason: str | None,
    written: tuple[str, int] | None,
) -> PartitionOutcome:
    """A partition's outcome: its checks completed, the snapshot and chunks it wrote in ``meta``.

    ``written`` is ``(snapshot id, chunks written)`` of a written partition (None otherwise).
    """
    if reason is None and written is not None:
        snapshot, chunks = written
        meta["snapshot_id"] = snapshot or "none"
        meta["chunks_written"] = chunks
    else:
        meta["snapshot_id"] = "none"
        meta["chunks_written"] = 0
    return PartitionOutcome(part.key, part.week, _complete(family, results, meta), meta, reason)


@dataclass(frozen=True)
class PartitionWork:
    """What one partition's task needs: its window, items, stored ids and skips (picklable)."""

    part: ScenePartition
    """The partition."""
    items: tuple[SceneItem, ...]
    """The week's discovered items over the block (empty when the block misses the area)."""
    stored: frozenset[str]
    """Item ids the partition's inventory rows already name (at the run's start)."""
    skips: tuple[Skip, ...]
    """The discovery skips of the week."""
    found_skipped: tuple[Skip, ...]
    """Every discovery skip of the run (the reasons a stored id may be missing)."""
    undated: tuple[str, ...]
    """Skip lines of discovery skips without an acquisition time (named in every partition)."""

    def empty_meta(self) -> dict[str, Any]:
        """The metadata of a partition with no items and nothing stored."""
        meta: dict[str, Any] = {
            "scenes": [],
            "scenes_read": 0,
            "skipped": [*(skip_line(s) for s in self.skips), *self.undated],
        }
        if self.part.window is None:  # e.g. a block added by hand in the UI
            meta["outside_area"] = f"block {self.part.block} does not meet the area"
        return meta


def partition_work(
    family: SceneFamily[Any],
    part: ScenePartition,
    found: Discovery,
    stored_ids: Callable[[str], frozenset[str]],
    undated: Sequence[str],
) -> PartitionWork:
    """Gather one partition's inputs from the run's discovery and the tip's inventory."""
    items = found.by_week.get(part.week, []) if part.window is not None else []
    return PartitionWork(
        part,
        tuple(items),
        stored_ids(f"{family.name}|{part.key}"),
        tuple(found.skips_in(part.week)),
        found.skipped,
        tuple(undated),
    )


def prepare_week(
    family: SceneFamily[W], work: PartitionWork
) -> tuple[W | None, list[InventoryRow], list[AssetCheckResult], dict[str, Any], str | None]:
    """Stack and check one partition's week and decide whether it may be written.

    Pure computation (reads the scenes, no store access), so it runs where the scenes are
    read: in the run's process or as a task on a Dask worker.

    Returns:
        ``(week, rows, results, metadata, reason)``: the stack (None when there are no
        items: the week's inventory rows are to be removed), its inventory rows, the check
        results, the partition's metadata so far, and why it must not be written (None: it may).
    """
    part, items = work.part, work.items
    skips = list(work.skips)
    meta: dict[str, Any] = {"scenes": sorted(i.id for i in items), "scenes_read": 0}
    results: list[AssetCheckResult] = []
    found = Discovery(skipped=work.found_skipped)
    week: W | None = None
    rows: list[InventoryRow] = []
    if not items:
        dropped = _dropped(work.stored, frozenset(), found, skips, items)
    else:
        assert part.window is not None
        week = family.stack_week(items, part.window, part.t0)
        skips = [*skips, *week.skipped]
        rows = family.inventory_rows(week, family.name, part.block)
        new_ids = frozenset(i for r in rows for i in r.item_ids)
        dropped = _dropped(work.stored, new_ids, found, skips, items)
        results = family.evaluate_checks(week, part.window)
        unread = {s.item_id for s in week.skipped}
        meta["scenes_read"] = sum(1 for i in items if i.id not in unread)
        total = sum(r.total_cells for r in rows)
        meta["clear_fraction"] = (
            round(sum(r.clear_cells for r in rows) / total, 4) if total else 0.0
        )
    results.append(_keep_check(family, dropped))
    meta["skipped"] = [*(skip_line(s) for s in skips), *work.undated]
    reason = None
    if dropped:
        meta["held"] = dropped
        reason = f"week held, stored overpasses kept: {'; '.join(dropped)}"
    else:
        failed = [
            str(c.check_name)
            for c in results
            if not c.passed and c.severity == AssetCheckSeverity.ERROR
        ]
        if failed:
            reason = f"ERROR checks failed: {', '.join(failed)}"
    return week, rows, results, meta, reason


def _complete(
    family: SceneFamily[Any], results: list[AssetCheckResult], meta: dict[str, Any]
) -> tuple[AssetCheckResult, ...]:
    """One result per check, in the family's order; a check not evaluated passes with a note."""
    by_name = {str(r.check_name): r for r in results}
    note = (
        "not evaluated: no scenes read this week" if meta.get("scenes") else "no scenes this week"
    )
    return tuple(
        by_name.get(c.name)
        or AssetCheckResult(
            check_name=c.name, asset_key=family.asset, passed=True, metadata={"note": note}
        )
        for c in family.all_checks
    )


def _clear_week(
    family: SceneFamily[Any], writer: CubeWriter, part: ScenePartition
) -> tuple[str, int]:
    """Commit a week with no items: its inventory rows removed (no commit when it had none)."""
    with writer.transaction(part.key, metadata={"asset": family.asset}) as tx:
        tx.write_inventory(f"{family.name}|{part.key}", [])
    return str(tx.snapshot_id), 0


def _dropped(
    stored: frozenset[str],
    new_ids: frozenset[str],
    found: Discovery,
    skips: Sequence[Skip],
    items: Sequence[SceneItem],
) -> list[str]:
    """Each stored item id the week's new contents would drop, and why (``id: reason``)."""
    by_id = {s.item_id: s for s in (*found.skipped, *skips)}
    discovered = {i.id for i in items}
    out = []
    for item_id in sorted(stored - new_ids):
        if item_id in by_id:
            why = f"[{by_id[item_id].code}] {by_id[item_id].reason}"
        elif item_id in discovered:
            why = "read, but it has no observed cells over the block any more"
        else:
            why = "no longer discovered for this week and block"
        out.append(f"{item_id}: stored, would be dropped: {why}"[:500])
    return out


def _keep_check(family: SceneFamily[Any], dropped: list[str]) -> AssetCheckResult:
    """The ``stored_overpasses_kept`` result of one week (fails when it would drop a stored id)."""
    return AssetCheckResult(
        check_name=KEEP_CHECK.name,
        asset_key=family.asset,
        passed=not dropped,
        metadata={"would_drop": dropped},
    )


def write_week(
    family: SceneFamily[W],
    writer: CubeWriter,
    part: ScenePartition,
    week: W,
    item_ids: list[str],
    rows: list[InventoryRow],
    skipped: list[str],
) -> tuple[str, int]:
    """Commit one week (all 7 days, so the partition owns its chunks) and its inventory rows.

    The commit metadata names the week's skips (``skipped``: ``id: [code] reason``).
    The rows go into the same commit as the chunks: a snapshot never has one without the other.

    Returns:
        The snapshot id of the commit and the number of chunks it wrote.
    """
    metadata: dict[str, Any] = {"asset": family.asset, "skipped": skipped}
    if family.commit_items:
        metadata["items"] = item_ids
    with writer.transaction(part.key, metadata=metadata) as tx:
        fill_week(family, part, week, rows, tx)
    return str(tx.snapshot_id), tx.chunks_written


def fill_week(
    family: SceneFamily[W],
    part: ScenePartition,
    week: W | None,
    rows: list[InventoryRow],
    tx: CubeTransaction,
) -> None:
    """Write one week's bands, flag and inventory rows into a transaction (all 7 days).

    ``week`` None: the week has no items; only its inventory rows are removed.
    """
    if week is not None:
        win = part.window
        assert win is not None
        tslots = np.arange(part.t0, part.t0 + 7)
        # the week's arrays are not changed once stacked: the transaction holds them, no copy
        for key, band in family.bands:
            tx.write(band, tslots, win.lat_q0, win.lng_q0, week.values[key], copy=False)
        tx.write(family.flag_band, tslots, win.lat_q0, win.lng_q0, family.flags(week), copy=False)
    tx.write_inventory(f"{family.name}|{part.key}", rows)
