"""Sentinel-1 RTC ingestion of one partition (week x block): plain functions, no Dagster."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
from rasterio.enums import Resampling

from pipelines.lattice import LatticeWindow, read_onto_lattice
from pipelines.sentinel1.compute import backscatter_bands
from pipelines.sources.models import SceneItem, Skip
from pipelines.stacking import days_of_week, empty_week, unreadable
from store.cube.bands import family_scalars
from store.inventory import InventoryRow

__all__ = ["S1_BANDS", "S1Week", "inventory_rows", "stack_week"]

S1_BANDS = tuple(short for short, _ in family_scalars("s1"))


@dataclass(frozen=True)
class S1Week:
    """Seven days of backscatter for one lattice window."""

    t0: int
    """First day slot of the week."""
    values: dict[str, npt.NDArray[np.float32]]
    """``vv``/``vh``/``vh_vv`` -> (7, h, w) float32 linear (NaN = no observation)."""
    valid: npt.NDArray[np.uint8]
    """(7, h, w): 1 where both polarisations were observed."""
    item_ids: dict[int, tuple[str, ...]]
    """Day slot -> merged item ids."""
    skipped: tuple[Skip, ...]
    """Unreadable items with reasons."""


def stack_week(items: Sequence[SceneItem], window: LatticeWindow, t0: int) -> S1Week:
    """Read the week's S1 items onto the window; same-day scenes merge first-valid."""
    values, valid = empty_week(window, S1_BANDS)
    ids: dict[int, tuple[str, ...]] = {}
    skipped: list[Skip] = []
    for slot, day_items in days_of_week(items, t0, skipped):
        used = []
        for it in day_items:
            try:
                pol = {
                    p: read_onto_lattice(it.assets[p].href, window, resampling=Resampling.bilinear)
                    for p in ("vv", "vh")
                }
            except Exception as exc:
                skipped.append(unreadable(it, exc))
                continue
            bands = backscatter_bands(pol["vv"], pol["vh"])
            ok = np.isfinite(bands["vv"]) & np.isfinite(bands["vh"]) & (valid[slot - t0] == 0)
            if ok.any():
                for k in S1_BANDS:
                    values[k][slot - t0][ok] = bands[k][ok]
                valid[slot - t0][ok] = 1
                used.append(it.id)
        if used:
            ids[slot] = tuple(used)
    return S1Week(t0, values, valid, ids, tuple(skipped))


def inventory_rows(week: S1Week, band: str, block: str) -> list[InventoryRow]:
    """Inventory rows of a stacked week: one per day with scenes (valid cells counted as clear)."""
    rows = []
    for slot, ids in sorted(week.item_ids.items()):
        valid = int(week.valid[slot - week.t0].sum())
        rows.append(InventoryRow(band, slot, block, ids, clear_cells=valid, total_cells=valid))
    return rows
