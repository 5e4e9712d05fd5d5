"""Pure statistics of area_over_time: weighted per-scene statistics and trend tests.

* Weighted statistics (:func:`weighted_stats`, :func:`scenes_stats`): mean and
  std (population form) weighted by the cells' weights; quantiles p10 p25
  median p75 p90 by linear interpolation over the cumulative weights at cell
  mid-points (``(cumsum(w) - w / 2) / sum(w)``). Compiled kernels reproduce
  numpy's summation order, so the answers (and the fact ids bound to them)
  have the bits of the numpy expressions, on every machine.
* Trend tests: the two-sided Mann-Kendall test (:func:`mann_kendall`) and the
  Theil-Sen slope (:func:`theil_sen`).
* :func:`pick_even`: thinning a series of slots evenly in time.

The compiled kernels are :mod:`api.queries._area_kernels` (numba loads on the first
statistics, not with the module).

No I/O: arrays in, numbers out.
"""

from __future__ import annotations

import bisect
import itertools
import math
from typing import Any

import numpy as np
import numpy.typing as npt

from store import threads

__all__ = [
    "mann_kendall",
    "pick_even",
    "scenes_stats",
    "theil_sen",
    "weighted_stats",
]


def _sort_order(x: npt.NDArray[Any]) -> npt.NDArray[np.intp]:
    """Ascending order of the values, equal values by position: the same on every machine.

    numpy's default sort is not stable and its tie order depends on the SIMD path
    of the machine (AVX2 vs AVX-512); the order of equal values moves the
    cumulative weights, hence the quantiles (by ~1e-9) and the fact ids bound to
    them. Values exact in float32 (cube values are) are sorted as one uint64 per
    value: the order-preserving uint32 image of the float32 bits above the
    position, so every key is unique and any sort algorithm gives one answer
    (numpy's SIMD sort of uint64: faster than an argsort). Other values use a
    stable argsort.
    """
    xv = np.asarray(x)
    keys = xv.astype(np.float32)
    if xv.size >= 1 << 32 or not np.array_equal(keys, xv):
        return np.argsort(xv.astype(np.float64, copy=False), kind="stable")
    bits = keys.view(np.uint32)
    ordered = np.where(bits >> np.uint32(31), ~bits, bits | np.uint32(1 << 31))
    packed = (ordered.astype(np.uint64) << np.uint64(32)) | np.arange(xv.size, dtype=np.uint64)
    packed.sort()
    return (packed & np.uint64(0xFFFFFFFF)).astype(np.intp)


def _stats_dict(out: npt.NDArray[np.float64]) -> dict[str, float]:
    return {
        "mean": float(out[0]),
        "std": float(out[1]),
        "p10": float(out[2]),
        "p25": float(out[3]),
        "median": float(out[4]),
        "p75": float(out[5]),
        "p90": float(out[6]),
    }


def weighted_stats(x: npt.NDArray[np.float64], w: npt.NDArray[np.float64]) -> dict[str, float]:
    """Weighted mean, std (population) and quantiles p10 p25 median p75 p90.

    ``mean = sum(w x) / sum(w)``; ``std = sqrt(sum(w (x - mean)^2) / sum(w))``;
    quantiles interpolate linearly over the sorted values at the cumulative
    mid-point weights ``(cumsum(w) - w / 2) / sum(w)`` (numpy's summation
    order throughout, in a compiled kernel).

    Args:
        x: Values (finite).
        w: Positive weights, same shape.
    """
    xv = np.ascontiguousarray(np.asarray(x).ravel())
    wv = np.ascontiguousarray(np.asarray(w, dtype=np.float64).ravel())
    out = np.empty(7, np.float64)
    scratch = np.empty((3, xv.size), np.float64)
    from api.queries._area_kernels import sorted_stats

    sorted_stats(xv, wv, _sort_order(xv), scratch[0], scratch[1], scratch[2], out)
    return _stats_dict(out)


def mann_kendall(y: npt.ArrayLike) -> tuple[int, float]:
    """Mann-Kendall S and two-sided p-value (tie-corrected variance, continuity correction).

    Args:
        y: Series in time order (n >= 3).

    Returns:
        ``(S, p)``.
    """
    v = np.asarray(y, dtype=np.float64)
    n = v.size
    diff = np.sign(v[None, :] - v[:, None])
    s = int(np.triu(diff, k=1).sum())
    _, counts = np.unique(v, return_counts=True)
    var = (
        n * (n - 1) * (2 * n + 5) - float(np.sum(counts * (counts - 1) * (2 * counts + 5)))
    ) / 18.0
    if var <= 0:
        return s, 1.0
    z = (s - 1) / math.sqrt(var) if s > 0 else (s + 1) / math.sqrt(var) if s < 0 else 0.0
    return s, float(math.erfc(abs(z) / math.sqrt(2.0)))


def theil_sen(y: npt.ArrayLike, x: npt.ArrayLike) -> tuple[float, float]:
    """Theil-Sen slope and intercept (``median(y) - slope * median(x)``).

    The same arithmetic as ``scipy.stats.theilslopes(y, x)`` (method
    ``separate``), without its confidence interval.

    Args:
        y: Values.
        x: Abscissae (not all equal), same length.
    """
    yv = np.asarray(y, dtype=np.float64).ravel()
    xv = np.asarray(x, dtype=np.float64).ravel()
    deltax = xv[:, None] - xv
    deltay = yv[:, None] - yv
    pos = deltax > 0
    slopes = deltay[pos] / deltax[pos]
    slopes.sort()
    slope = float(np.median(slopes))
    return slope, float(np.median(yv) - slope * np.median(xv))


