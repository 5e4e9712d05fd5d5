"""Top-k scans over int8 rows and binary codes, the merge of chunk results, and calibration.

* :func:`cosine_topk`: exact. The stored value is ``int8 * scale`` with
  ``scale > 0`` per cell, so cos(a*s, b*t) = cos(a, b): the int8 dot product
  (int32 accumulate) divided by the int8 norms is the cosine of the dequantised
  vectors. An inline float query that is an exact multiple of an int8 vector
  (what a dequantised Tessera pixel is) is scanned on the int8 path; any other
  float query runs a float32-accumulate path against the int8 rows (exact up to
  float32 rounding). Quantising an arbitrary float query to int8 would move it
  by up to half a quantisation step per coordinate, which changes rankings, so
  it is never done.
* :func:`hamming_topk`: popcount over the packed sign codes
  (:func:`store.knn.codes.binarize`); score = 1 - 2 * distance / bits.
* :func:`hamming_then_rerank`: ``multiple * k`` Hamming candidates, then exact
  cosine over the candidates only; :func:`calibrate_rerank_multiple` picks the
  multiple for a table.

The scan loops are the numba kernels of :mod:`store.knn._kernels`; parallel
ones are launched through :func:`run_parallel`.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numba
import numpy as np
import numpy.typing as npt

from store.errors import InvalidVectorQuery
from store.knn import _kernels
from store.knn.codes import binarize
from store.knn.limits import K_MAX, MODES, Mode

__all__ = [
    "CALIBRATION_MULTIPLES",
    "DEFAULT_RERANK_MULTIPLE",
    "K_MAX",
    "MAX_CANDIDATES",
    "MODES",
    "SPARSE_MASK",
    "KnnResult",
    "Mode",
    "calibrate_rerank_multiple",
    "calibration_truth",
    "check_k",
    "cosine_topk",
    "hamming_candidates",
    "hamming_then_rerank",
    "hamming_topk",
    "merge_hamming_topk",
    "merge_topk",
    "n_chunks",
    "prep_mask",
    "prep_query",
    "read_only",
    "run_parallel",
]

DEFAULT_RERANK_MULTIPLE = 32
"""Hamming candidates per requested neighbour when a table stores no calibrated multiple.

The multiple needed grows with the number of near-duplicates of the query (128
sign bits resolve angles only so finely), so :func:`store.knn.write.write_table`
calibrates it per table (:func:`calibrate_rerank_multiple`) and stores
``meta["rerank_multiple"]``; this default serves tables written without one.
bench/RESULTS.md lists the recall per multiple.
"""


MAX_CANDIDATES = 1 << 17
"""Cap on the Hamming candidates of a ``hamming_then_rerank`` (``multiple * k``)."""
SPARSE_MASK = 0.25
"""Below this mask density a scan gathers the eligible rows instead of scanning all."""

_CHUNK_ROWS = 1 << 16  # rows per scan chunk (chunks are scheduled dynamically on the threads)
_SERIAL_BYTES = 8 << 20  # scans smaller than this run on the calling thread (no barrier wait)
_INT8_TOL = 2e-5  # in quantisation steps: float32 rounding of int8 * scale stays far below


CALIBRATION_MULTIPLES: tuple[int, ...] = (4, 8, 16, 32, 64, 128, 256, 512)
"""Candidate multiples tried by :func:`calibrate_rerank_multiple`."""


@dataclass(frozen=True, eq=False)
class KnnResult:
    """Neighbours of one query, best first."""

    rows: npt.NDArray[np.int64]
    """Table rows of the neighbours, best first (ties: lower row first)."""
    scores: npt.NDArray[np.float64]
    """Similarity per neighbour: cosine, or ``1 - 2 d / bits`` for ``hamming``."""
    scanned: int
    """Rows whose score was computed by the primary scan (mask and exclusion applied after)."""
    mode: str
    """Scoring mode that produced the scores."""
    reranked: int = 0
    """Candidates re-scored by exact cosine (``hamming_then_rerank`` only)."""
    rows_read_whole: int | None = None
    """Rows whose whole vector a pruned cosine scan read (None: every row was read)."""
    multiple: int | None = None
    """Candidates per neighbour a rerank kept (``hamming_then_rerank`` only)."""
    lists_probed: int = 0
    """Inverted lists the rerank's triage read (0: it triaged every row; :mod:`store.knn.ivf`)."""


