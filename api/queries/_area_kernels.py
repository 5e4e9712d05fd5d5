"""The compiled kernels of :mod:`api.queries.area_stats` (numba): numpy's pairwise summation,
per-scene sort keys and the weighted statistics in key order.

A module of their own so that numba loads only when an area's statistics are computed, not
with every process that imports the query modules (``tools/list``, a CLI start).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numba import njit

__all__ = ["keyed_stats", "pairwise", "scene_keys", "sort_scene_keys", "sorted_stats"]

_QUANTILES = (0.10, 0.25, 0.50, 0.75, 0.90)
_PW_BLOCK = 128  # numpy's pairwise-summation block (PW_BLOCKSIZE)
_PW_STACK = 256  # explicit recursion stack: 3 entries per level, ~log2(n / 128) levels


@njit(cache=True, nogil=True)
def _pairwise_leaf(a: Any, lo: int, n: int) -> float:  # pragma: no cover - numba
    if n < 8:
        res = 0.0
        for i in range(lo, lo + n):
            res += a[i]
        return res
    r0, r1, r2, r3 = a[lo], a[lo + 1], a[lo + 2], a[lo + 3]
    r4, r5, r6, r7 = a[lo + 4], a[lo + 5], a[lo + 6], a[lo + 7]
    i = 8
    m = n - n % 8
    while i < m:
        b = lo + i
        r0 += a[b]
        r1 += a[b + 1]
        r2 += a[b + 2]
        r3 += a[b + 3]
        r4 += a[b + 4]
        r5 += a[b + 5]
        r6 += a[b + 6]
        r7 += a[b + 7]
        i += 8
    res = ((r0 + r1) + (r2 + r3)) + ((r4 + r5) + (r6 + r7))
    while i < n:
        res += a[lo + i]
        i += 1
    return res


@njit(cache=True, nogil=True)
def pairwise(a: Any, n: int) -> float:  # pragma: no cover - numba
    """``a[:n].sum()`` exactly as numpy sums a contiguous float64 array.

    numpy's add.reduce sums by pairwise recursion (halves rounded down to
    multiples of 8) down to blocks of at most 128 summed with 8 accumulators;
    doing the same additions in the same order gives the same bits. The
    recursion runs on an explicit stack (numba cannot cache recursive functions).
    """
    if n <= _PW_BLOCK:
        return _pairwise_leaf(a, 0, n)
    los = np.empty(_PW_STACK, np.int64)
    ns = np.empty(_PW_STACK, np.int64)
    done = np.zeros(_PW_STACK, np.bool_)
    vals = np.empty(_PW_STACK, np.float64)
    top, nv = 1, 0
    los[0], ns[0], done[0] = 0, n, False
    while top > 0:
        top -= 1
        lo, m = los[top], ns[top]
        if m <= _PW_BLOCK:
            vals[nv] = _pairwise_leaf(a, lo, m)
            nv += 1
        elif done[top]:
            nv -= 1
            vals[nv - 1] = vals[nv - 1] + vals[nv]
        else:
            m2 = m // 2
            m2 -= m2 % 8
            done[top] = True  # combine after both halves
            los[top + 1], ns[top + 1], done[top + 1] = lo + m2, m - m2, False
            los[top + 2], ns[top + 2], done[top + 2] = lo, m2, False
            top += 3
    return vals[0]


@njit(cache=True, nogil=True)
def scene_keys(bits: Any, ok: Any, keys: Any, counts: Any) -> None:  # pragma: no cover - numba
    """Sort keys of each scene's clear finite float32 values (see :func:`_sort_order`).

    ``bits`` (scenes, cells) is the uint32 view of the float32 values. Row ``s``
    of ``keys`` gets, for each cell ``i`` (row-major) that is ``ok`` and finite,
    the order-preserving image of its bits above ``i``; ``counts[s]`` how many.
    Cells keep their row-major order among equal values, as in the compacted
    reference, so sorting a row gives the reference order.
    """
    for s in range(bits.shape[0]):
        n = 0
        for i in range(bits.shape[1]):
            b = bits[s, i]
            if ok[s, i] and (b & np.uint32(0x7F800000)) != np.uint32(0x7F800000):
                o = ~b if b >> np.uint32(31) else b | np.uint32(0x80000000)
                keys[s, n] = (np.uint64(o) << np.uint64(32)) | np.uint64(i)
                n += 1
        counts[s] = n


@njit(cache=True, nogil=True)
def sort_scene_keys(keys: Any, counts: Any, tmp: Any) -> None:  # pragma: no cover - numba
    """Sort each row's ``counts[s]`` first keys ascending, as :func:`scene_keys` wrote them.

    :func:`scene_keys` writes a row's keys in ascending order of their low 32 bits
    (the cell index), so a stable sort on the high 32 bits (the value's order) gives
    the order of a full sort of the keys, which are distinct: the same array as
    ``np.sort``. Here a least-significant-digit radix sort, four passes of 8 bits,
    a pass skipped when every key has the same digit (``tmp``: uint64 scratch of at
    least the row length). Three to four times faster than numpy's sort of the rows
    """
    hist = np.zeros(256, np.int64)
    for s in range(keys.shape[0]):
        n = counts[s]
        if n < 2:
            continue
        src = keys[s]
        dst = tmp
        in_tmp = False
        for p in range(4):
            shift = np.uint64(32 + 8 * p)
            hist[:] = 0
            for i in range(n):
                hist[np.intp((src[i] >> shift) & np.uint64(255))] += 1
            if hist[np.intp((src[0] >> shift) & np.uint64(255))] == n:
                continue  # one digit for all: the order stays
            total = 0
            for d in range(256):
                c = hist[d]
                hist[d] = total
                total += int(c)
            for i in range(n):
                b = np.intp((src[i] >> shift) & np.uint64(255))
                dst[hist[b]] = src[i]
                hist[b] += 1
            src, dst = dst, src
            in_tmp = not in_tmp
        if in_tmp:
            row = keys[s]
            for i in range(n):
                row[i] = src[i]


@njit(cache=True, nogil=True)
def keyed_stats(
    values: Any, weights: Any, keys: Any, counts: Any, xs: Any, ws: Any, t: Any, res: Any
) -> None:  # pragma: no cover - numba
    """:func:`_stats_core` of each scene's values taken in the order of its sorted keys."""
    mask = np.uint64(0xFFFFFFFF)
    for s in range(values.shape[0]):
        n = counts[s]
        if n == 0:
            continue
        for j in range(n):
            k = np.intp(keys[s, j] & mask)
            xs[j] = np.float64(values[s, k])
            ws[j] = weights[k]
        _stats_core(xs, ws, t, n, res[s])


@njit(cache=True, nogil=True)
def sorted_stats(
    x: Any, w: Any, order: Any, xs: Any, ws: Any, t: Any, out: Any
) -> None:  # pragma: no cover - numba
    """Weighted mean, std and quantiles of ``x`` taken in ``order`` (see :func:`weighted_stats`)."""
    n = order.size  # xs, ws, t: float64 scratch of at least n
    for i in range(n):
        k = order[i]
        xs[i] = np.float64(x[k])
        ws[i] = w[k]
    _stats_core(xs, ws, t, n, out)


@njit(cache=True, nogil=True)
def _stats_core(xs: Any, ws: Any, t: Any, n: int, out: Any) -> None:  # pragma: no cover - numba
    """Weighted mean, std and quantiles of sorted ``xs[:n]`` with weights ``ws[:n]``.

    Reproduces the numpy expression order of the reference exactly: pairwise
    sums of ``ws``, ``xs * ws`` and ``ws * (xs - mean) ** 2``; a running sum for
    the cumulative mid-point weights; ``np.interp``'s arithmetic.
    """
    total = pairwise(ws, n)
    for i in range(n):
        t[i] = xs[i] * ws[i]
    mean = pairwise(t, n) / total
    for i in range(n):
        d = xs[i] - mean
        t[i] = ws[i] * (d * d)
    var = pairwise(t, n) / total
    out[0] = mean
    out[1] = np.sqrt(max(0.0, var))
    c = 0.0
    for i in range(n):
        c += ws[i]
        t[i] = (c - ws[i] / 2.0) / total
    for qi in range(5):
        out[2 + qi] = _interp(_QUANTILES[qi], t[:n], xs[:n])


@njit(cache=True, nogil=True)
def _interp(q: float, xp: Any, fp: Any) -> float:  # pragma: no cover - numba
    """``np.interp(q, xp, fp)`` for ascending ``xp`` (numpy's arithmetic, same bits)."""
    n = xp.size
    if n == 1:
        return fp[0]
    if q < xp[0]:
        return fp[0]
    if q > xp[n - 1]:
        return fp[n - 1]
    lo, hi = 0, n  # j = last index with xp[j] <= q
    while lo < hi:
        mid = lo + ((hi - lo) >> 1)
        if q >= xp[mid]:
            lo = mid + 1
        else:
            hi = mid
    j = lo - 1
    if j == n - 1 or xp[j] == q:
        return fp[j]
    slope = (fp[j + 1] - fp[j]) / (xp[j + 1] - xp[j])
    r = slope * (q - xp[j]) + fp[j]
    if np.isnan(r):
        r = slope * (q - xp[j + 1]) + fp[j + 1]
        if np.isnan(r) and fp[j] == fp[j + 1]:
            r = fp[j]
    return r