def pick_even(tslots: list[int], m: int) -> list[int]:
    """Choose ``m`` of sorted ``tslots`` evenly in time, keeping the first and the last.

    For each of ``m`` targets evenly spaced from the first to the last slot, in turn,
    the nearest slot not chosen yet (ties: the earliest). Sorted slots are searched by
    bisection (:func:`_pick_sorted`); others take the reference scan (:func:`_pick_scan`),
    which gives the same choice.
    """
    if len(tslots) <= m:
        return list(tslots)
    vals = [float(t) for t in tslots]
    targets = np.linspace(vals[0], vals[-1], m).tolist()
    if all(a <= b for a, b in itertools.pairwise(vals)):
        chosen = _pick_sorted(vals, targets)
    else:
        chosen = _pick_scan(vals, targets)
    return [tslots[j] for j in sorted(chosen)]


def _pick_scan(vals: list[float], targets: list[float]) -> list[int]:
    """For each target in turn, the first free index nearest it (numpy's argmin over the free)."""
    arr = np.asarray(vals, dtype=np.float64)
    free = np.ones(arr.size, bool)
    chosen = []
    for t in targets:
        cand = np.flatnonzero(free)
        j = cand[int(np.argmin(np.abs(arr[cand] - t)))]
        free[j] = False
        chosen.append(int(j))
    return chosen


def _pick_sorted(vals: list[float], targets: list[float]) -> list[int]:
    """:func:`_pick_scan` for ascending ``vals``: the nearest free index on each side of the
    target's insertion point, the left one on a tie, the first of equal values."""
    n = len(vals)
    free = [True] * n
    chosen = []
    for t in targets:
        i = bisect.bisect_left(vals, t)  # vals[:i] < t <= vals[i:]
        r = i
        while r < n and not free[r]:
            r += 1
        left = i - 1
        while left >= 0 and not free[left]:
            left -= 1
        if left >= 0:  # argmin takes the first free index holding the nearest value
            k = left - 1
            while k >= 0 and vals[k] == vals[left]:
                if free[k]:
                    left = k
                k -= 1
        j = r if r < n and (left < 0 or abs(vals[r] - t) < abs(vals[left] - t)) else left
        free[j] = False
        chosen.append(j)
    return chosen


_THREADED_SCENES = 4  # scenes per call from which half go to a pool thread


def scenes_stats(
    values: npt.NDArray[Any],
    oks: npt.NDArray[np.bool_],
    weights: npt.NDArray[np.float64],
    n_total: int,
) -> list[dict[str, Any] | None]:
    """:func:`weighted_stats` and clear counts of each scene's clear finite values.

    Float32 values (every index and backscatter band) take one compiled pass
    per scene (:func:`api.queries._area_kernels.scenes_kernel`): the scene's
    sort keys (:func:`_sort_order`'s, with the cell index for the position,
    which orders ties the same way) and their radix digit counts, a radix sort
    (the same order as ``np.sort``), the values and weights gathered in that
    order, the statistics. Other dtypes take the reference path. From a few
    scenes on, and with more than one core, half of them go to a thread of
    :func:`store.threads.worker_pool` (the kernels release the GIL); the result
    does not depend on the split. Scratch: about 40 bytes a cell per thread.

    Args:
        values: ``(scenes, h, w)`` values of a band over an area's lattice box.
        oks: ``(scenes, h, w)`` clear cells inside the area.
        weights: ``(h, w)`` cell weights.
        n_total: Cells of the area (the denominator of the clear fraction).

    Returns:
        Per scene, the statistics with ``n_clear``, ``n_total`` and
        ``clear_fraction``; None for a scene with no clear finite value.
    """
    from api.queries._area_kernels import scenes_kernel, sorted_stats

    weights = np.ascontiguousarray(weights, dtype=np.float64).ravel()
    n_scenes = values.shape[0]
    res = np.empty((n_scenes, 7), np.float64)
    counts = np.zeros(n_scenes, np.int64)

    flat_values = np.ascontiguousarray(values.reshape(n_scenes, -1))
    flat_ok = np.ascontiguousarray(oks.reshape(n_scenes, -1))
    if weights.size >= 1 << 31:  # keys hold the cell index in 32 bits, digit counts in int32
        raise ValueError(f"{weights.size} cells: at most 2**31 - 1 per scene")

    def work(lo: int, hi: int) -> None:
        if hi <= lo:
            return
        scratch = np.empty((3, weights.size), np.float64)
        if flat_values.dtype == np.float32:
            part = flat_values[lo:hi]
            scenes_kernel(
                part.view(np.uint32), flat_ok[lo:hi], part, weights, scratch, res[lo:hi],
                counts[lo:hi],
            )  # fmt: skip
            return
        for i in range(lo, hi):
            sel = flat_ok[i] & np.isfinite(flat_values[i])
            x, w = flat_values[i][sel], weights[sel]
            counts[i] = x.size
            if x.size:
                sorted_stats(x, w, _sort_order(x), scratch[0], scratch[1], scratch[2], res[i])

    half = n_scenes // 2
    if n_scenes >= _THREADED_SCENES and threads.core_count() > 1:
        other = threads.worker_pool().submit(work, half, n_scenes)
        work(0, half)
        other.result()
    else:
        work(0, n_scenes)
    out: list[dict[str, Any] | None] = []
    for i in range(n_scenes):
        n = int(counts[i])
        if n == 0:
            out.append(None)
            continue
        stats: dict[str, Any] = _stats_dict(res[i])
        stats.update({"n_clear": n, "n_total": n_total, "clear_fraction": n / max(1, n_total)})
        out.append(stats)
    return out
