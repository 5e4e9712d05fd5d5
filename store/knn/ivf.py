"""Inverted lists over a k-NN table: the triage of ``hamming_then_rerank`` on large tables.

A full Hamming triage reads the first word of every row's sign bits (80 MB at 10^7 rows)
and, since 128 sign bits resolve angles only coarsely, must keep thousands of candidates
(5,120 at 10^7 for recall@10 >= 0.95) whose rows are then read one by one. Tables of at
least :data:`IVF_MIN_ROWS` rows therefore also hold an inverted file (the IVF layout of
FAISS' ``IndexIVF``): the rows clustered by spherical k-means into ``L`` lists, the list
centroids, and the rows' sign-bit codes copied in list order. A query

1. scores the ``L`` centroids (``L x D`` dot products) and keeps the ``nprobe`` nearest lists;
2. scores every eligible row of those lists from its sign bits with the *asymmetric*
   estimate ``sum_i q'_i * s_i`` (``q'`` the rotated float query, ``s_i = +-1`` the row's
   sign bits; one 256-entry table per code byte, 16 lookups a row), which ranks far better
   than the symmetric Hamming distance (at 10^7: recall@10 0.97 from 1,280 candidates
   against 0.86 for Hamming; bench/HISTORY.md, session 17);
3. re-scores the best ``multiple * k`` of them by exact int8 cosine (rows read with
   ``pread``), as the full triage does.

``nprobe`` and ``multiple`` are calibrated when the table is written
(:func:`calibrate_ivf`: the cheapest pair whose recall@10 against exact cosine, less its
sampling margin, is at least 0.95 on 50 of the table's own rows) and stored in ``meta["ivf"]``. Rows outside the
probed lists are never looked at: the answer says how many rows were triaged and how many
lists were probed. Exact modes (``cosine``, ``hamming``) never use the lists.

Files (beside the table's others)::

    ivf_centroids.npy float32 (L, D)   unit centroids
    ivf_offsets.npy   int64   (L + 1,) list l holds list positions [offsets[l], offsets[l+1])
    ivf_rows.npy      int32   (N,)     table row at each list position
    ivf_codes.npy     uint8   (N, 16)  the bin128 code at each list position
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numba
import numpy as np
import numpy.typing as npt

from store.errors import VectorTableError
from store.knn.codes import BIN_BYTES, ROTATION_SEED, rotation
from store.knn.mapped import release
from store.knn.scan import read_only

__all__ = [
    "IVF_FILES",
    "IVF_MIN_MASK",
    "IVF_MIN_ROWS",
    "IvfArrays",
    "IvfPlan",
    "adc_lut",
    "adc_scores",
    "best_candidates",
    "build_ivf",
    "calibrate_ivf",
    "list_candidates",
    "list_count",
    "probe",
]

IVF_MIN_ROWS = 1 << 18
"""Tables with at least this many rows (and 128-D sign-bit codes) are written with lists.

Below it the full triage costs a few milliseconds at most (10^5 rows: ~1 ms)."""
IVF_FILES = ("ivf_centroids", "ivf_offsets", "ivf_rows", "ivf_codes")
"""The array files of the lists (``<name>.npy``)."""
MAX_LISTS = 1024
"""Most lists: ~sqrt(N) up to here (10^7 rows: ~9,800 a list). Assigning every row costs
``N x L x D`` multiply-adds (10^7 rows: ~25 s on this 2-core machine)."""
KMEANS_ITERATIONS = 10
TRAIN_PER_LIST = 64
"""Training rows per list for k-means (a seeded sample of the table)."""
NPROBES = (2, 4, 8, 16, 32, 64)
"""Lists probed, tried by :func:`calibrate_ivf` (cheapest first)."""
MULTIPLES = (8, 16, 32, 64, 128, 256, 512)
"""Candidates per neighbour re-scored by cosine, tried by :func:`calibrate_ivf`."""
READ_COST_ROWS = 64
"""Cost of re-scoring one candidate (a ``pread`` of its row, ~0.8 us) in rows triaged from
their codes (~12 ns each): the calibration's cost model."""
RECALL_Z = 1.645
"""Standard errors of the calibration's recall estimate kept as margin (one-sided 95 %)."""
_ASSIGN_ROWS = 1 << 16


