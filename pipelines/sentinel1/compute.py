"""Sentinel-1 RTC: linear gamma0 backscatter, the VH/VV ratio, and dB on demand. Pure numpy."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

__all__ = ["backscatter_bands", "to_db"]

Float = npt.NDArray[np.float32]


def backscatter_bands(vv: Float, vh: Float) -> dict[str, Float]:
    """``s1.vv``, ``s1.vh`` (linear) and ``indices.vh_vv`` = vh / vv computed in linear units.

    Non-positive or non-finite backscatter is treated as no data (NaN).
    """
    vv = np.where(np.isfinite(vv) & (vv > 0), vv, np.nan).astype(np.float32)
    vh = np.where(np.isfinite(vh) & (vh > 0), vh, np.nan).astype(np.float32)
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = (vh / vv).astype(np.float32)
    return {"vv": vv, "vh": vh, "vh_vv": ratio}


def to_db(linear: npt.ArrayLike) -> npt.NDArray[np.float64]:
    """10 * log10(linear); NaN for non-positive values."""
    x = np.asarray(linear, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        out = 10.0 * np.log10(x)
    out[~(x > 0)] = np.nan
    return out