def n_chunks(n: int) -> int:
    """Chunks a parallel scan of ``n`` rows is cut into.

    About :data:`_CHUNK_ROWS` rows each, at most eight per numba thread (chunks
    are scheduled one at a time, so more chunks than threads balance the load).
    """
    return max(1, min(-(-n // _CHUNK_ROWS), max(numba.get_num_threads(), 1) * 8))


def merge_topk(
    out: tuple[np.ndarray, np.ndarray, np.ndarray], k: int
) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.int64]]:
    """The best ``k`` of a kernel's per-chunk results, best first (ties: lower row first).

    Args:
        out: ``(keys (C, K), rows (C, K), sizes (C,))`` as the scan kernels return
            them: chunk ``c`` kept ``sizes[c]`` entries, in any order.
        k: Entries wanted.

    Returns:
        ``(keys, rows)`` of at most ``k`` entries.
    """
    keys, rows, sizes = out
    valid = np.arange(keys.shape[1])[None, :] < sizes[:, None]
    kv, rv = keys[valid], rows[valid]
    if kv.size > 2 * k:  # cut to the k-th best key (ties kept) before the exact sort
        kth = np.partition(kv, kv.size - k)[kv.size - k]
        sel = kv >= kth
        kv, rv = kv[sel], rv[sel]
    order = np.lexsort((rv, -kv))[:k]
    return kv[order], rv[order]


def merge_hamming_topk(
    out: tuple[np.ndarray, np.ndarray, np.ndarray], n_keep: int, bits: int
) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.int64]]:
    """:func:`merge_topk` for the buffers of the Hamming full scans, by counting sort.

    Same answer as :func:`merge_topk` (best first, ties by lower row) for the outputs of
    ``hamming_scan``, ``hamming_scan_split`` and ``hamming_scan_serial`` (their buffers
    list rows in ascending order: :func:`store.knn._kernels.merge_hamming`), in one
    pass over the entries instead of a partition and a lexsort: a rerank's scan at
    10^7 rows leaves tens of thousands of entries for its 5,120 candidates.
    """
    keys, rows, sizes = out
    return _kernels.merge_hamming(*map(read_only, (keys, rows, sizes, int(n_keep), int(bits))))


_LAYER: list[str] = []
"""numba's threading layer, once a parallel kernel has started it."""
_SERIAL_LAUNCH = threading.Lock()
"""Held around a parallel launch under the workqueue layer (or before the layer is known)."""


def run_parallel(fn: Any, *args: Any) -> Any:
    """Run a parallel kernel with dynamic scheduling (one chunk at a time per thread).

    numba's "workqueue" layer (its fallback where neither OpenMP nor TBB loads)
    aborts the process when two threads launch parallel work at once, so under
    it, and until the layer is known, launches are serialised.

    Every array argument goes in read-only (:func:`read_only`, a view; nothing is copied; the
    serial kernels' callers do the same): numba compiles
    one specialisation per argument type and read-only is part of the type, so a table's
    mapped (read-only) arrays, in-memory arrays and queries share one compiled kernel
    instead of one per mix (each parallel kernel takes seconds to compile on a fresh clone).
    """
    args = tuple(read_only(a) for a in args)
    if _LAYER and _LAYER[0] != "workqueue":
        return _launch(fn, args)
    with _SERIAL_LAUNCH:
        out = _launch(fn, args)
        if not _LAYER:
            with contextlib.suppress(ValueError):  # not initialised: no parallel region ran
                _LAYER.append(str(numba.threading_layer()))
        return out


def read_only(arg: Any) -> Any:
    """An array argument of a kernel as a read-only view (others unchanged): see :func:`run_parallel`."""
    if not isinstance(arg, np.ndarray) or not arg.flags.writeable:
        return arg
    view = arg.view()
    view.flags.writeable = False
    return view


def _launch(fn: Any, args: tuple[Any, ...]) -> Any:
    old = numba.set_parallel_chunksize(1)
    try:
        return fn(*args)
    finally:
        numba.set_parallel_chunksize(old)


def check_k(k: int) -> int:
    """``k`` as an int, when it is an integer in 1..:data:`K_MAX`.

    Raises:
        InvalidVectorQuery: anything else (booleans included).
    """
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or not 1 <= k <= K_MAX:
        raise InvalidVectorQuery(f"k must be an integer in 1..{K_MAX}, got {k!r}")
    return int(k)


