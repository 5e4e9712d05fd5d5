"""The sampled distance bound of a rerank's candidate scan (private to :mod:`store.knn`).

A ``hamming_then_rerank`` keeps thousands of Hamming candidates. The word-major scan
(:func:`store.knn._kernels.hamming_scan_split`) reads a block's second words only
when a row of the block passes the bound; with no bound to start from, each chunk
keeps ~n_keep (1 + ln(rows / n_keep)) rows before its own limit settles, and that
limit is its chunk's n_keep-th distance, far above the table's. :func:`hamming_seed`
guesses a bound near the table's n_keep-th distance from a small sample; the scan
checks it (it must keep at least n_keep rows) and is run again without it when not.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from store.knn._kernels import hamming_seed_counts
from store.knn.mapped import file_mapped
from store.knn.scan import read_only

__all__ = ["NO_SEED", "SEED_FACTOR", "hamming_seed"]

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
