"""The starting bounds of the exact scans (private to :mod:`store.knn`).

**Hamming** (:func:`hamming_seed`): the sampled distance bound of a rerank's candidate scan.

A ``hamming_then_rerank`` keeps thousands of Hamming candidates. The word-major scan
(:func:`store.knn._kernels.hamming_scan_split`) reads a block's second words only
when a row of the block passes the bound; with no bound to start from, each chunk
keeps ~n_keep (1 + ln(rows / n_keep)) rows before its own limit settles, and that
limit is its chunk's n_keep-th distance, far above the table's. :func:`hamming_seed`
guesses a bound near the table's n_keep-th distance from a small sample; the scan
checks it (it must keep at least n_keep rows) and is run again without it when not.

**Pruned cosine** (:func:`cosine_seed`): the k-th best exact key of k or more eligible rows
bounds the table's k-th best key from below, so the pruned scan
(:func:`store.knn._kernels.cosine_scan_pruned`) may skip every row whose bound is under it
from its first buffer on. The closer that key is to the answer's, the fewer rows pass the
bound and are read whole; the rows come from the query's nearest inverted list where the
table has lists, else from a sample of the table.
"""

from __future__ import annotations

import math
from typing import Protocol

import numpy as np
import numpy.typing as npt

from store.knn._kernels import cosine_scan_serial, hamming_seed_counts
from store.knn.codes import int8_norms
from store.knn.ivf import IVF_MIN_MASK, IvfArrays, list_candidates
from store.knn.mapped import file_mapped
from store.knn.scan import merge_topk, read_only

__all__ = ["NO_SEED", "SEED_FACTOR", "SeedTable", "cosine_seed", "hamming_seed"]


class SeedTable(Protocol):
    """What :func:`cosine_seed` reads of a table (a :class:`store.knn.table.KnnTable`)."""

    @property
    def n(self) -> int: ...

    @property
    def ivf(self) -> IvfArrays | None: ...

    def read_rows(self, rows: npt.NDArray[np.int64]) -> npt.NDArray[np.int8]: ...


NO_SEED = 129
"""The bound of a 128-bit Hamming scan that keeps every row until its own limits settle."""
SEED_RUNS = 64
SEED_RUN_ROWS = 1024
"""The sample of :func:`hamming_seed`: 64 evenly spaced runs of 1,024 rows (1 MB of codes)."""
SEED_FACTOR = 2.0
"""The sampled bound is the distance expected to hold this many times the rows kept. At 10^7
rows and 5,120 candidates, 150 queries never fell short, and the bound was the exact
5,120-th distance + 1 (median; p90 + 3)."""