@dataclass(frozen=True)
class IvfArrays:
    """The lists of one table (memory-mapped when opened from a table directory)."""

    centroids: npt.NDArray[np.float32]
    offsets: npt.NDArray[np.int64]
    rows: npt.NDArray[np.int32]
    codes: npt.NDArray[np.uint8]

    @property
    def n_lists(self) -> int:
        return int(self.centroids.shape[0])


@dataclass(frozen=True)
class IvfPlan:
    """How many lists to probe and candidates to re-score (``meta["ivf"]``)."""

    nprobe: int
    multiple: int


IVF_MIN_MASK = 0.5
"""A mask keeping less than this share of the rows does not use the lists (the probed lists
could hold too few eligible rows): a rerank runs the full triage, the pruned cosine scan's
seed samples the table."""


def list_count(n: int) -> int:
    """Lists for a table of ``n`` rows: ~sqrt(n), between 16 and :data:`MAX_LISTS`, at most ``n``."""
    return min(max(n, 1), max(16, min(MAX_LISTS, math.isqrt(max(n, 1)))))


def _unit(x: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:
    norm = np.linalg.norm(x, axis=1, keepdims=True)
    norm[norm == 0] = 1.0
    return (x / norm).astype(np.float32, copy=False)


def build_ivf(
    vectors: npt.NDArray[np.int8], codes: npt.NDArray[np.uint8], seed: int = 0
) -> IvfArrays:
    """Cluster a table's rows into lists (spherical k-means, seeded) and lay out their codes.

    Args:
        vectors: ``(N, D)`` int8 rows (a row's direction is its cosine identity).
        codes: ``(N, 16)`` their bin128 codes.
        seed: Seed of the training sample and the initial centroids.
    """
    n, d = vectors.shape
    n_lists = list_count(n)
    rng = np.random.default_rng(seed)
    train_idx = np.sort(rng.choice(n, min(n, TRAIN_PER_LIST * n_lists), replace=False))
    x = _unit(np.asarray(vectors[train_idx], np.float32))
    cents = x[rng.choice(x.shape[0], n_lists, replace=False)].copy()
    for _ in range(KMEANS_ITERATIONS):
        near = np.argmax(x @ cents.T, axis=1)
        sums = np.zeros((n_lists, d), np.float64)
        np.add.at(sums, near, x)
        empty = np.flatnonzero(np.bincount(near, minlength=n_lists) == 0)
        if empty.size:  # an empty list restarts at a training row
            sums[empty] = x[rng.choice(x.shape[0], empty.size, replace=False)]
        cents = _unit(sums.astype(np.float32))
    assign = np.empty(n, np.int32)
    ct = np.ascontiguousarray(cents.T)
    for a in range(0, n, _ASSIGN_ROWS):  # a row's norm does not change its nearest centroid
        block = np.asarray(vectors[a : a + _ASSIGN_ROWS], np.float32)
        assign[a : a + _ASSIGN_ROWS] = np.argmax(block @ ct, axis=1)
    order = np.argsort(assign, kind="stable").astype(np.int32)
    offsets = np.zeros(n_lists + 1, np.int64)
    np.cumsum(np.bincount(assign, minlength=n_lists), out=offsets[1:])
    return IvfArrays(
        centroids=np.ascontiguousarray(cents),
        offsets=offsets,
        rows=order,
        codes=np.ascontiguousarray(np.asarray(codes)[order]),
    )


_BITS = np.unpackbits(np.arange(256, dtype=np.uint8)[:, None], axis=1).astype(np.float32) * 2 - 1
"""``(256, 8)``: byte value -> its bits as +-1, most significant first (``np.packbits`` order)."""


def adc_lut(query: npt.ArrayLike, d: int) -> npt.NDArray[np.float32]:
    """``(16, 256)`` lookup tables of the asymmetric estimate for one query.

    ``lut[j, b]`` is the rotated query's dimensions ``8j .. 8j+7`` dotted with byte value
    ``b``'s bits as +-1, so a row's estimate is ``sum_j lut[j, code[j]]``.
    """
    qr = rotation(d, ROTATION_SEED) @ np.asarray(query, np.float64)
    parts = qr.reshape(BIN_BYTES, 8).T  # (8, 16)
    return np.ascontiguousarray((_BITS @ parts).T.astype(np.float32))


def probe(
    ivf: IvfArrays, query: npt.ArrayLike, nprobe: int, min_rows: int = 0
) -> npt.NDArray[np.int64]:
    """The lists nearest the query (cosine to their centroids), ascending by list.

    The ``nprobe`` nearest, and more, nearest first, until they hold at least ``min_rows``
    rows (a rerank asked to re-score that many candidates).
    """
    scores = ivf.centroids @ np.asarray(query, np.float32)
    order = np.argsort(-scores, kind="stable")
    sizes = np.diff(ivf.offsets)[order]
    enough = int(np.searchsorted(np.cumsum(sizes), min_rows)) + 1 if min_rows > 0 else 0
    p = min(max(nprobe, enough), ivf.n_lists)
    return np.sort(order[:p]).astype(np.int64)


@numba.njit(cache=True, nogil=True)
def _adc_kernel(codes, rows, starts, ends, lut, mask, use_mask, exclude, n, out_rows, out_scores):  # type: ignore[no-untyped-def]
    """Estimates of the rows at list positions ``[starts[i], ends[i])``; ``-1 - p`` when the
    row map at position p names no row of the table (a damaged file)."""
    m = 0
    for i in range(starts.size):
        for p in range(starts[i], ends[i]):
            r = rows[p]
            if r < 0 or r >= n:
                return -1 - p
            if r == exclude or (use_mask and not mask[r]):
                continue
            acc = np.float32(0.0)
            for j in range(16):
                acc += lut[j, codes[p, j]]
            out_rows[m] = r
            out_scores[m] = acc
            m += 1
    return m


def adc_scores(
    ivf: IvfArrays,
    lists: npt.NDArray[np.int64],
    lut: npt.NDArray[np.float32],
    mask: npt.NDArray[np.bool_] | None,
    exclude: int,
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.float32]]:
    """Table rows of the eligible rows in ``lists`` and their asymmetric estimates.

    Raises:
        VectorTableError: the row map names a row outside the table (a damaged file).
    """
    starts = np.ascontiguousarray(ivf.offsets[lists])
    ends = np.ascontiguousarray(ivf.offsets[lists + 1])
    total = int((ends - starts).sum())
    out_rows = np.empty(total, np.int64)
    out_scores = np.empty(total, np.float32)
    marr = mask if mask is not None else np.ones(1, np.bool_)
    args = (ivf.codes, ivf.rows, starts, ends, lut, marr, mask is not None, exclude)
    call = (*map(read_only, args), ivf.rows.shape[0], out_rows, out_scores)  # outputs writable
    m = _adc_kernel(*call)
    if m < 0:
        raise VectorTableError(f"ivf_rows.npy: list position {-1 - m} names no row of the table")
    return out_rows[:m], out_scores[:m]


