"""The compiled kernels of :mod:`api.queries.area_stats` (numba): per-scene sort keys and the
weighted statistics in key order (summed as numpy sums: :mod:`store._pairwise`).

A module of their own so that numba loads only when an area's statistics are computed, not
with every process that imports the query modules (``tools/list``, a CLI start).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numba import njit

from store._pairwise import pairwise_terms

__all__ = ["count_equal", "scene_keys", "scenes_kernel", "sort_keys", "sorted_stats"]

_QUANTILES = (0.10, 0.25, 0.50, 0.75, 0.90)
_DIGIT = 11  # radix digit: three passes cover a value's 32 key bits
_RADIX = 1 << _DIGIT


@njit(cache=True, nogil=True)
def scene_keys(bits: Any, ok: Any, keys: Any, hist: Any) -> int:  # pragma: no cover - numba
    """Sort keys of one scene's clear finite float32 values (see :func:`_sort_order`); how many.

    ``bits`` is the uint32 view of the scene's float32 values. ``keys`` gets, for
    each cell ``i`` that is ``ok`` and finite (in cell order), the order-preserving
    image of its bits above ``i``; ``hist`` ((3, :data:`_RADIX`) int32) the counts of
    the three radix digits of those images, for :func:`sort_keys`. Cells keep their
    order among equal values, as in the compacted reference, so sorting the keys
    gives the reference order.
    """
    m = np.uint64(_RADIX - 1)
    hist[:, :] = 0
    n = 0
    for i in range(bits.size):
        b = bits[i]
        if ok[i] and (b & np.uint32(0x7F800000)) != np.uint32(0x7F800000):
            h = np.uint64(~b if b >> np.uint32(31) else b | np.uint32(0x80000000))
            keys[n] = (h << np.uint64(32)) | np.uint64(i)
            hist[0, np.intp(h & m)] += 1
            hist[1, np.intp((h >> np.uint64(_DIGIT)) & m)] += 1
            hist[2, np.intp(h >> np.uint64(2 * _DIGIT))] += 1
            n += 1
    return n


@njit(cache=True, nogil=True)
def sort_keys(keys: Any, n: int, tmp: Any, hist: Any) -> Any:  # pragma: no cover - numba
    """``keys[:n]`` sorted ascending, as :func:`scene_keys` wrote them and counted their digits.

    The keys are in ascending order of their low 32 bits (the cell index), so a
    stable sort on the high 32 bits (the value's order) gives the order of a full
    sort of the keys, which are distinct: the same array as ``np.sort``. Here a
    least-significant-digit radix sort, three passes of 11 bits whose digit counts
    :func:`scene_keys` took while writing the keys, a pass skipped when every key
    has the same digit. Returns the array holding the result (``keys`` or ``tmp``,
    uint64 scratch of at least ``n``); ``hist`` is consumed.
    """
    m = np.uint64(_RADIX - 1)
    src, dst = keys, tmp
    if n < 2:
        return src
    for p in range(3):
        shift = np.uint64(32 + _DIGIT * p)
        if hist[p, np.intp((keys[0] >> shift) & m)] == n:
            continue  # one digit for all: the order stays
        total = 0
        for d in range(_RADIX):
            c = hist[p, d]
            hist[p, d] = total
            total += c
        for i in range(n):
            k = src[i]
            digit = np.intp((k >> shift) & m)
            dst[hist[p, digit]] = k
            hist[p, digit] += 1
        src, dst = dst, src
    return src


@njit(cache=True, nogil=True)
def scenes_kernel(
    bits: Any, ok: Any, values: Any, weights: Any, scratch: Any, res: Any, counts: Any
) -> None:  # pragma: no cover - numba
    """:func:`_stats_core` of each scene's clear finite float32 values, taken in sorted order.

    One pass per scene over ``(scenes, cells)`` arrays: the sort keys and their
    digit counts (:func:`scene_keys`), the radix sort (:func:`sort_keys`), the
    values and weights gathered in key order, the statistics. ``bits`` is the
    uint32 view of ``values``; ``scratch`` ``(3, cells)`` float64 (the gathered
    values, weights and the quantiles' scratch; the keys are the kernel's own);
    ``counts[s]`` gets the scene's clear finite
    values, ``res[s]`` its statistics when there is one.
    """
    cells = bits.shape[1]
    keys = np.empty(cells, np.uint64)
    tmp = np.empty(cells, np.uint64)
    hist = np.empty((3, _RADIX), np.int32)
    xs, ws, t = scratch[0], scratch[1], scratch[2]
    mask = np.uint64(0xFFFFFFFF)
    for s in range(bits.shape[0]):
        n = scene_keys(bits[s], ok[s], keys, hist)
        counts[s] = n
        if n == 0:
            continue
        ordered = sort_keys(keys, n, tmp, hist)
        for j in range(n):
            k = np.intp(ordered[j] & mask)
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
    sums of ``ws``, ``xs * ws`` and ``ws * (xs - mean) ** 2`` (the products formed
    inside the sums, :func:`store._pairwise.pairwise_terms`); a running sum for the cumulative
    mid-point weights; ``np.interp``'s arithmetic. ``t``: float64 scratch of at least n.
    """
    total = pairwise_terms(0, xs, ws, 0.0, n)
    mean = pairwise_terms(1, xs, ws, 0.0, n) / total
    var = pairwise_terms(2, xs, ws, mean, n) / total
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


@njit(cache=True, nogil=True)
def count_equal(planes: Any, value: Any, out: Any) -> None:  # pragma: no cover - numba
    """``out[s]``: the cells of ``planes[s]`` (``(n, h, w)``, any strides) equal to ``value``.

    What ``np.count_nonzero(planes == value, axis=(1, 2))`` gives, without the boolean
    array and numpy's casting sum over it.
    """
    for s in range(planes.shape[0]):
        c = 0
        for y in range(planes.shape[1]):
            for x in range(planes.shape[2]):
                c += planes[s, y, x] == value
        out[s] = c
