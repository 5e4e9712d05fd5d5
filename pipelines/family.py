"""One ingest loop for every scene family (Sentinel-2, Sentinel-1): plain functions, no Dagster context.

A :class:`SceneFamily` says what differs between the families: the STAC
collection to discover, how a week of items is stacked onto a lattice window,
the checks run on the stack before it is written, the cube bands it fills and
the inventory rows it records. :func:`ingest_range` runs the same loop for
every family over a run's partitions (one, or a range of weeks of one block):
stack each week, check it, hand a week that passed to the write-behind thread
(one cube commit per week, with its partition key), and merge the weeks' check
results into one per check. :mod:`pipelines.family_assets` wires a family into
its two Dagster assets.
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
from pipelines.scenes import Discovery, ScenePartition, WriteBehind, merge_check_results
from pipelines.sources.models import SceneItem
from store.cube import CubeWriter
from store.inventory import InventoryRow

__all__ = ["FamilyCheck", "RangeOutcome", "SceneFamily", "WeekArrays", "ingest_range", "write_week"]


class WeekArrays(Protocol):
    """What the loop reads of a family's week stack: its per-band ``(7, h, w)`` arrays."""

    @property
    def values(self) -> Mapping[str, npt.NDArray[Any]]:
        """Stack band key -> ``(7, h, w)`` array (the keys of :attr:`SceneFamily.bands`)."""
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
    report_skips: bool = False
    """Report discovery skips as ``skipped`` in the cube asset's metadata."""


@dataclass(frozen=True)
class RangeOutcome:
    """What :func:`ingest_range` did over a run's partitions."""

    metadata: dict[str, Any] = field(default_factory=dict)
    """The cube asset's materialisation metadata (weeks written, snapshot ids, skips)."""
    check_results: list[AssetCheckResult] = field(default_factory=list)
    """One result per check for the whole range."""


def ingest_range(
    family: SceneFamily[W],
    parts: Sequence[ScenePartition],
    found: Discovery,
    writer: CubeWriter,
    warn: Callable[[str], None],
) -> RangeOutcome:
    """Stack, check and write each of a run's partitions, in week order.

    A partition without a window or items has its inventory rows removed (a commit
    only if it had some); a week whose ERROR checks fail is not written (and ``warn`` is
    told). Week N is committed on a background thread while week N+1 is read.

    Args:
        family: The scene family.
        parts: The run's partitions (:func:`pipelines.scenes.scene_partitions`).
        found: Their discovered items (:func:`pipelines.scenes.discover`).
        writer: The cube writer (the inventory rows are committed with the chunks).
        warn: Logs a warning (the run's logger).

    Returns:
        The asset metadata and the merged check results.
    """
    per_week: dict[str, list[AssetCheckResult]] = {}
    with WriteBehind() as behind:
        for part in parts:
            items = found.by_week.get(part.week, [])
            if part.window is None or not items:
                with writer.transaction(part.key, metadata={"asset": family.asset}) as tx:
                    tx.write_inventory(f"{family.name}|{part.key}", [])
                continue
            week = family.stack_week(items, part.window, part.t0)
            checks = family.evaluate_checks(week, part.window)
            per_week[part.week] = checks
            if any(not c.passed and c.severity == AssetCheckSeverity.ERROR for c in checks):
                warn(f"{family.name} {part.key}: checks failed, week not written")
                continue
            ids = sorted(i.id for i in items)
            behind.submit(part.week, partial(write_week, family, writer, part, week, ids))
    written = behind.results()
    results = merge_check_results(per_week) or [
        AssetCheckResult(
            check_name=c.name, passed=True, metadata={"note": "no scenes in these partitions"}
        )
        for c in family.checks
    ]
    metadata: dict[str, Any] = {"weeks_written": sorted(written), "snapshots": written}
    if family.report_skips:
        metadata["skipped"] = [f"{s.item_id}: {s.reason}" for s in found.skipped]
    return RangeOutcome(metadata, results)


def write_week(
    family: SceneFamily[W],
    writer: CubeWriter,
    part: ScenePartition,
    week: W,
    item_ids: list[str],
) -> str:
    """Commit one week (all 7 days, so the partition owns its chunks) and its inventory rows.

    The rows go into the same commit as the chunks: a snapshot never has one without the other.

    Returns:
        The snapshot id of the commit.
    """
    win = part.window
    assert win is not None
    tslots = np.arange(part.t0, part.t0 + 7)
    metadata: dict[str, Any] = {"asset": family.asset}
    if family.commit_items:
        metadata["items"] = item_ids
    with writer.transaction(part.key, metadata=metadata) as tx:
        for key, band in family.bands:
            tx.write(band, tslots, win.lat_q0, win.lng_q0, week.values[key])
        tx.write(family.flag_band, tslots, win.lat_q0, win.lng_q0, family.flags(week))
        rows = family.inventory_rows(week, family.name, part.block)
        tx.write_inventory(f"{family.name}|{part.key}", rows)
    return str(tx.snapshot_id)
