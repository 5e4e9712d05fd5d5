"""Tessera embeddings onto the lattice: nearest-pixel gather, dequantisation rules kept.

A Tessera tile is int8 vectors ``(H, W, 128)`` plus a float32 scale per pixel
(``vector = int8 * scale``); a NaN scale marks water, ``+inf`` no data. The
cube keeps exactly that (int8 + scale, never widened to float32): cosine is
exact on the int8 vectors because the positive per-pixel scale cancels.
Lattice cells take the tile pixel under their centre (nearest neighbour:
interpolating quantised vectors would invent values no pixel had).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt
from affine import Affine
from pyproj import Transformer

from pipelines.lattice import LatticeWindow

__all__ = ["NO_DATA_SCALE", "gather_onto_lattice"]

NO_DATA_SCALE = np.float32(np.inf)
"""Scale marking "no data" (Tessera's convention; also the cube's fill)."""


def gather_onto_lattice(
    embedding: npt.NDArray[np.int8],
    scales: npt.NDArray[np.float32],
    crs: Any,
    transform: Affine | tuple[float, ...],
    window: LatticeWindow,
) -> tuple[npt.NDArray[np.int8], npt.NDArray[np.float32]]:
    """Sample a tile at the centres of a lattice window's cells.

    Args:
        embedding: ``(H, W, D)`` int8 vectors of the tile.
        scales: ``(H, W)`` float32 scales (NaN water, +inf no data).
        crs: the tile's CRS (e.g. ``"EPSG:32645"``).
        transform: the tile's affine (pixel edges).
        window: target lattice window.

    Returns:
        ``(h, w, D)`` int8 and ``(h, w)`` float32, rows south to north; cells off
        the tile get zero vectors and scale ``+inf`` (no data). Water keeps NaN.
    """
    t = transform if isinstance(transform, Affine) else Affine(*transform[:6])
    lat, lng = window.centres()
    lng2, lat2 = np.meshgrid(lng, lat)
    to_tile = Transformer.from_crs("EPSG:4326", crs, always_xy=True)
    x, y = to_tile.transform(lng2, lat2)
    col_f, row_f = ~t @ (x, y)
    col = np.floor(col_f).astype(np.int64)
    row = np.floor(row_f).astype(np.int64)
    h_tile, w_tile = scales.shape
    inside = (row >= 0) & (row < h_tile) & (col >= 0) & (col < w_tile)
    h, w = window.shape
    d = embedding.shape[2]
    out_vec = np.zeros((h, w, d), dtype=np.int8)
    out_scale = np.full((h, w), NO_DATA_SCALE, dtype=np.float32)
    r, c = row[inside], col[inside]
    out_vec[inside] = embedding[r, c]
    out_scale[inside] = scales[r, c]
    # cells that are not valid land vectors carry no vector bits
    invalid = ~(np.isfinite(out_scale) & (out_scale > 0))
    out_vec[invalid] = 0
    return out_vec, out_scale
