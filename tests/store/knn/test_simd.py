"""The SIMD dot-product block equals the integer dot product, in both its compiled forms."""

from __future__ import annotations

import numpy as np
from numba import njit

from store.knn._simd import dot16x64, dot16x64_generic


@njit(cache=False)
def _dots(rows, q, fast):  # type: ignore[no-untyped-def]
    n = rows.shape[0]
    out = np.zeros(n, np.float64)
    q8 = np.ascontiguousarray(q)
    corr = np.int32(-128) * np.int32(q8.astype(np.int32).sum())
    for b in range(0, n - 15, 16):
        if fast:
            dot16x64(rows[b:].ctypes.data, q8.ctypes.data, corr, out[b:].ctypes.data)
        else:
            dot16x64_generic(rows[b:].ctypes.data, q8.ctypes.data, corr, out[b:].ctypes.data)
    return out


def test_dot16x64_equals_integer_dot() -> None:
    """Random rows and the extremes (-128 and 127 everywhere: the largest magnitudes,
    where a saturating or unsigned multiply would differ) against numpy's int64 dot;
    blocks of 16 rows at unaligned addresses."""
    rng = np.random.default_rng(0)
    rows = rng.integers(-128, 128, (16 * 40, 64), dtype=np.int64).astype(np.int8)
    rows[:16] = -128
    rows[16:32] = 127
    rows[32:48:2] = -128
    rows[33:48:2] = 127
    queries = [rng.integers(-128, 128, 64).astype(np.int8) for _ in range(4)]
    queries += [np.full(64, -128, np.int8), np.full(64, 127, np.int8), np.zeros(64, np.int8)]
    buf = np.empty(rows.size + 1, np.int8)
    body = buf[1:].reshape(rows.shape)  # one byte off an allocation's start: unaligned
    body[:] = rows
    for q in queries:
        want = body.astype(np.int64) @ q.astype(np.int64)
        for fast in (True, False):
            got = _dots(body, q, fast)
            np.testing.assert_array_equal(got, want.astype(np.float64))
