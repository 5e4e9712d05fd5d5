"""Sentinel-2 ingestion of one partition (week x block): plain functions, no Dagster.

Items -> per-scene reflectances on the lattice window (rioxarray read of the
window only, scale/offset from the parsed item, bilinear for reflectance,
nearest for SCL) -> SCL mask -> indices -> same-day merge -> a 7-day stack
that owns its cube chunks whole (days without scenes are written as fill, so
re-materialising is idempotent).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt
from rasterio.enums import Resampling

from pipelines.lattice import LatticeWindow, read_onto_lattice
from pipelines.sentinel2.compute import (
    INDEX_NAMES,
    DayComposite,
    compute_indices,
    dn_to_reflectance,
    merge_same_day,
    scl_clear,
)
from pipelines.sources.models import SceneItem, Skip
from pipelines.stacking import days_of_week, empty_week, unreadable
from store.inventory import InventoryRow

__all__ = [
    "REFLECTANCE_ROLES",
    "SceneStats",
    "WeekStack",
    "inventory_rows",
    "read_scene",
    "stack_week",
]

REFLECTANCE_ROLES = ("blue", "green", "red", "nir", "swir16")
_VEGETATION_SCL = 4


@dataclass(frozen=True)
class SceneStats:
    """Sanity figures of one scene over the window (feed the asset checks)."""

    item_id: str
    """STAC item id."""
    veg_red_median: float | None
    """Median red reflectance over SCL-vegetation cells (negative => offset applied twice)."""
    clear_fraction: float
    """Clear cells / observed cells."""


@dataclass(frozen=True)
class WeekStack:
    """Seven days of indices and clear flags for one lattice window."""

    t0: int
    """First day slot (the week's Thursday, a multiple of 7)."""
    values: dict[str, npt.NDArray[np.float32]]
    """Index name -> (7, h, w) float32 (NaN where no clear observation)."""
    clear: npt.NDArray[np.uint8]
    """(7, h, w): 0 no observation, 1 masked, 2 clear."""
    days: dict[int, DayComposite] = field(default_factory=dict)
    """Day slot -> the day's composite, for days with scenes."""
    scene_stats: tuple[SceneStats, ...] = ()
    """Per-scene sanity figures."""
    skipped: tuple[Skip, ...] = ()
    """Items that could not be read, with reasons."""


def read_scene(
    item: SceneItem, window: LatticeWindow
) -> tuple[
    dict[str, npt.NDArray[np.float32]], npt.NDArray[np.bool_], npt.NDArray[np.bool_], SceneStats
]:
    """Read one S2 item onto a lattice window.

    Returns:
        ``(indices, observed, clear, stats)``.
    """
    refl: dict[str, npt.NDArray[np.float32]] = {}
    for role in REFLECTANCE_ROLES:
        a = item.assets[role]
        dn = read_onto_lattice(
            a.href, window, resampling=Resampling.nearest, dst_nodata=0, dst_dtype=np.float32
        )
        # bilinear on DN would blend nodata edges; nearest keeps DN exact at ~9 m cells from 10/20 m pixels
        refl[role] = dn_to_reflectance(dn, a.scale, a.offset, nodata=0)
    scl = read_onto_lattice(
        item.assets["scl"].href,
        window,
        resampling=Resampling.nearest,
        dst_nodata=0,
        dst_dtype=np.float32,
    )
    observed = np.isfinite(refl["red"]) & np.isfinite(refl["nir"]) & (scl > 0)
    clear = observed & scl_clear(scl)
    idx = compute_indices(refl)
    veg = clear & (scl == _VEGETATION_SCL)
    veg_red = float(np.median(refl["red"][veg])) if veg.any() else None
    n_obs = int(observed.sum())
    stats = SceneStats(item.id, veg_red, (int(clear.sum()) / n_obs) if n_obs else 0.0)
    return idx, observed, clear, stats


def stack_week(items: Sequence[SceneItem], window: LatticeWindow, t0: int) -> WeekStack:
    """Read, mask, merge and stack the items of one week over one window.

    Args:
        items: S2 items of the week (any order; merged per day in item-id order).
        window: the partition's lattice window.
        t0: first day slot of the week (multiple of 7).
    """
    values, clear = empty_week(window, INDEX_NAMES)
    days: dict[int, DayComposite] = {}
    stats: list[SceneStats] = []
    skipped: list[Skip] = []
    for slot, day_items in days_of_week(items, t0, skipped):
        scenes = []
        for it in day_items:
            try:
                idx, observed, ok, st = read_scene(it, window)
            except Exception as exc:
                skipped.append(unreadable(it, exc))
                continue
            stats.append(st)
            if observed.any():
                scenes.append((it.id, idx, observed, ok))
        if not scenes:
            continue
        day = merge_same_day(scenes)
        days[slot] = day
        for k in INDEX_NAMES:
            values[k][slot - t0] = day.indices[k]
        clear[slot - t0] = day.clear
    return WeekStack(t0, values, clear, days, tuple(stats), tuple(skipped))


def inventory_rows(stack: WeekStack, band: str, block: str) -> list[InventoryRow]:
    """Inventory rows of a stacked week: one per day with scenes, with its clear and observed cells."""
    return [
        InventoryRow(
            band,
            slot,
            block,
            day.item_ids,
            clear_cells=day.n_clear,
            total_cells=day.n_observed,
            cloud_fraction=(1 - day.n_clear / day.n_observed) if day.n_observed else None,
        )
        for slot, day in sorted(stack.days.items())
    ]
