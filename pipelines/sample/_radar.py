"""Sentinel-1 RTC scene synthesis: gamma0 backscatter with speckle."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date, timedelta

import numpy as np
from numpy.typing import NDArray

from pipelines.sample._geo import SampleSize
from pipelines.sample._optical import crop_green, forest_green
from pipelines.sample._scene import (
    CLEARING_DATE,
    CONSTRUCTION_DATE,
    FLOOD_END,
    FLOOD_START,
    PERIOD_END,
    LandClass,
    Scene,
)

__all__ = ["S1_ENL", "S1_NODATA", "S1Scene", "render_s1", "s1_dates"]

S1_NODATA = -32768.0
"""Nodata value of the float32 gamma0 rasters (as in Planetary Computer's sentinel-1-rtc)."""
S1_ENL = 4.4
"""Equivalent number of looks of the multiplicative gamma speckle."""

_S1_START = date(2023, 1, 5)
_S1_STEP = 12
_TINY_TARGETS = [
    date(2023, 2, 10),
    date(2023, 5, 5),
    date(2023, 9, 2),
    date(2024, 2, 27),
    date(2024, 4, 3),
    date(2024, 7, 22),
    date(2024, 8, 3),
    date(2024, 8, 15),
    date(2024, 8, 27),
    date(2024, 12, 1),
]


def s1_dates(size: SampleSize) -> list[date]:
    """Overpass dates: every 12 days (Sentinel-1A alone) for demo, 10 dates for tiny."""
    all_dates = []
    d = _S1_START
    while d <= PERIOD_END:
        all_dates.append(d)
        d += timedelta(days=_S1_STEP)
    if size == "demo":
        return all_dates

    def nearest(target: date) -> date:
        return min(all_dates, key=lambda a: abs((a - target).days))

    return sorted({nearest(t) for t in _TINY_TARGETS})


@dataclass(frozen=True, eq=False)
class S1Scene:
    """One synthetic Sentinel-1 RTC overpass (linear gamma0, float32)."""

    day: date
    """Acquisition date."""
    vv: NDArray[np.float32]
    """VV gamma0, linear power."""
    vh: NDArray[np.float32]
    """VH gamma0, linear power."""


def _gamma0(scene: Scene, d: date) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    h, w = scene.grid.height, scene.grid.width
    doy = d.timetuple().tm_yday
    lc = scene.landcover
    wet = 6 <= d.month <= 10
    soil_vv, soil_vh = (0.085, 0.014) if wet else (0.045, 0.008)
    vv = np.empty((h, w))
    vh = np.empty((h, w))

    g = crop_green(doy, scene.crop_offset, scene.kharif_amp, scene.rabi_amp)
    m = lc == LandClass.FARMLAND
    vv[m] = (soil_vv * (1 - g) + 0.12 * g)[m]
    vh[m] = (soil_vh * (1 - g) + 0.032 * g)[m]
    gf = forest_green(doy)
    m = lc == LandClass.FOREST
    vv[m] = 0.09 + 0.03 * gf
    vh[m] = 0.018 + 0.012 * gf
    m = (lc == LandClass.LAKE) | (lc == LandClass.RIVER)
    vv[m] = 0.010 if not wet else 0.014
    vh[m] = 0.0025
    m = lc == LandClass.TOWN
    vv[m] = 0.30
    vh[m] = 0.05
    if d > CLEARING_DATE:
        vv[scene.clearing] = soil_vv
        vh[scene.clearing] = soil_vh
    if d >= CONSTRUCTION_DATE:
        vv[scene.construction] = 0.07
        vh[scene.construction] = 0.011
    if FLOOD_START <= d <= FLOOD_END:
        vv[scene.flood] = 0.011
        vh[scene.flood] = 0.0028
    tex = 1.0 + 0.1 * np.clip(scene.texture, -3, 3)
    return vv * tex, vh * tex


def render_s1(scene: Scene, d: date, seed: int) -> S1Scene:
    """Render the RTC overpass of ``d`` with gamma-distributed speckle.

    Args:
        scene: the sample scene.
        d: overpass date.
        seed: random seed.

    Returns:
        The rendered scene.
    """
    rng = np.random.default_rng([seed, 4, d.toordinal()])
    vv, vh = _gamma0(scene, d)
    shape = vv.shape
    vv = vv * rng.gamma(S1_ENL, 1.0 / S1_ENL, shape)
    vh = vh * rng.gamma(S1_ENL, 1.0 / S1_ENL, shape)
    return S1Scene(day=d, vv=vv.astype(np.float32), vh=vh.astype(np.float32))
