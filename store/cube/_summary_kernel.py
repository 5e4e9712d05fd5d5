"""The fused block-summary pass (numba): one walk over a chunk's cells per summary block.

:func:`store.cube.summaries.summarise_chunk` computes, per day slot and summary
block, counts, weighted sums, extremes and a weighted histogram. The numpy form
makes about twenty passes over the chunk (group reshapes, masks, products, one
reduction each); this kernel reads each cell once into per-block scratch and
sums its terms with numpy's own pairwise summation (:mod:`store._pairwise`), so
every stored number is bit for bit the numpy form's (the tests compare them), except the sign
of a zero extreme: where a block's smallest or largest value is both -0.0 and +0.0, numpy's
SIMD reduction and this loop may keep different zeros (equal values; rare: a normalised
difference is -0.0 only where its difference is zero and its sum negative).
The histogram adds each cell's weight to its bin in cell order, as ``np.bincount``
does.

Compiled on first use and cached on disk (``cache=True``), like the k-NN kernels.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numba import njit

from store._pairwise import STACK_ROWS, pairwise_terms_into

__all__ = ["fused_summaries"]


@njit(cache=True, nogil=True)
def _kernel(  # pragma: no cover - compiled
    values: Any,
    has_values: bool,
    flags: Any,
    has_flags: bool,
    clear_value: int,
    rw: Any,
    sub: int,
    lo: float,
    hi: float,
    width: float,
    n_bins: int,
    out: Any,
) -> None:
    t, ny, nx = out.shape[0], out.shape[1], out.shape[2]
    m = sub * sub
    ws = np.empty(m)
    xs = np.empty(m)
    sel = np.empty(m, np.bool_)
    hist0 = 7  # summaries.HIST (the field layout is pinned by the bit-for-bit tests)
    stack = np.empty((STACK_ROWS, 3), np.int64)
    vals = np.empty(STACK_ROWS)
    for d in range(t):
        for gy in range(ny):
            for gx in range(nx):
                row = out[d, gy, gx]
                n_flag = 0
                if has_flags:
                    for r in range(sub):
                        y = gy * sub + r
                        for c in range(sub):
                            if flags[d, y, gx * sub + c] == clear_value:
                                n_flag += 1
                row[0] = n_flag
                if n_flag == 0 or not has_values:
                    continue
                n = 0
                e = 0
                for r in range(sub):
                    y = gy * sub + r
                    wy = rw[y]
                    for c in range(sub):
                        x = np.float64(values[d, y, gx * sub + c])
                        s = flags[d, y, gx * sub + c] == clear_value and np.isfinite(x)
                        sel[e] = s
                        if s:
                            ws[e] = wy
                            xs[e] = x
                            n += 1
                        else:
                            ws[e] = 0.0
                            xs[e] = 0.0
                        e += 1
                total = pairwise_terms_into(0, xs, ws, 0.0, m, stack, vals)
                has = total > 0
                mean = pairwise_terms_into(1, xs, ws, 0.0, m, stack, vals) / total if has else 0.0
                row[1] = n
                row[2] = total
                row[3] = mean
                row[4] = pairwise_terms_into(2, xs, ws, mean, m, stack, vals)
                if has:
                    vmin, vmax = np.inf, -np.inf
                    for e in range(m):
                        if sel[e]:
                            vmin = min(vmin, xs[e])
                            vmax = max(vmax, xs[e])
                    row[5], row[6] = vmin, vmax
                for e in range(m):
                    if sel[e]:
                        v = xs[e]
                        if v < lo:
                            k = 0
                        elif v >= hi:
                            k = n_bins + 1
                        else:
                            k = int(np.floor((v - lo) / width)) + 1
                            k = min(max(k, 0), n_bins + 1)
                        row[hist0 + k] += ws[e]


def fused_summaries(
    values: np.ndarray[Any, Any] | None,
    flags: np.ndarray[Any, Any] | None,
    clear_value: int,
    rw: np.ndarray[Any, Any],
    sub: int,
    grid_lo: float,
    grid_hi: float,
    width: float,
    n_bins: int,
    out: np.ndarray[Any, Any],
) -> None:
    """Fill ``out`` ``(t, ny, nx, fields)`` (holding empty summaries) from one chunk's cells.

    ``rw`` is each row's weight; ``values`` / ``flags`` None stand for all fill / all 0.
    """
    ref = values if values is not None else flags
    assert ref is not None
    dummy = np.zeros((1, 1, 1), np.uint8)
    _kernel(
        np.ascontiguousarray(values) if values is not None else dummy.astype(np.float32),
        values is not None,
        np.ascontiguousarray(flags) if flags is not None else dummy,
        flags is not None,
        int(clear_value),
        np.ascontiguousarray(rw, dtype=np.float64),
        int(sub),
        float(grid_lo),
        float(grid_hi),
        float(width),
        int(n_bins),
        out,
    )