def hamming_seed(
    planes: npt.NDArray[np.uint64],
    q: npt.NDArray[np.uint64],
    n_keep: int,
    mask: npt.NDArray[np.bool_] | None,
    exclude: int,
) -> int:
    """A distance bound for a Hamming scan keeping ``n_keep`` rows, from a sample (:data:`NO_SEED`: none).

    The distances of :data:`SEED_RUNS` evenly spaced runs of :data:`SEED_RUN_ROWS`
    eligible rows, scaled to the table, give the smallest distance T expected to
    hold :data:`SEED_FACTOR` x ``n_keep`` rows. With T as its starting bound the
    scan reads the second words only of blocks with a row within T from its first
    block on, instead of waiting for the chunk limits to settle
    (:func:`store.knn._kernels.hamming_scan_split`). T is a guess: the scan is
    exact when it keeps at least ``n_keep`` rows and is run again without a bound
    when not (:meth:`store.knn.table.KnnTable.hamming_blockwise`).

    Args:
        planes: ``(2, N)`` word-major codes (memory-mapped: the sampled runs are released).
        q: ``(2,)`` query code words.
        n_keep: rows the scan keeps.
        mask: eligibility, or None.
        exclude: a row never kept (-1: none).
    """
    n = int(planes.shape[1])
    eligible = n - int(0 <= exclude < n) if mask is None else int(np.count_nonzero(mask))
    if eligible <= n_keep:
        return NO_SEED
    run = min(SEED_RUN_ROWS, -(-n // SEED_RUNS))  # on a small table the runs cover it once
    starts = np.linspace(0, n - run, SEED_RUNS).astype(np.int64)
    marr = mask if mask is not None else np.ones(1, np.bool_)
    args = (planes, q, starts, run, marr, mask is not None, exclude, file_mapped(planes))
    hist, counted = hamming_seed_counts(*map(read_only, args))
    if counted == 0:
        return NO_SEED
    counts = np.cumsum(hist)
    enough = np.flatnonzero(counts * (eligible / counted) >= SEED_FACTOR * n_keep)
    return int(enough[0]) if enough.size else NO_SEED


COSINE_SAMPLE_RUNS = 32
COSINE_SAMPLE_RUN_ROWS = 256
"""The pruned cosine seed's sample on a table without lists: 32 evenly spaced runs of 256 rows
(1 MB)."""
COSINE_LIST_ROWS = 64
"""Rows of the pruned cosine seed taken from the query's nearest inverted list (the best
``max(64, k)`` by the lists' sign-bit estimate). At 10^7 rows and k = 10, 24 queries: the
seed's key 19.5 (median; at least 4.3) above the sample's, where the answer's k-th key was
21.4 above it; rows read whole 5,033 -> 1,383 and the scan 25.3 -> 23.9 ms, the seed itself
1.03 -> 0.69 ms (bench/HISTORY.md, session 22)."""


def cosine_seed(
    table: SeedTable,
    qi: npt.NDArray[np.int16],
    k: int,
    mask: npt.NDArray[np.bool_],
    use_mask: bool,
    exclude: int,
) -> float:
    """A key at most the k-th best eligible key of ``table`` for the int8 query ``qi``
    (-inf when fewer than k eligible rows were found).

    The k-th best exact key (:func:`store.knn._kernels.cosine_scan_serial`, the scan's own
    key) of eligible rows: the :data:`COSINE_LIST_ROWS` best candidates of the query's
    nearest inverted list (:func:`store.knn.ivf.list_candidates`) when the table has lists
    and the mask keeps at least :data:`~store.knn.ivf.IVF_MIN_MASK` of the rows, else (or
    when the lists hold fewer than k eligible rows) a sample of the table.
    """
    rows = _list_seed_rows(table, qi, k, mask, use_mask, exclude)
    if rows is None:
        rows = _sampled_rows(table.n, mask, use_mask, exclude)
    if rows.size < k:
        return -math.inf
    vectors = table.read_rows(rows)
    args = (vectors, int8_norms(vectors), qi, np.zeros(1, np.float32), False)
    out = cosine_scan_serial(*map(read_only, (*args, np.ones(1, np.bool_), False, -1, k)))
    kth, _ = merge_topk(out, k)
    return float(kth[-1]) if kth.size == k else -math.inf


def _list_seed_rows(
    table: SeedTable,
    qi: npt.NDArray[np.int16],
    k: int,
    mask: npt.NDArray[np.bool_],
    use_mask: bool,
    exclude: int,
) -> npt.NDArray[np.int64] | None:
    """The seed's rows from the inverted lists, or None (no lists, a narrow mask, too few)."""
    if table.ivf is None:
        return None
    n = table.n
    eligible = int(np.count_nonzero(mask)) if use_mask else n
    if eligible < IVF_MIN_MASK * n:
        return None
    cand, _, _ = list_candidates(
        table.ivf,
        qi.astype(np.float32),
        n,
        max(COSINE_LIST_ROWS, k),
        1,
        mask if use_mask else None,
        eligible,
        exclude,
    )
    # a damaged row map naming a row twice would count it twice toward k: the seed could then
    # exceed the answer's k-th key (rows are distinct in a sound map; unique is then a no-op)
    cand = np.unique(cand)
    return cand if cand.size >= k else None


def _sampled_rows(
    n: int, mask: npt.NDArray[np.bool_], use_mask: bool, exclude: int
) -> npt.NDArray[np.int64]:
    """The eligible rows of :data:`COSINE_SAMPLE_RUNS` evenly spaced runs."""
    run = COSINE_SAMPLE_RUN_ROWS
    starts = np.linspace(0, max(0, n - run), COSINE_SAMPLE_RUNS).astype(np.int64)
    rows = (starts[:, None] + np.arange(run)[None, :]).ravel()
    if n < 2 * COSINE_SAMPLE_RUNS * run:  # runs may overlap: make the rows unique
        rows = np.unique(rows)
    rows = rows[(rows < n) & (rows != exclude)]
    return rows[mask[rows]] if use_mask else rows
