"""Numba scan kernels behind :mod:`store.knn` (private to the package).

Every kernel scans rows in blocks: a vectorisable pass computes one block of
raw scores (int32 dot products or Hamming distances) into a small buffer, a
second pass only walks the block when its best score could enter the running
top-k. The top-k is a fixed-size binary heap per chunk (root = worst kept), so
no N-sized score array exists and nothing over N is sorted. Chunks are
contiguous row ranges, one heap each; the caller merges the chunk heaps.

Ordering is total and deterministic: higher key first, then lower row. A new
row enters a full heap only if it beats the root under that order, so the
result does not depend on the number of chunks or threads.

Hamming full scans keep a histogram-bounded buffer instead of a heap (integer
distances make that O(1) per kept row, which matters when hamming_then_rerank
keeps thousands of candidates); their chunks come back unsorted, the merge sorts.

Keys: cosine kernels use ``dot / norm[row]`` (float64; the query norm is a
positive constant and is divided out by the caller); Hamming kernels use the
negated distance.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numba import njit, prange

from store.knn._hamming import (
    hamming_scan,
    hamming_scan_rows,
    hamming_scan_serial,
    hamming_scan_split,
    hamming_seed_counts,
    merge_hamming,
)
from store.knn._prims import (
    _FASTMATH,
    BLOCK,
    REGION_ROWS,
    _drop,
    _heap_offer,
    _read_full,
    popcount64,
    sys_madvise,
    sys_pread,
)
from store.knn._simd import dot16x64

_dot16: Any = dot16x64  # untyped alias for mypy; numba resolves it to the intrinsic

__all__ = [
    "BLOCK",
    "cosine_rows_normed",
    "cosine_scan",
    "cosine_scan_file",
    "cosine_scan_pruned",
    "cosine_scan_rows",
    "cosine_scan_serial",
    "hamming_scan",
    "hamming_scan_rows",
    "hamming_scan_serial",
    "hamming_scan_split",
    "hamming_seed_counts",
    "merge_hamming",
    "popcount64",
    "pread_rows",
    "pread_rows_parallel",
    "sys_madvise",
    "sys_pread",
]


# --------------------------------------------------------------------------- dots


@njit(inline="always", fastmath=_FASTMATH)
def _dot_i8(vec, r: int, q):  # type: ignore[no-untyped-def]
    """Exact int8 row x int16 query (holding int8 values) dot product, int32 accumulate.

    Cannot overflow for D <= 2^17. Widening the row to int16 against an int16 query
    lets LLVM use 16 x 16 -> 32-bit multiply-adds (vpmaddwd). (Choose between this
    and :func:`_dot_i8_128` per block, not per row: a branch inside this inlined
    helper keeps LLVM from vectorising the row loop.)
    """
    acc = np.int32(0)
    for j in range(vec.shape[1]):
        acc += np.int16(vec[r, j]) * q[j]
    return np.float64(np.int32(acc))


@njit(inline="always", fastmath=_FASTMATH)
def _dot_i8_128(vec, r: int, q):  # type: ignore[no-untyped-def]
    """:func:`_dot_i8` for D = 128 (Tessera): a literal trip count unrolls the row."""
    acc = np.int32(0)
    for j in range(128):
        acc += np.int16(vec[r, j]) * q[j]
    return np.float64(np.int32(acc))


@njit(inline="always", fastmath=_FASTMATH)
def _dot_f32(vec, r: int, q):  # type: ignore[no-untyped-def]
    """int8 row x float32 query, float32 accumulate (reassociated for SIMD)."""
    acc = np.float32(0.0)
    for j in range(vec.shape[1]):
        acc += np.float32(vec[r, j]) * q[j]
    return np.float64(acc)


@njit(inline="always")
def _key(dot: float, norm: np.float32) -> float:
    """Cosine key without the query norm; a zero-norm row scores 0."""
    return dot / np.float64(norm) if norm > 0 else 0.0


@njit(inline="always", fastmath=_FASTMATH)
def _cosine_chunk(vec, norms, qi, qf, use_float, mask, use_mask, exclude, lo, hi, keys, rows):  # type: ignore[no-untyped-def]
    """Scan rows lo..hi into the empty heap (keys, rows); returns the heap size."""
    return _cosine_block_scan(
        vec, norms, qi, qf, use_float, mask, use_mask, exclude, lo, hi, 0, 0, keys, rows
    )


@njit(inline="always", fastmath=_FASTMATH)
def _cosine_block_scan(  # type: ignore[no-untyped-def]
    vec, norms, qi, qf, use_float, mask, use_mask, exclude, lo, hi, base, size, keys, rows
):
    """Scan local rows lo..hi of ``vec`` (table row = ``base`` + local row) into a heap.

    ``size`` is the heap's current size (the heap carries over between the buffers
    of a file scan); ``mask`` and ``exclude`` are indexed by table row. Returns the
    new heap size.
    """
    k = keys.shape[0]
    d128 = vec.shape[1] == 128
    buf = np.empty(BLOCK, np.float64)
    for b0 in range(lo, hi, BLOCK):
        b1 = min(b0 + BLOCK, hi)
        if use_float:
            for r in range(b0, b1):
                buf[r - b0] = _dot_f32(vec, r, qf)
        elif d128:
            for r in range(b0, b1):
                buf[r - b0] = _dot_i8_128(vec, r, qi)
        else:
            for r in range(b0, b1):
                buf[r - b0] = _dot_i8(vec, r, qi)
        best = -np.inf
        for r in range(b0, b1):
            s = _key(buf[r - b0], norms[r])
            buf[r - b0] = s
            best = max(best, s)
        if size == k and best < keys[0]:
            continue
        for r in range(b0, b1):
            # cheap reject first: most rows of a walked block are below the root
            g = base + r
            if (size == k and buf[r - b0] < keys[0]) or g == exclude or (use_mask and not mask[g]):
                continue
            size = _heap_offer(keys, rows, size, k, buf[r - b0], g)
    return size


@njit(inline="always", fastmath=_FASTMATH)
def _cosine_rows_chunk(vec, norms, qi, qf, use_float, cand, exclude, lo, hi, keys, rows):  # type: ignore[no-untyped-def]
    """Score the candidate rows cand[lo:hi] into the heap; returns the heap size."""
    k = keys.shape[0]
    size = 0
    for i in range(lo, hi):
        r = cand[i]
        if r == exclude:
            continue
        d = _dot_f32(vec, r, qf) if use_float else _dot_i8(vec, r, qi)
        size = _heap_offer(keys, rows, size, k, _key(d, norms[r]), r)
    return size


# Each scan comes in a parallel form (nchunk contiguous chunks, one heap each,
# prange over chunks) and a serial form (one chunk on the calling thread). The
# serial form is used for small scans: a parallel region ends in a barrier, and on
# a loaded machine waiting for the other thread to be scheduled costs milliseconds.
# Both return (keys (nchunk, cap) float64, rows (nchunk, cap) int64, sizes (nchunk,) int64),
# cap = k for heaps and 4 k + 64 for the Hamming buffers; only the first sizes[c] are valid.


@njit(parallel=True, cache=True, fastmath=_FASTMATH)
def cosine_scan(vec, norms, qi, qf, use_float, mask, use_mask, exclude, k, nchunk):  # type: ignore[no-untyped-def]
    """Exact cosine top-k over all rows, in ``nchunk`` contiguous chunks.

    Args:
        vec: (N, D) int8 rows.
        norms: (N,) float32 L2 norms of the rows.
        qi: (D,) int8 query (used when ``use_float`` is false).
        qf: (D,) float32 query (used when ``use_float`` is true).
        use_float: pick the float32 query path.
        mask: (N,) bool eligibility (read only when ``use_mask``).
        use_mask: honour ``mask``.
        exclude: a row never returned (-1 for none).
        k: heap capacity per chunk.
        nchunk: number of chunks (several per thread, scheduled dynamically).
    """
    n = vec.shape[0]
    out_k = np.empty((nchunk, k), np.float64)
    out_r = np.empty((nchunk, k), np.int64)
    sizes = np.zeros(nchunk, np.int64)
    for c in prange(nchunk):
        lo = n * c // nchunk
        hi = n * (c + 1) // nchunk
        sizes[c] = _cosine_chunk(
            vec, norms, qi, qf, use_float, mask, use_mask, exclude, lo, hi, out_k[c], out_r[c]
        )
    return out_k, out_r, sizes


@njit(cache=True, fastmath=_FASTMATH)
def cosine_scan_serial(vec, norms, qi, qf, use_float, mask, use_mask, exclude, k):  # type: ignore[no-untyped-def]
    """:func:`cosine_scan` on the calling thread (one chunk)."""
    out_k = np.empty((1, k), np.float64)
    out_r = np.empty((1, k), np.int64)
    sizes = np.zeros(1, np.int64)
    sizes[0] = _cosine_chunk(
        vec, norms, qi, qf, use_float, mask, use_mask, exclude, 0, vec.shape[0], out_k[0], out_r[0]
    )
    return out_k, out_r, sizes


@njit(cache=True, fastmath=_FASTMATH)
def cosine_scan_rows(vec, norms, qi, qf, use_float, cand, exclude, k):  # type: ignore[no-untyped-def]
    """Exact cosine top-k over the rows listed in ``cand`` (gather, any order; serial)."""
    out_k = np.empty((1, k), np.float64)
    out_r = np.empty((1, k), np.int64)
    sizes = np.zeros(1, np.int64)
    sizes[0] = _cosine_rows_chunk(
        vec, norms, qi, qf, use_float, cand, exclude, 0, cand.shape[0], out_k[0], out_r[0]
    )
    return out_k, out_r, sizes


@njit(cache=True, fastmath=_FASTMATH)
def cosine_rows_normed(vec, qi, qf, use_float, k):  # type: ignore[no-untyped-def]
    """Exact cosine top-k of rows read out of a table (a rerank's candidates), serial.

    Computes each row's norm as :func:`store.knn.codes.int8_norms` does (integer sum of
    squares, float64 sqrt, rounded to float32: equal to the stored norms) in the same
    pass as its dot product, instead of a separate numpy pass. Keys and tie order as in
    :func:`cosine_scan_rows` (local row = position in ``vec``).
    """
    n, d = vec.shape
    out_k = np.empty((1, k), np.float64)
    out_r = np.empty((1, k), np.int64)
    sizes = np.zeros(1, np.int64)
    keys = out_k[0]
    rows = out_r[0]
    size = 0
    for r in range(n):
        sq = np.int32(0)
        for j in range(d):
            x = np.int32(vec[r, j])
            sq += x * x
        norm = np.float32(np.sqrt(np.float64(sq)))
        if use_float:
            dot = _dot_f32(vec, r, qf)
        elif d == 128:
            dot = _dot_i8_128(vec, r, qi)
        else:
            dot = _dot_i8(vec, r, qi)
        size = _heap_offer(keys, rows, size, k, _key(dot, norm), r)
    sizes[0] = size
    return out_k, out_r, sizes


# Scans of large tables never leave the table resident. The unpruned cosine scan
# reads rows with pread into small per-chunk buffers (FILE_BUF_BYTES, in L2); the
# pruned cosine and the Hamming scans read the mapping in place and release each
# region after scanning it (_drop). The page cache still serves repeated scans.
# The pread-based ones return the chunk results as above plus ``errs`` (nchunk,):
# 0, or 1 + the first row a short read hit.

FILE_BUF_BYTES = 1 << 18
"""Bytes of rows per pread in the file scans (fits L2 beside the kernel's state)."""


@njit(parallel=True, cache=True, fastmath=_FASTMATH)
def cosine_scan_file(  # type: ignore[no-untyped-def]
    fdv, voff, fdn, noff, n, d, qi, qf, use_float, mask, use_mask, exclude, k, nchunk
):
    """:func:`cosine_scan` over rows read from files (``vectors.npy`` / ``norms.npy``).

    Args:
        fdv, voff: open descriptor of the (N, D) int8 rows and the data offset in it.
        fdn, noff: the same for the (N,) float32 norms.
        n, d: rows and dimension.
        Others as in :func:`cosine_scan`.
    """
    out_k = np.empty((nchunk, k), np.float64)
    out_r = np.empty((nchunk, k), np.int64)
    sizes = np.zeros(nchunk, np.int64)
    errs = np.zeros(nchunk, np.int64)
    step = max(BLOCK, FILE_BUF_BYTES // (d + 4) // BLOCK * BLOCK)
    for c in prange(nchunk):
        lo = n * c // nchunk
        hi = n * (c + 1) // nchunk
        vbuf = np.empty((step, d), np.int8)
        nbuf = np.empty(step, np.float32)
        size = 0
        for a in range(lo, hi, step):
            m = min(step, hi - a)
            if not _read_full(fdv, vbuf.ctypes.data, m * d, voff + a * d) or not _read_full(
                fdn, nbuf.ctypes.data, m * 4, noff + a * 4
            ):
                errs[c] = a + 1
                break
            size = _cosine_block_scan(
                vbuf,
                nbuf,
                qi,
                qf,
                use_float,
                mask,
                use_mask,
                exclude,
                0,
                m,
                a,
                size,
                out_k[c],
                out_r[c],
            )
        sizes[c] = size
    return out_k, out_r, sizes, errs


# Pruned exact cosine. A table may carry, beside its rows, a "head" copy of each
# row holding only its H highest-variance dimensions and the L2 norm of the
# remaining (tail) dimensions, rounded up. Cauchy-Schwarz bounds the full dot
# product: dot(q, v) <= dot(q_head, v_head) + |q_tail| |v_tail|. A row whose
# bound, over its norm, is below the scan's current k-th best key cannot enter
# the answer; only the rows that pass are read whole (pread) and scored exactly,
# with the same key as the full scan. The answer equals the full scan's; the
# bytes read per row drop from D + 4 to H + 8 plus the survivors' rows.

BOUND_SLACK = 1e-3
"""Added to every bound (in dot-product units, i.e. int8 x int8 sums in the
thousands): covers float64 rounding of the bound arithmetic many times over."""

BULK_ROWS = 32
"""When more rows of a buffer pass than this, read the buffer's rows in one pread
(~0.5 MB: the cost of some tens of single-row preads) instead of one per row."""


@njit(cache=True, nogil=True)
def _head_dots_generic(head, b0, nb, g4, q8, corr, part):  # type: ignore[no-untyped-def]
    """:func:`store.knn._simd.dot16x64` for any number ``g4`` of 4-dimension groups, over
    ``nb`` head blocks from block ``b0``: ``part[16 b + r]`` = the exact dot product of row
    ``r`` of block ``b0 + b`` (the stored layout, :func:`store.knn.codes.head_blocks`) with
    the int8 query ``q8``.

    Not inlined: inlined into :func:`cosine_scan_pruned` beside the SIMD block, this loop
    slowed the scan's SIMD path by ~17 % on one thread (bench/HISTORY.md, session 21).
    """
    for b in range(nb):
        for r in range(16):
            acc = np.int32(corr)
            for g in range(g4):
                o = g * 64 + r * 4
                for j in range(4):
                    acc += np.int32(head[b0 + b, o + j]) * np.int32(q8[4 * g + j])
            part[16 * b + r] = np.float64(acc)


@njit(parallel=True, cache=True, fastmath=_FASTMATH)
def cosine_scan_pruned(  # type: ignore[no-untyped-def]
    head,
    norms,
    tailnorm,
    fdv,
    voff,
    n,
    h,
    d,
    qh,
    qi,
    qtn,
    mask,
    use_mask,
    exclude,
    k,
    nchunk,
    seed,
    release,
):
    """Exact cosine top-k (int8 query) reading heads and reading whole rows only as needed.

    Args:
        head: (ceil(N / 16), 16 H) uint8 heads in blocks of 16 rows
            (:func:`store.knn.codes.head_blocks`), memory-mapped; read in place, and
            each region of :data:`REGION_ROWS` rows released after its scan (with
            ``norms`` and ``tailnorm``), so the process never holds more than a few
            regions.
        norms: (N,) float32 row norms (mapped).
        tailnorm: (N,) float32 tail norms, rounded up (mapped).
        fdv, voff: descriptor and data offset of the (N, D) int8 rows (read with pread).
        n, h, d: rows, head dimensions, full dimension.
        qh: (H,) int16 query head (the query's values at the head dimensions).
        qi: (D,) int16 full query.
        qtn: L2 norm of the query's tail dimensions (rounded up).
        mask, use_mask, exclude, k, nchunk: as in :func:`cosine_scan`.
        seed: a key at most the k-th best eligible key (e.g. the k-th best of a
            sample of eligible rows), or -inf: rows whose bound is below it are
            skipped from the start.
        release: drop each scanned region of ``head``/``norms``/``tailnorm`` from
            the resident set. Only for read-only file mappings: MADV_DONTNEED on
            anonymous memory discards its contents.

    Returns:
        As :func:`cosine_scan_file`, plus ``full_reads`` (nchunk,): rows read whole.
    """
    out_k = np.empty((nchunk, k), np.float64)
    out_r = np.empty((nchunk, k), np.int64)
    sizes = np.zeros(nchunk, np.int64)
    errs = np.zeros(nchunk, np.int64)
    full_reads = np.zeros(nchunk, np.int64)
    shared = np.full(1, seed)  # max over chunks of a full heap's root: <= the k-th best key
    step = max(BLOCK, FILE_BUF_BYTES // (d + 8) // BLOCK * BLOCK)  # vbuf: rows of a bulk read
    # the SIMD block reads one 1,024-byte block of 16 heads of 64 dimensions
    simd = h == 64 and head.strides[0] == 1024 and head.strides[1] == 1
    g4 = h // 4
    hbase = head.ctypes.data
    hstride = head.strides[0]
    for c in prange(nchunk):
        # chunks start on a block of 16 rows; the last ends at n
        lo = n * c // nchunk // 16 * 16
        hi = n if c == nchunk - 1 else n * (c + 1) // nchunk // 16 * 16
        keys = out_k[c]
        rows = out_r[c]
        vbuf = np.empty((step, d), np.int8)
        cand = np.empty(step, np.int64)
        part = np.empty(step + 16, np.float64)  # the buffer's head dots (its last block whole)
        flag = np.empty(step, np.bool_)
        q8 = np.zeros(h, np.int8)  # the head query as bytes (int8 values: the int8 path)
        qsum = np.int32(0)
        for j in range(h):
            q8[j] = np.int8(qh[j])
            qsum += np.int32(qh[j])
        corr = np.int32(-128) * qsum  # the stored bytes are values + 128
        size = 0
        region = lo
        for a in range(lo, hi, step):
            m = min(step, hi - a)
            if a - region >= REGION_ROWS:
                if release:
                    _drop(head, region // 16, a // 16, False)
                    _drop(norms, region, a, False)
                    _drop(tailnorm, region, a, False)
                region = a
            nbuf = norms[a : a + m]
            tbuf = tailnorm[a : a + m]
            thr = shared[0]
            if size == k and keys[0] > thr:
                thr = keys[0]
            # the buffer's exact head dots, a block of 16 rows at a time (a is on a
            # block; the table's last block is padded), as float64
            if simd:
                for o in range(0, m, 16):
                    blk = hbase + ((a + o) // 16) * hstride
                    _dot16(blk, q8.ctypes.data, corr, part[o:].ctypes.data)
            else:
                _head_dots_generic(head, a // 16, (m + 15) // 16, g4, q8, corr, part)
            # a row can enter only if bound / norm >= thr, i.e. bound >= thr * norm
            # (no division; BOUND_SLACK dwarfs the rounding of the product). A
            # zero-norm row (key 0) passes when thr <= 0; -inf passes everything.
            # Zero-based indices into slices: LLVM then knows no index is negative
            # (numba's wraparound) and loads the norms as vectors, not gathers.
            npass = np.int64(0)
            if thr == -np.inf:
                npass = np.int64(m)
                for i in range(m):
                    flag[i] = True
            else:
                pb = part[:m]
                for i in range(m):
                    ok = pb[i] + qtn * np.float64(tbuf[i]) + BOUND_SLACK >= thr * np.float64(
                        nbuf[i]
                    )
                    flag[i] = ok
                    npass += np.int64(ok)  # a sum, not a short-circuit: stays vectorised
            nc = 0
            if npass > 0:
                for r in range(m):
                    g = a + r
                    if not flag[r] or g == exclude or (use_mask and not mask[g]):
                        continue
                    cand[nc] = r
                    nc += 1
            if nc == 0:
                continue
            if nc > BULK_ROWS:
                if not _read_full(fdv, vbuf.ctypes.data, m * d, voff + a * d):
                    errs[c] = a + 1
                    break
                full_reads[c] += m
                for i in range(nc):
                    r = cand[i]
                    dot = _dot_i8_128(vbuf, r, qi) if d == 128 else _dot_i8(vbuf, r, qi)
                    size = _heap_offer(keys, rows, size, k, _key(dot, nbuf[r]), a + r)
            else:
                ok = True
                for i in range(nc):
                    r = cand[i]
                    if not _read_full(fdv, vbuf[i].ctypes.data, d, voff + (a + r) * d):
                        ok = False
                        break
                if not ok:
                    errs[c] = a + 1
                    break
                full_reads[c] += nc
                for i in range(nc):
                    r = cand[i]
                    dot = _dot_i8_128(vbuf, i, qi) if d == 128 else _dot_i8(vbuf, i, qi)
                    size = _heap_offer(keys, rows, size, k, _key(dot, nbuf[r]), a + r)
            if size == k and keys[0] > shared[0]:
                shared[0] = keys[0]
        if release:
            _drop(head, region // 16, (hi + 15) // 16, True)
            _drop(norms, region, hi, True)
            _drop(tailnorm, region, hi, True)
        sizes[c] = size
    return out_k, out_r, sizes, errs, full_reads


@njit(parallel=True, cache=True)
def pread_rows_parallel(fd, rows, d, base, nchunk):  # type: ignore[no-untyped-def]
    """:func:`pread_rows` in ``nchunk`` parallel chunks of ``rows``, into a new ``(n, d)``
    int8 array. Returns ``(out, index of the first row a short read hit, or -1)``."""
    n = rows.shape[0]
    out = np.empty((n, d), np.int8)
    bad = np.full(nchunk, n, np.int64)
    for c in prange(nchunk):
        lo = n * c // nchunk
        hi = n * (c + 1) // nchunk
        got = pread_rows(fd, rows[lo:hi], d, base, out[lo:hi])
        if got >= 0:
            bad[c] = lo + got
    first = bad.min()
    return out, (first if first < n else -1)


@njit(cache=True, nogil=True)
def pread_rows(fd, rows, d, base, out):  # type: ignore[no-untyped-def]
    """Read rows ``rows`` (``d`` bytes each, from ``base``) into ``out[i]``; runs of
    consecutive rows come in one ``pread``. Returns the index of the first row a
    short read hit, or -1."""
    n = rows.shape[0]
    i = 0
    while i < n:
        j = i + 1
        while j < n and rows[j] == rows[j - 1] + 1:
            j += 1
        if not _read_full(fd, out[i:].ctypes.data, (j - i) * d, base + rows[i] * d):
            return i
        i = j
    return -1
