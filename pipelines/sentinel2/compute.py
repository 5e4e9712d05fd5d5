"""Sentinel-2 L2A: scale/offset, SCL masking, spectral indices, same-day merge.

Pure numpy. The Dagster assets in :mod:`pipelines.sentinel2.assets` only wire
these to the sources and the cube.

SCL classes dropped: 0 no data, 1 saturated/defective, 3 cloud shadow,
8 cloud (medium probability), 9 cloud (high probability), 10 thin cirrus.
Kept: 2 dark area pixels (real surfaces: dark soil, burn scars, terrain
shade; dropping them would bias NDVI up in dark farmland), 4 vegetation,
5 bare, 6 water, 7 unclassified, 11 snow/ice (a valid observation of the
surface; indices over snow are what is there).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from store.cube.bands import family_scalars

__all__ = [
    "CLEAR",
    "DROPPED_SCL",
    "INDEX_NAMES",
    "MASKED",
    "NO_OBSERVATION",
    "DayComposite",
    "compute_indices",
    "dn_to_reflectance",
    "merge_same_day",
    "scl_clear",
]

DROPPED_SCL = (0, 1, 3, 8, 9, 10)
"""SCL classes treated as not clear (see module docstring for 2 and 11)."""
NO_OBSERVATION, MASKED, CLEAR = 0, 1, 2
"""Values of the per-cell ``s2/clear`` array: not observed / observed but masked / clear."""
INDEX_NAMES = tuple(short for short, _ in family_scalars("s2"))

Float = npt.NDArray[np.float32]


def dn_to_reflectance(
    dn: npt.NDArray[np.generic], scale: float, offset: float, nodata: float | None = 0
) -> Float:
    """Digital numbers to surface reflectance: ``dn * scale + offset``; nodata -> NaN."""
    r = dn.astype(np.float32) * np.float32(scale) + np.float32(offset)
    if nodata is not None:
        r[dn == nodata] = np.nan
    return r


def scl_clear(scl: npt.NDArray[np.generic]) -> npt.NDArray[np.bool_]:
    """True where the scene classification is a clear observation of the surface."""
    s = np.nan_to_num(np.asarray(scl, dtype=np.float32), nan=0.0).astype(np.int16)
    return ~np.isin(s, DROPPED_SCL)


def _ratio(a: Float, b: Float) -> Float:
    with np.errstate(divide="ignore", invalid="ignore"):
        out = (a - b) / (a + b)
    out[~np.isfinite(out)] = np.nan
    return out.astype(np.float32)


def compute_indices(refl: Mapping[str, Float]) -> dict[str, Float]:
    """The five optical indices from reflectances keyed by role.

    - ndvi = (nir - red) / (nir + red)
    - ndwi = (green - nir) / (green + nir)            (McFeeters 1996)
    - ndmi = (nir - swir16) / (nir + swir16)          (Gao 1996 / NDMI)
    - lswi = (nir - swir16) / (nir + swir16)          (Xiao 2002; same bands as NDMI for S2,
      kept as its own band because agents ask for it by name)
    - evi  = 2.5 * (nir - red) / (nir + 6 red - 7.5 blue + 1)
    """
    blue, green, red, nir, swir16 = (refl[k] for k in ("blue", "green", "red", "nir", "swir16"))
    with np.errstate(divide="ignore", invalid="ignore"):
        evi = 2.5 * (nir - red) / (nir + 6.0 * red - 7.5 * blue + 1.0)
    evi = evi.astype(np.float32)
    evi[~np.isfinite(evi)] = np.nan
    ndmi = _ratio(nir, swir16)
    return {
        "ndvi": _ratio(nir, red),
        "ndwi": _ratio(green, nir),
        "ndmi": ndmi,
        "lswi": ndmi.copy(),
        "evi": evi,
    }


@dataclass(frozen=True)
class DayComposite:
    """One day's indices on a lattice window, after masking and merging scenes."""

    indices: dict[str, Float]
    """Index name -> (rows, cols) float32, NaN where not clear."""
    clear: npt.NDArray[np.uint8]
    """Per cell: 0 no observation, 1 observed but masked, 2 clear."""
    item_ids: tuple[str, ...]
    """Source STAC item ids merged into this day."""

    @property
    def n_clear(self) -> int:
        """Number of clear cells."""
        return int((self.clear == CLEAR).sum())

    @property
    def n_observed(self) -> int:
        """Number of cells any scene covered."""
        return int((self.clear != NO_OBSERVATION).sum())


def merge_same_day(
    scenes: Sequence[tuple[str, dict[str, Float], npt.NDArray[np.bool_], npt.NDArray[np.bool_]]],
) -> DayComposite:
    """Merge same-day scenes: each cell takes the first clear scene's values.

    Args:
        scenes: ``(item_id, indices, observed, clear)`` per scene, in a stable order
            (sorted by item id by the caller, so merges are deterministic).
    """
    if not scenes:
        raise ValueError("merge_same_day needs at least one scene")
    shape = scenes[0][2].shape
    out = {k: np.full(shape, np.nan, dtype=np.float32) for k in INDEX_NAMES}
    state = np.zeros(shape, dtype=np.uint8)
    for _, idx, observed, clear in scenes:
        ok = clear & observed & np.isfinite(idx["ndvi"]) & (state != CLEAR)
        for k in INDEX_NAMES:
            out[k][ok] = idx[k][ok]
        state[ok] = CLEAR
        state[observed & (state == NO_OBSERVATION)] = MASKED
    return DayComposite(out, state, tuple(s[0] for s in scenes))