def prep_query(query: npt.ArrayLike, d: int) -> tuple[np.ndarray, np.ndarray, bool, float]:
    """Split a query into (int8 values as int16, float32, use_float, norm); int8 path when exact.

    The int8 query travels as int16 (same values): the kernels multiply int16 x int16.

    Raises:
        InvalidVectorQuery: wrong dimension, non-finite or all-zero query.
    """
    q = np.asarray(query)
    if q.ndim != 1 or q.shape[0] != d:
        raise InvalidVectorQuery(f"query must have dimension {d}, got shape {q.shape}")
    if q.dtype == np.int8:
        qi = np.ascontiguousarray(q)
        norm = float(np.sqrt(np.dot(qi.astype(np.int64), qi.astype(np.int64))))
        if norm == 0:
            raise InvalidVectorQuery("query vector is all zeros (cosine undefined)")
        return qi.astype(np.int16), np.zeros(d, np.float32), False, norm
    qf64 = q.astype(np.float64)
    if not np.all(np.isfinite(qf64)):
        raise InvalidVectorQuery("query vector has non-finite values")
    amax = float(np.max(np.abs(qf64))) if d else 0.0
    if amax == 0:
        raise InvalidVectorQuery("query vector is all zeros (cosine undefined)")
    # A dequantised Tessera vector is int8 * s (s > 0). Its largest |int8| is some
    # m in 1..127, so s = amax / m: try each m and take the int8 path when the
    # vector is such a multiple (to float32 rounding). Then the int8 scan is exact.
    mults = np.arange(127, 0, -1, dtype=np.float64)
    ratio = qf64[None, :] * (mults[:, None] / amax)
    hit = np.flatnonzero(np.all(np.abs(ratio - np.rint(ratio)) <= _INT8_TOL, axis=1))
    if hit.size:
        qi64 = np.rint(ratio[hit[0]])
        norm = float(np.sqrt(np.dot(qi64, qi64)))
        return qi64.astype(np.int16), np.zeros(d, np.float32), False, norm
    qf = qf64.astype(np.float32)
    return np.zeros(d, np.int16), qf, True, float(np.sqrt(np.dot(qf64, qf64)))


def prep_mask(mask: npt.ArrayLike | None, n: int) -> np.ndarray | None:
    """The caller's eligibility mask as a bool array of ``n`` rows (None stays None).

    Raises:
        InvalidVectorQuery: not a boolean array of shape ``(n,)``.
    """
    if mask is None:
        return None
    m = np.asarray(mask)
    if m.dtype != np.bool_ or m.shape != (n,):
        raise InvalidVectorQuery(
            f"mask must be a boolean array of shape ({n},), got {m.dtype} {m.shape}"
        )
    return m


def cosine_topk(
    vectors: npt.NDArray[np.int8],
    norms: npt.NDArray[np.float32],
    query: npt.ArrayLike,
    k: int = 10,
    *,
    mask: npt.ArrayLike | None = None,
    exclude_row: int | None = None,
    rows: npt.ArrayLike | None = None,
) -> KnnResult:
    """Exact cosine top-k of int8 rows against one query.

    Args:
        vectors: ``(N, D)`` int8 rows (may be a memmap).
        norms: ``(N,)`` float32 row norms (:func:`store.knn.codes.int8_norms`).
        query: ``(D,)`` int8 vector, or float (an inline or dequantised vector).
        k: Neighbours wanted, 1..:data:`K_MAX`; fewer come back if fewer rows are eligible.
        mask: Optional ``(N,)`` bool; only True rows are eligible.
        exclude_row: A row never returned (the query cell itself).
        rows: Optional candidate rows to score instead of the whole table (rerank).

    Returns:
        :class:`KnnResult` with cosine scores.

    Raises:
        InvalidVectorQuery: wrong dimension, zero query, bad k or mask.
    """
    k = check_k(k)
    n, d = vectors.shape
    qi, qf, use_float, qnorm = prep_query(query, d)
    m = prep_mask(mask, n)
    exclude = -1 if exclude_row is None else int(exclude_row)
    if rows is not None:
        cand = np.asarray(rows, dtype=np.int64)
        if m is not None:
            cand = cand[m[cand]]
    elif m is not None and m.mean() < SPARSE_MASK:
        cand = np.flatnonzero(m).astype(np.int64)
    else:
        cand = None
    if cand is not None:
        out = _kernels.cosine_scan_rows(
            *map(read_only, (vectors, norms, qi, qf, use_float, cand, exclude, k))
        )
        scanned = int(cand.size)
    else:
        use_mask = m is not None
        marr = m if m is not None else np.ones(1, np.bool_)
        args = (vectors, norms, qi, qf, use_float, marr, use_mask, exclude, k)
        if n * (d + 4) <= _SERIAL_BYTES:
            out = _kernels.cosine_scan_serial(*map(read_only, args))
        else:
            out = run_parallel(_kernels.cosine_scan, *args, n_chunks(n))
        scanned = int(n)
    keys, top = merge_topk(out, k)
    return KnnResult(rows=top, scores=keys / qnorm, scanned=scanned, mode="cosine")


