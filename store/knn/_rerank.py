"""A rerank's two table steps: the candidate scan's sampled bound, and the exact rescoring.

* :func:`hamming_seed`: a distance bound for a Hamming scan keeping thousands of rows,
  from a sample of the word-major codes (the scan checks it and falls back).
* :func:`rescore_rows`: exact cosine of the candidates, read from ``vectors.npy``
  (:func:`rerank_rows_file`, :func:`rerank_rows_file_serial`).

A ``hamming_then_rerank`` rescores a few thousand candidate rows scattered over the
table. They are read with ``pread`` (a page fault on a hot file would map the whole
page-cache folio around a row, making most of a table resident), one call per
*span*: candidates (sorted by row) less than ``span_rows`` rows apart share one
read of the rows between them, so the per-call cost (~1 us a ``pread``) is paid
once per span instead of once per row; the extra bytes copied are at most one
span (4 kB for :data:`SPAN_ROWS` at D = 128). Each chunk of candidates scores its
rows straight out of its span buffer into its own heap, and the chunks run on the
numba threads (:func:`rerank_rows_file`) or, for few candidates, on the calling
thread (:func:`rerank_rows_file_serial`).

Keys and order are those of :func:`store.knn._kernels.cosine_rows_normed` over
the candidates read into one array: the row's norm is computed beside its dot
(integer sum of squares, float64 sqrt, rounded to float32), the heap row is the
candidate's position in ``rows`` (ascending rows, so ties go to the lower row).
The chunk heaps merge (:func:`store.knn.scan.merge_topk`) to that same answer.
"""

from __future__ import annotations

import os
from pathlib import Path

import numba
import numpy as np
import numpy.typing as npt
from numba import njit, prange

from store.errors import VectorTableError
from store.knn._kernels import _dot_f32, _dot_i8, _dot_i8_128, _key, hamming_seed_counts
from store.knn._prims import _FASTMATH, _heap_offer, _read_full
from store.knn.mapped import file_mapped, open_ro
from store.knn.scan import merge_topk, read_only, run_parallel

__all__ = [
    "NO_SEED",
    "SPAN_ROWS",
    "hamming_seed",
    "rerank_rows_file",
    "rerank_rows_file_serial",
    "rescore_rows",
]

SPAN_ROWS = 32
"""Candidates closer than this many rows share one ``pread`` (4 kB of rows at D = 128)."""
NO_SEED = 129
"""The bound of a 128-bit Hamming scan that keeps every row until its own limits settle."""
RESCORE_PARALLEL_MIN = 2048
"""A rerank with at least this many candidates reads and scores them on the numba threads
(about 1 us of pread a candidate: below, a parallel launch's barrier costs as much)."""
RESCORE_CHUNK = 512
"""Candidates per chunk of the parallel rescoring (at least)."""
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
    when not (:meth:`store.knn.table.KnnTable._hamming_blockwise`).

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


