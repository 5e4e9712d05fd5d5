"""Neighbours that are the key's own Tessera pixel, found so find_similar can drop them.

A Tessera pixel is 10 m; a lattice cell is about 9.55 m, and the pipeline gives each
cell the pixel under its centre (nearest neighbour, :mod:`pipelines.tessera.compute`),
so one pixel lands on up to two cells per axis. Such a cell holds the key's vector
byte for byte and scores 1.000: it is the same measurement, not another place.

The store keeps no Tessera pixel geometry per cell, so a shared pixel is recognised
by its symptom where it can only occur: a cell whose Chebyshev lattice distance to the
key is 1 (the centres of cells under one 10 m pixel are at most ~14 m apart, less than
two cell steps) holding the identical int8 vector and the identical scale.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from store import address

if TYPE_CHECKING:
    from store.knn.table import KnnTable

__all__ = ["SAME_PIXEL_RULE", "same_pixel_rows"]

SAME_PIXEL_RULE = (
    "same source pixel = one of the key's 8 surrounding cells holding the identical int8 "
    "vector and scale (the store keeps no Tessera pixel geometry; a 10 m pixel covers up to "
    "2 x 2 of the ~9.55 m cells)"
)
"""How a shared pixel is recognised (stated in the answer)."""


def same_pixel_rows(table: KnnTable, lat_q: int, lng_q: int, key_row: int) -> list[tuple[int, int]]:
    """Rows (and raw cell ids) of the key's surrounding cells that share its source pixel."""
    vec = table.vector(key_row).tobytes()
    scale = table.scale(key_row)
    out: list[tuple[int, int]] = []
    for dy in (-1, 0, 1):
        for dx in (-1, 0, 1):
            la, ln = lat_q + dy, lng_q + dx
            if (dy, dx) == (0, 0) or not (
                0 < la < address.LAT_MAX_Q and 0 <= ln < address.LNG_MAX_Q
            ):
                continue
            raw = address.q_to_raw(la, ln)
            row = table.row_of(raw)
            if row is None or row == key_row:
                continue
            same_scale = table.scale(row) == scale or (
                np.isnan(scale) and np.isnan(table.scale(row))
            )
            if same_scale and table.vector(row).tobytes() == vec:
                out.append((row, raw))
    return out