def _words(codes: np.ndarray) -> np.ndarray:
    if codes.dtype != np.uint8 or codes.ndim != 2 or codes.shape[1] % 8:
        raise InvalidVectorQuery(f"codes must be uint8 (N, 8w), got {codes.dtype} {codes.shape}")
    return codes.view(np.uint64)


def hamming_candidates(
    codes: np.ndarray,
    qcode: np.ndarray,
    n_keep: int,
    mask: npt.ArrayLike | None,
    exclude_row: int | None,
) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.int64], int]:
    """Best ``n_keep`` rows by Hamming distance: (keys = -distance, rows, rows scanned).

    The rows come best first (ties: lower row first); a sparse mask gathers the
    eligible rows, small inputs scan on the calling thread, large ones in
    parallel chunks.

    Args:
        codes: ``(N, B)`` uint8 packed codes, B a multiple of 8.
        qcode: ``(B,)`` uint8 code of the query.
        n_keep: Rows wanted.
        mask: Optional ``(N,)`` bool eligibility.
        exclude_row: A row never returned.

    Raises:
        InvalidVectorQuery: bad codes, query code or mask.
    """
    words = _words(codes)
    n, nbytes = codes.shape
    q = np.ascontiguousarray(np.asarray(qcode, dtype=np.uint8))
    if q.shape != (nbytes,):
        raise InvalidVectorQuery(f"query code must have {nbytes} bytes, got shape {q.shape}")
    qw = q.view(np.uint64)
    m = prep_mask(mask, n)
    exclude = -1 if exclude_row is None else int(exclude_row)
    if m is not None and m.mean() < SPARSE_MASK:
        cand = np.flatnonzero(m).astype(np.int64)
        out = _kernels.hamming_scan_rows(*map(read_only, (words, qw, cand, exclude, n_keep)))
        keys, rows = merge_topk(out, n_keep)  # a heap per chunk, not the full scans' buffers
        return keys, rows, int(cand.size)
    marr = m if m is not None else np.ones(1, np.bool_)
    args = (words, qw, marr, m is not None, exclude, n_keep)
    if n * nbytes <= _SERIAL_BYTES:
        out = _kernels.hamming_scan_serial(*map(read_only, args))
    else:
        out = run_parallel(_kernels.hamming_scan, *args, n_chunks(n), False)
    keys, rows = merge_hamming_topk(out, n_keep, 8 * nbytes)
    return keys, rows, int(n)


def hamming_topk(
    codes: npt.NDArray[np.uint8],
    query_code: npt.ArrayLike,
    k: int = 10,
    *,
    mask: npt.ArrayLike | None = None,
    exclude_row: int | None = None,
) -> KnnResult:
    """Hamming top-k (fewest differing bits) over packed binary codes.

    Args:
        codes: ``(N, B)`` uint8 packed codes, B a multiple of 8 (16 for bin128).
        query_code: ``(B,)`` uint8 code of the query (:func:`binarize`).
        k: Neighbours wanted, 1..:data:`K_MAX`.
        mask: Optional ``(N,)`` bool eligibility.
        exclude_row: A row never returned.

    Returns:
        :class:`KnnResult`, scores ``1 - 2 d / bits``.
    """
    k = check_k(k)
    keys, top, scanned = hamming_candidates(codes, np.asarray(query_code), k, mask, exclude_row)
    bits = codes.shape[1] * 8
    return KnnResult(rows=top, scores=1.0 + 2.0 * keys / bits, scanned=scanned, mode="hamming")