def rescore_rows(
    path: str | os.PathLike[str],
    base: int,
    d: int,
    cand: npt.NDArray[np.int64],
    qi: npt.NDArray[np.int16],
    qf: npt.NDArray[np.float32],
    use_float: bool,
    k: int,
) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.int64]]:
    """Exact cosine top-k of the ascending candidate rows ``cand``: (keys, positions in cand).

    The rows are read from the file ``path`` (``vectors.npy``, data at ``base``) with
    ``pread``, not through the mapping: a page fault on a hot file maps the whole
    (large) page-cache folio around it, so a few thousand scattered rows would make
    most of the table resident. Candidates a few rows apart share one read
    (:data:`SPAN_ROWS`), and many candidates are read and scored in parallel chunks.
    Same answer as :func:`store.knn._kernels.cosine_rows_normed` over the rows read
    into one array.

    Raises:
        VectorTableError: a short read.
    """
    cand = np.ascontiguousarray(cand, np.int64)
    with open_ro(Path(path)) as fd:
        if cand.size < RESCORE_PARALLEL_MIN:
            out = rerank_rows_file_serial(
                *map(read_only, (fd, base, d, cand, qi, qf, use_float, k, SPAN_ROWS))
            )
        else:
            nchunk = min(-(-cand.size // RESCORE_CHUNK), 4 * max(numba.get_num_threads(), 1))
            out = run_parallel(
                rerank_rows_file, fd, base, d, cand, qi, qf, use_float, k, nchunk, SPAN_ROWS
            )
    bad = out[3][out[3] >= 0]
    if bad.size:
        raise VectorTableError(f"{path}: short read at row {int(cand[int(bad.min())])}")
    return merge_topk(out[:3], k)


@njit(inline="always", fastmath=_FASTMATH)
def _row_key(buf, r, qi, qf, use_float):  # type: ignore[no-untyped-def]
    """Cosine key (no query norm) of row ``r`` of ``buf``, its norm computed from the row
    (as :func:`store.knn._kernels.cosine_rows_normed` does)."""
    d = buf.shape[1]
    sq = np.int32(0)
    for j in range(d):
        x = np.int32(buf[r, j])
        sq += x * x
    norm = np.float32(np.sqrt(np.float64(sq)))
    if use_float:
        dot = _dot_f32(buf, r, qf)
    elif d == 128:
        dot = _dot_i8_128(buf, r, qi)
    else:
        dot = _dot_i8(buf, r, qi)
    return _key(dot, norm)


@njit(inline="always", fastmath=_FASTMATH)
def _rerank_chunk(fd, base, rows, qi, qf, use_float, lo, hi, span_rows, buf, keys, heap_rows):  # type: ignore[no-untyped-def]
    """Score candidates lo..hi of ``rows`` (ascending) into the empty heap.

    Returns ``(heap size, -1)``, or ``(size, i)`` with ``i`` the first candidate a
    short read hit.
    """
    k = keys.shape[0]
    d = buf.shape[1]
    size = 0
    i = lo
    while i < hi:
        first = rows[i]
        j = i + 1
        while j < hi and rows[j] - first < span_rows:
            j += 1
        m = rows[j - 1] - first + 1
        if not _read_full(fd, buf.ctypes.data, m * d, base + first * d):
            return size, i
        for t in range(i, j):
            size = _heap_offer(
                keys, heap_rows, size, k, _row_key(buf, rows[t] - first, qi, qf, use_float), t
            )
        i = j
    return size, -1


@njit(parallel=True, cache=True, fastmath=_FASTMATH)
def rerank_rows_file(fd, base, d, rows, qi, qf, use_float, k, nchunk, span_rows):  # type: ignore[no-untyped-def]
    """Exact cosine top-k of the table rows ``rows`` read from ``vectors.npy``, in chunks.

    Args:
        fd, base: open descriptor of the (N, D) int8 rows and the data offset in it.
        d: row length in bytes.
        rows: ascending, distinct candidate rows.
        qi, qf, use_float: the query as in :func:`store.knn._kernels.cosine_scan`.
        k: heap capacity per chunk.
        nchunk: contiguous candidate ranges, scheduled one at a time per thread.
        span_rows: candidates closer than this share one ``pread`` (>= 1).

    Returns:
        ``(keys (nchunk, k), positions (nchunk, k), sizes (nchunk,), bad (nchunk,))``:
        heap rows are positions in ``rows``; ``bad[c]`` is -1 or the first position
        of chunk ``c`` a short read hit.
    """
    n = rows.shape[0]
    out_k = np.empty((nchunk, k), np.float64)
    out_r = np.empty((nchunk, k), np.int64)
    sizes = np.zeros(nchunk, np.int64)
    bad = np.full(nchunk, -1, np.int64)
    for c in prange(nchunk):
        buf = np.empty((span_rows, d), np.int8)
        sizes[c], bad[c] = _rerank_chunk(
            fd,
            base,
            rows,
            qi,
            qf,
            use_float,
            n * c // nchunk,
            n * (c + 1) // nchunk,
            span_rows,
            buf,
            out_k[c],
            out_r[c],
        )
    return out_k, out_r, sizes, bad


@njit(cache=True, fastmath=_FASTMATH)
def rerank_rows_file_serial(fd, base, d, rows, qi, qf, use_float, k, span_rows):  # type: ignore[no-untyped-def]
    """:func:`rerank_rows_file` on the calling thread (one chunk)."""
    out_k = np.empty((1, k), np.float64)
    out_r = np.empty((1, k), np.int64)
    sizes = np.zeros(1, np.int64)
    bad = np.full(1, -1, np.int64)
    buf = np.empty((span_rows, d), np.int8)
    sizes[0], bad[0] = _rerank_chunk(
        fd, base, rows, qi, qf, use_float, 0, rows.shape[0], span_rows, buf, out_k[0], out_r[0]
    )
    return out_k, out_r, sizes, bad
