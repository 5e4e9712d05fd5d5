"""The SIMD dot-product block equals the integer dot product, in both its compiled forms."""

from __future__ import annotations

import numpy as np
from numba import njit

from store.knn._kernels import _head_dots_generic
from store.knn._simd import dot16x64, dot16x64_generic
from store.knn.codes import head_blocks


@njit(cache=False)
def _dots(blocks, q, fast):  # type: ignore[no-untyped-def]
    nb = blocks.shape[0]
    out = np.zeros(nb * 16, np.float64)
    q8 = np.ascontiguousarray(q)
    corr = np.int32(-128) * np.int32(q8.astype(np.int32).sum())
    for b in range(nb):
        if fast:
            dot16x64(blocks[b:].ctypes.data, q8.ctypes.data, corr, out[16 * b :].ctypes.data)
        else:
            dot16x64_generic(
                blocks[b:].ctypes.data, q8.ctypes.data, corr, out[16 * b :].ctypes.data
            )
    return out


def test_dot16x64_equals_integer_dot() -> None:
    """Random rows and the extremes (-128 and 127 everywhere: the largest magnitudes,
    where a saturating or unsigned multiply would differ) against numpy's int64 dot;
    blocks of 16 rows at unaligned addresses; a last block part-filled (padding rows
    score 0)."""
    rng = np.random.default_rng(0)
    rows = rng.integers(-128, 128, (16 * 40 - 5, 64), dtype=np.int64).astype(np.int8)
    rows[:16] = -128
    rows[16:32] = 127
    rows[32:48:2] = -128
    rows[33:48:2] = 127
    queries = [rng.integers(-128, 128, 64).astype(np.int8) for _ in range(4)]
    queries += [np.full(64, -128, np.int8), np.full(64, 127, np.int8), np.zeros(64, np.int8)]
    blocks = head_blocks(rows)
    assert blocks.shape == (40, 1024)
    buf = np.empty(blocks.size + 1, np.uint8)
    body = buf[1:].reshape(blocks.shape)  # one byte off an allocation's start: unaligned
    body[:] = blocks
    for q in queries:
        want = np.zeros(16 * 40, np.int64)
        want[: rows.shape[0]] = rows.astype(np.int64) @ q.astype(np.int64)
        for fast in (True, False):
            got = _dots(body, q, fast)
            np.testing.assert_array_equal(got, want.astype(np.float64))


def test_generic_head_dots_equal_integer_dots_for_any_head_width() -> None:
    """The compiled loop for heads other than 64 dimensions (and machines without VNNI):
    4, 32 and 48 dimensions, from a block other than the first, over a part-filled last
    block (its padding rows score 0), against numpy's int64 dot."""
    rng = np.random.default_rng(2)
    for h in (4, 32, 48):
        rows = rng.integers(-128, 128, (16 * 7 - 3, h), dtype=np.int64).astype(np.int8)
        rows[:16] = -128
        q = rng.integers(-128, 128, h).astype(np.int8)
        blocks = head_blocks(rows)
        corr = np.int32(-128 * int(q.astype(np.int64).sum()))
        part = np.full(16 * 6 + 16, np.nan)
        _head_dots_generic(blocks, 1, 6, h // 4, q, corr, part)
        want = np.zeros(16 * 7, np.int64)
        want[: rows.shape[0]] = rows.astype(np.int64) @ q.astype(np.int64)
        np.testing.assert_array_equal(part[: 16 * 6], want[16:].astype(np.float64))
        assert np.isnan(part[16 * 6 :]).all()  # nothing written past the blocks asked for
