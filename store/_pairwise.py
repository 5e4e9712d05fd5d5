"""numpy's pairwise summation in numba, bit for bit (compiled helpers, private to earthmem).

numpy's ``add.reduce`` over a contiguous float64 array sums by pairwise
recursion (halves rounded down to multiples of 8) down to blocks of at most 128
values, each summed with 8 running sums; doing the same additions in the same
order gives the same bits. Both numba kernels that must reproduce a numpy form's
numbers use this one copy: the cube's block summaries
(:mod:`store.cube._summary_kernel`) and area_over_time's statistics
(:mod:`api.queries._area_kernels`).

The terms are formed where numpy would read them (:func:`term`: a weight, a
value times its weight, or a weight times a squared deviation, each rounded as
numpy rounds the array of them), so no array of terms is written. The recursion
runs on an explicit stack (numba cannot cache recursive functions).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numba import njit

__all__ = ["PW_BLOCK", "STACK_ROWS", "pairwise", "pairwise_terms", "pairwise_terms_into"]

PW_BLOCK = 128
"""numpy's pairwise-summation block (``PW_BLOCKSIZE``)."""
_UNROLL = 8
STACK_ROWS = 192
"""Rows of a stack for :func:`pairwise_terms_into` (2 a level of ~log2(n / 128), at most 64)."""


@njit(cache=True, nogil=True, inline="always")
def term(kind: int, xs: Any, ws: Any, mean: float, i: int) -> float:  # pragma: no cover - numba
    """Term ``i``: ``ws[i]`` (kind 0), ``xs[i] * ws[i]`` (1), ``ws[i] * (xs[i] - mean) ** 2`` (2)."""
    if kind == 0:
        return ws[i]
    if kind == 1:
        return xs[i] * ws[i]
    d = xs[i] - mean
    return ws[i] * (d * d)


@njit(cache=True, nogil=True)
def _leaf(kind: int, xs: Any, ws: Any, mean: float, lo: int, n: int) -> float:  # pragma: no cover
    """The terms ``lo .. lo + n`` (``n <= PW_BLOCK``) as numpy sums a block: 8 running sums."""
    if n < _UNROLL:
        res = 0.0
        for i in range(lo, lo + n):
            res += term(kind, xs, ws, mean, i)
        return res
    r0, r1 = term(kind, xs, ws, mean, lo), term(kind, xs, ws, mean, lo + 1)
    r2, r3 = term(kind, xs, ws, mean, lo + 2), term(kind, xs, ws, mean, lo + 3)
    r4, r5 = term(kind, xs, ws, mean, lo + 4), term(kind, xs, ws, mean, lo + 5)
    r6, r7 = term(kind, xs, ws, mean, lo + 6), term(kind, xs, ws, mean, lo + 7)
    i = _UNROLL
    m = n - n % _UNROLL
    while i < m:
        b = lo + i
        r0 += term(kind, xs, ws, mean, b)
        r1 += term(kind, xs, ws, mean, b + 1)
        r2 += term(kind, xs, ws, mean, b + 2)
        r3 += term(kind, xs, ws, mean, b + 3)
        r4 += term(kind, xs, ws, mean, b + 4)
        r5 += term(kind, xs, ws, mean, b + 5)
        r6 += term(kind, xs, ws, mean, b + 6)
        r7 += term(kind, xs, ws, mean, b + 7)
        i += _UNROLL
    res = ((r0 + r1) + (r2 + r3)) + ((r4 + r5) + (r6 + r7))
    while i < n:
        res += term(kind, xs, ws, mean, lo + i)
        i += 1
    return res


@njit(cache=True, nogil=True)
def pairwise_terms_into(
    kind: int, xs: Any, ws: Any, mean: float, n: int, stack: Any, vals: Any
) -> float:  # pragma: no cover - numba
    """The sum of :func:`term` over ``i < n`` exactly as numpy sums the array of the terms.

    ``stack`` (``(STACK_ROWS, 3)`` int64) and ``vals`` (``(STACK_ROWS,)`` float64) are
    scratch, so a kernel summing many small blocks allocates them once.
    """
    if n <= PW_BLOCK:
        return _leaf(kind, xs, ws, mean, 0, n)
    stack[0, 0], stack[0, 1], stack[0, 2] = 0, n, 0
    sp, vp = 1, 0
    while sp > 0:
        sp -= 1
        lo, m, combine = stack[sp, 0], stack[sp, 1], stack[sp, 2]
        if m <= PW_BLOCK:
            vals[vp] = _leaf(kind, xs, ws, mean, lo, m)
            vp += 1
        elif combine:
            vp -= 1
            vals[vp - 1] = vals[vp - 1] + vals[vp]
        else:
            m2 = m // 2
            m2 -= m2 % _UNROLL
            stack[sp, 2] = 1  # combine after both halves
            stack[sp + 1, 0], stack[sp + 1, 1], stack[sp + 1, 2] = lo + m2, m - m2, 0
            stack[sp + 2, 0], stack[sp + 2, 1], stack[sp + 2, 2] = lo, m2, 0
            sp += 3
    return vals[0]


@njit(cache=True, nogil=True)
def pairwise_terms(kind: int, xs: Any, ws: Any, mean: float, n: int) -> float:  # pragma: no cover
    """:func:`pairwise_terms_into` with its own scratch."""
    if n <= PW_BLOCK:
        return _leaf(kind, xs, ws, mean, 0, n)
    stack = np.empty((STACK_ROWS, 3), np.int64)
    vals = np.empty(STACK_ROWS, np.float64)
    return pairwise_terms_into(kind, xs, ws, mean, n, stack, vals)


@njit(cache=True, nogil=True)
def pairwise(a: Any, n: int) -> float:  # pragma: no cover - numba
    """``a[:n].sum()`` exactly as numpy sums a contiguous float64 array."""
    return pairwise_terms(0, a, a, 0.0, n)