def list_candidates(
    ivf: IvfArrays,
    qf: npt.NDArray[np.float32],
    n: int,
    n_keep: int,
    nprobe: int,
    mask: npt.NDArray[np.bool_] | None,
    eligible: int,
    exclude: int,
) -> tuple[npt.NDArray[np.int64], int, int]:
    """The ``n_keep`` eligible rows of best estimate in the lists nearest ``qf`` (ascending).

    Probes the ``nprobe`` nearest lists, and more until they hold about ``n_keep`` eligible
    rows (their rows scaled by the mask's share ``eligible / n``), scores their eligible rows
    (:func:`adc_scores`) and releases the lists' pages after.

    Returns:
        ``(candidates, rows scored, lists probed)``; fewer candidates than ``n_keep`` when
        the lists hold fewer eligible rows.
    """
    # the excluded row counts in the lists but is never a candidate: one more
    lists = probe(ivf, qf, nprobe, -(-(n_keep + 1) * n // max(eligible, 1)))
    try:
        rows, scores = adc_scores(ivf, lists, adc_lut(qf, ivf.centroids.shape[1]), mask, exclude)
    finally:
        for li in lists.tolist():  # never leave the lists resident
            lo, hi = int(ivf.offsets[li]), int(ivf.offsets[li + 1])
            release(ivf.codes, lo, hi)
            release(ivf.rows, lo, hi)
    return best_candidates(rows, scores, n_keep), int(rows.size), int(lists.size)


def best_candidates(
    rows: npt.NDArray[np.int64], scores: npt.NDArray[np.float32], n_keep: int
) -> npt.NDArray[np.int64]:
    """The ``n_keep`` rows of highest estimate, ascending by row (all when fewer)."""
    if rows.size > n_keep:
        rows = rows[np.argpartition(-scores, n_keep - 1)[:n_keep]]
    return np.sort(rows)


def calibrate_ivf(
    ivf: IvfArrays,
    truth: Mapping[int, set[int]],
    rerank: Callable[[int, npt.NDArray[np.int64]], set[int]],
    vector: Callable[[int], npt.NDArray[Any]],
    d: int,
    *,
    k: int = 10,
    target: float = 0.95,
) -> tuple[IvfPlan, dict[str, float]]:
    """The cheapest ``(nprobe, multiple)`` whose recall@k against exact cosine reaches
    ``target`` on the calibration queries (``truth``: query row -> its exact cosine top-k,
    itself excluded; :func:`store.knn.scan.calibration_truth`), with
    the sampling error of so few queries counted against it: the measured recall less
    :data:`RECALL_Z` standard errors (``sqrt(r (1 - r) / (k n_queries))``) must reach the
    target. Without that margin a plan measured at 0.958 on its 50 queries gave 0.948 on
    50 others (10^7 rows, session 17).

    Cost of a pair: the rows triaged (mean over the queries) plus
    :data:`READ_COST_ROWS` per candidate re-scored. When no pair reaches the target, the
    largest pair tried.

    Args:
        rerank: (row, candidate rows) -> the cosine top-k of the candidates.
        vector: row -> its int8 vector.

    Returns:
        The plan, and the recall of every pair tried (``"nprobe x multiple"``).
    """
    qrows = list(truth)
    recall: dict[str, float] = {}
    best: tuple[float, IvfPlan] | None = None
    last = IvfPlan(1, 1)
    for nprobe in NPROBES:
        hits = dict.fromkeys(MULTIPLES, 0)
        triaged = dict.fromkeys(MULTIPLES, 0)
        for r in qrows:
            v = vector(r)
            lut = adc_lut(v, d)
            done: dict[tuple[int, ...], tuple[Any, Any]] = {}
            for m in MULTIPLES:  # the lists a query of this plan probes (more for large m)
                lists = probe(ivf, v, nprobe, m * k)
                key = tuple(lists.tolist())
                if key not in done:
                    done[key] = adc_scores(ivf, lists, lut, None, r)
                rows, scores = done[key]
                triaged[m] += rows.size
                got = rerank(r, best_candidates(rows, scores, m * k))
                hits[m] += len(truth[r] & got)
        for m in MULTIPLES:
            rec = hits[m] / (k * len(qrows))
            recall[f"{nprobe}x{m}"] = rec
            last = IvfPlan(nprobe, m)
            cost = triaged[m] / len(qrows) + READ_COST_ROWS * m * k
            low = rec - RECALL_Z * math.sqrt(rec * (1 - rec) / (k * len(qrows)))
            if low >= target and (best is None or cost < best[0]):
                best = (cost, IvfPlan(nprobe, m))
        if nprobe >= ivf.n_lists:
            break
    return (best[1] if best is not None else last), recall