def hamming_then_rerank(
    vectors: npt.NDArray[np.int8],
    norms: npt.NDArray[np.float32],
    codes: npt.NDArray[np.uint8],
    query: npt.ArrayLike,
    k: int = 10,
    *,
    multiple: int = DEFAULT_RERANK_MULTIPLE,
    mask: npt.ArrayLike | None = None,
    exclude_row: int | None = None,
    query_code: npt.ArrayLike | None = None,
) -> KnnResult:
    """Hamming candidates (``multiple * k``), re-ranked by exact cosine.

    Args:
        vectors, norms: as in :func:`cosine_topk`.
        codes: ``(N, 16)`` bin128 codes of the same rows.
        query: ``(D,)`` query vector (int8 or float).
        k: Neighbours wanted, 1..:data:`K_MAX`.
        multiple: Candidates per neighbour (>= 1).
        mask, exclude_row: as in :func:`cosine_topk`.
        query_code: The query's code if already known (else :func:`binarize` of ``query``).

    Returns:
        :class:`KnnResult` with cosine scores; ``scanned`` counts the Hamming scan,
        ``reranked`` the candidates.
    """
    k = check_k(k)
    if isinstance(multiple, bool) or not isinstance(multiple, (int, np.integer)) or multiple < 1:
        raise InvalidVectorQuery(f"multiple must be a positive integer, got {multiple!r}")
    qc = binarize(np.asarray(query)) if query_code is None else np.asarray(query_code, np.uint8)
    n_cand = min(MAX_CANDIDATES, int(multiple) * k)
    _, cand, scanned = hamming_candidates(codes, qc, n_cand, mask, exclude_row)
    if cand.size == 0:
        return KnnResult(np.empty(0, np.int64), np.empty(0), scanned, "hamming_then_rerank", 0)
    exact = cosine_topk(vectors, norms, query, k, rows=np.sort(cand), exclude_row=exclude_row)
    return KnnResult(exact.rows, exact.scores, scanned, "hamming_then_rerank", int(cand.size))


def calibration_truth(
    vectors: npt.NDArray[np.int8],
    norms: npt.NDArray[np.float32],
    *,
    k: int = 10,
    n_queries: int = 50,
    seed: int = 0,
) -> dict[int, set[int]]:
    """The calibration queries of a table and their answers: ``n_queries`` rows drawn with
    ``default_rng(seed)`` -> the exact cosine top-``k`` of each (itself excluded), in draw order.

    Both calibrations of a table written with lists use the same queries
    (:func:`calibrate_rerank_multiple`, :func:`store.knn.ivf.calibrate_ivf`): computed once.
    """
    n = vectors.shape[0]
    rows = np.random.default_rng(seed).choice(n, min(n_queries, n), replace=False)
    return {
        r: set(cosine_topk(vectors, norms, vectors[r], k, exclude_row=r).rows.tolist())
        for r in rows.tolist()
    }


def calibrate_rerank_multiple(
    vectors: npt.NDArray[np.int8],
    norms: npt.NDArray[np.float32],
    codes: npt.NDArray[np.uint8],
    *,
    k: int = 10,
    target: float = 0.95,
    n_queries: int = 50,
    seed: int = 0,
    multiples: tuple[int, ...] = CALIBRATION_MULTIPLES,
    truth: Mapping[int, set[int]] | None = None,
) -> tuple[int, dict[int, float]]:
    """Smallest candidate multiple whose mean recall@k reaches ``target`` on this table.

    Queries are ``n_queries`` rows drawn with ``default_rng(seed)`` (each excluded
    from its own answer); recall is measured against exact cosine
    (:func:`calibration_truth`, or ``truth`` when the caller already has it). The Hamming
    ranking is computed once at the largest multiple: the candidates of a smaller
    multiple are a prefix of it (the order is total), so each multiple costs only
    its rerank. Store the result as ``meta["rerank_multiple"]`` when writing the
    table; :meth:`store.knn.table.KnnTable.search` uses it.

    Returns:
        (chosen multiple, {multiple: recall}); the largest multiple when none reaches target.
    """
    if truth is None:
        truth = calibration_truth(vectors, norms, k=k, n_queries=n_queries, seed=seed)
    top_m = max(multiples)
    hits = {m: 0 for m in multiples}
    for r, exact in truth.items():
        _, ranked, _ = hamming_candidates(codes, codes[r], min(MAX_CANDIDATES, top_m * k), None, r)
        for m in multiples:
            got = cosine_topk(vectors, norms, vectors[r], k, rows=np.sort(ranked[: m * k]))
            hits[m] += len(exact & set(got.rows.tolist()))
    recall = {m: hits[m] / (k * len(truth)) for m in multiples}
    chosen = next((m for m in sorted(multiples) if recall[m] >= target), max(multiples))
    return chosen, recall
