"""Numba Hamming scan kernels behind :mod:`store.knn` (private to the package).

Hamming full scans keep a histogram-bounded buffer instead of a heap (integer
distances make that O(1) per kept row, which matters when hamming_then_rerank
keeps thousands of candidates); their chunks come back unsorted, and
:func:`merge_hamming` merges them by a counting sort on the distance. Keys are the
negated distance; ordering is as in :mod:`store.knn._kernels` (higher key first,
then lower row). Re-exported by :mod:`store.knn._kernels`, which callers import.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numba import njit, prange

from store.knn._prims import (
    _FASTMATH,
    HBLOCK,
    REGION_BYTES,
    SBLOCK,
    _drop,
    _heap_offer,
    _popcnt,
)
from store.knn._simd import PREFETCH_BYTES, prefetch

_prefetch: Any = prefetch  # untyped alias for mypy; numba resolves it to the intrinsic

__all__ = [
    "hamming_scan",
    "hamming_scan_rows",
    "hamming_scan_serial",
    "hamming_scan_split",
    "hamming_seed_counts",
    "merge_hamming",
]


@njit(inline="always", fastmath=_FASTMATH)
def _hamming_chunk(codes, q, mask, use_mask, exclude, lo, hi, n_keep, keys, rows, shared):  # type: ignore[no-untyped-def]
    """Hamming scan of rows lo..hi keeping the best ``n_keep``; returns the buffer length."""
    st = _hamming_state(codes.shape[1])
    hist = np.zeros(64 * codes.shape[1] + 2, np.int64)
    _hamming_block_scan(
        codes, q, mask, use_mask, exclude, lo, hi, 0, n_keep, keys, rows, st, hist, shared
    )
    return _hamming_finish(keys, rows, st)


@njit(inline="always")
def _hamming_state(w):  # type: ignore[no-untyped-def]
    """Fresh scan state: [buffer length, limit, kept rows with distance <= limit]."""
    st = np.zeros(3, np.int64)
    st[1] = 64 * w + 1  # accept everything until n_keep rows are kept
    return st


@njit(inline="always")
def _hamming_finish(keys, rows, st):  # type: ignore[no-untyped-def]
    """Drop kept rows beyond the final limit; returns the buffer length."""
    limit = st[1]
    m = 0
    for i in range(st[0]):
        if -keys[i] <= limit:
            keys[m] = keys[i]
            rows[m] = rows[i]
            m += 1
    return m


@njit(inline="always", fastmath=_FASTMATH)
def _hamming_block_scan(  # type: ignore[no-untyped-def]
    codes, q, mask, use_mask, exclude, lo, hi, base, n_keep, keys, rows, st, hist, shared
):
    """Hamming scan of local rows lo..hi (table row = ``base`` + local) into a kept buffer.

    Distances are small integers, so instead of a heap this keeps an append-only
    buffer and a histogram of the kept distances. ``limit`` is the smallest
    distance t with at least ``n_keep`` kept rows at distance <= t: rows arrive in
    increasing row order, so a later row at distance >= limit ranks below n_keep
    kept rows and is rejected with one compare; accepted rows cost an append.
    The buffer is compacted (rows with distance > limit dropped) when full; it
    then holds at most 2 * n_keep rows. ``st`` and ``hist`` carry the state over
    calls (the buffers of a file scan); :func:`_hamming_finish` ends a scan.
    Output keys are -distance, unsorted.

    ``shared[0]`` is a bound all chunks of one scan share: every chunk's limit
    bounds the global ``n_keep``-th distance D* (that chunk alone holds n_keep rows
    at distance <= its limit), so a row farther than the smallest limit published
    so far cannot be in the answer, whichever chunk it is in. Ties at that bound
    are kept (a row of an earlier chunk wins a tie). Chunks publish their limit
    as it tightens; a stale read only means a looser bound. Without it every
    chunk keeps ~n_keep * (1 + ln(rows / n_keep)) rows before its own limit settles.
    """
    w = codes.shape[1]
    hblock = HBLOCK
    buf = np.empty(hblock, np.int32)
    flat = codes.reshape(-1)  # contiguous rows: word j of row r is flat[w * r + j]
    q0 = q[0]
    q1 = q[1 % w]
    for b0 in range(lo, hi, hblock):
        b1 = min(b0 + hblock, hi)
        bound = min(st[1], shared[0] + 1)  # reject distances >= bound
        best = np.int32(1 << 30)
        # zero-based indices into the block's words: no wraparound, vector loads
        fb = flat[w * b0 : w * b1]
        if w == 2:
            # flat int32 form: vectorises better than codes[r, j] with int64 sums
            for i in range(b1 - b0):
                dist = np.int32(_popcnt(fb[2 * i] ^ q0)) + np.int32(_popcnt(fb[2 * i + 1] ^ q1))
                buf[i] = dist
                best = min(best, dist)
        else:
            for i in range(b1 - b0):
                acc = np.int32(0)
                for j in range(w):
                    acc += np.int32(_popcnt(fb[w * i + j] ^ q[j]))
                buf[i] = acc
                best = min(best, acc)
        if best >= bound:
            continue
        for r in range(b0, b1):
            dist = buf[r - b0]
            g = base + r
            if dist >= bound or dist >= st[1] or g == exclude or (use_mask and not mask[g]):
                continue
            _hamming_keep(dist, g, n_keep, keys, rows, st, hist, shared)


@njit(inline="always")
def _hamming_keep(dist, g, n_keep, keys, rows, st, hist, shared):  # type: ignore[no-untyped-def]
    """Append row ``g`` at distance ``dist`` (< the limit) and tighten the limit."""
    cap = keys.shape[0]
    size = st[0]
    limit = st[1]
    kept_le_limit = st[2]
    if size == cap:  # compact: drop rows now beyond the limit
        m = 0
        for i in range(size):
            if -keys[i] <= limit:
                keys[m] = keys[i]
                rows[m] = rows[i]
                m += 1
        size = m
    keys[size] = -np.float64(dist)
    rows[size] = g
    size += 1
    hist[dist] += 1
    kept_le_limit += 1
    while limit > 0 and kept_le_limit - hist[limit] >= n_keep:
        kept_le_limit -= hist[limit]
        limit -= 1
    if kept_le_limit >= n_keep and limit < shared[0]:
        shared[0] = limit
    st[0] = size
    st[1] = limit
    st[2] = kept_le_limit


@njit(inline="always")
def _hamming_rows_chunk(codes, q, cand, exclude, lo, hi, keys, rows):  # type: ignore[no-untyped-def]
    """Hamming distance of the candidate rows cand[lo:hi] into the heap."""
    k = keys.shape[0]
    w = codes.shape[1]
    size = 0
    for i in range(lo, hi):
        r = cand[i]
        if r == exclude:
            continue
        dist = np.int64(0)
        for j in range(w):
            dist += np.int64(_popcnt(codes[r, j] ^ q[j]))
        size = _heap_offer(keys, rows, size, k, -np.float64(dist), r)
    return size


@njit(cache=True, fastmath=_FASTMATH)
def hamming_scan_serial(codes, q, mask, use_mask, exclude, k):  # type: ignore[no-untyped-def]
    """:func:`hamming_scan` on the calling thread (one chunk)."""
    cap = 4 * k + 64
    out_k = np.empty((1, cap), np.float64)
    out_r = np.empty((1, cap), np.int64)
    sizes = np.zeros(1, np.int64)
    shared = np.full(1, 64 * codes.shape[1] + 1, np.int64)
    sizes[0] = _hamming_chunk(
        codes, q, mask, use_mask, exclude, 0, codes.shape[0], k, out_k[0], out_r[0], shared
    )
    return out_k, out_r, sizes


@njit(cache=True)
def hamming_scan_rows(codes, q, cand, exclude, k):  # type: ignore[no-untyped-def]
    """Hamming top-k over the rows listed in ``cand`` (serial)."""
    out_k = np.empty((1, k), np.float64)
    out_r = np.empty((1, k), np.int64)
    sizes = np.zeros(1, np.int64)
    sizes[0] = _hamming_rows_chunk(codes, q, cand, exclude, 0, cand.shape[0], out_k[0], out_r[0])
    return out_k, out_r, sizes


@njit(cache=True)
def merge_hamming(keys, rows, sizes, n_keep, bits):  # type: ignore[no-untyped-def]
    """The best ``n_keep`` of the Hamming scans' chunk buffers, best first, in O(entries).

    For the outputs of :func:`hamming_scan`, :func:`hamming_scan_split` and
    :func:`hamming_scan_serial` only: their chunks are ascending row ranges and each
    buffer holds its rows in ascending order (appends in row order; compaction keeps
    the order), so reading the buffers chunk by chunk visits rows in ascending order
    and a stable counting sort by distance (0..``bits``) orders by (distance, row),
    the kernels' total order, with no comparison sort.

    Returns:
        ``(keys, rows)``: -distance and row of at most ``n_keep`` entries, best first.
    """
    hist = np.zeros(bits + 2, np.int64)
    total = 0
    for c in range(sizes.shape[0]):
        for i in range(sizes[c]):
            hist[np.int64(-keys[c, i])] += 1
        total += sizes[c]
    n_out = min(n_keep, total)
    start = np.zeros(bits + 2, np.int64)  # first output slot of each distance
    acc = 0
    for t in range(bits + 1):
        start[t] = acc
        acc += hist[t]
    out_k = np.empty(n_out, np.float64)
    out_r = np.empty(n_out, np.int64)
    for c in range(sizes.shape[0]):
        for i in range(sizes[c]):
            dist = np.int64(-keys[c, i])
            j = start[dist]
            if j < n_out:
                out_k[j] = keys[c, i]
                out_r[j] = rows[c, i]
            start[dist] = j + 1
    return out_k, out_r


@njit(parallel=True, cache=True, fastmath=_FASTMATH)
def hamming_scan(codes, q, mask, use_mask, exclude, k, nchunk, release):  # type: ignore[no-untyped-def]
    """Hamming top-k (key = -distance) over (N, W) uint64 codes, in ``nchunk`` chunks.

    Each chunk scans its rows region by region (:data:`REGION_BYTES`); with
    ``release`` a memory-mapped table drops each region after its scan, so the
    codes never stay resident (read-only file mappings only, see
    :func:`cosine_scan_pruned`).

    Args:
        codes: (N, W) uint64, the packed sign bits viewed as words.
        q: (W,) uint64 query code.
        mask, use_mask, exclude, k, nchunk: as in :func:`cosine_scan`.
        release: drop scanned regions from the resident set.
    """
    n, w = codes.shape
    cap = 4 * k + 64
    out_k = np.empty((nchunk, cap), np.float64)
    out_r = np.empty((nchunk, cap), np.int64)
    sizes = np.zeros(nchunk, np.int64)
    shared = np.full(1, 64 * w + 1, np.int64)
    region_rows = max(HBLOCK, REGION_BYTES // (8 * w))
    for c in prange(nchunk):
        lo = n * c // nchunk
        hi = n * (c + 1) // nchunk
        st = _hamming_state(w)
        hist = np.zeros(64 * w + 2, np.int64)
        for a in range(lo, hi, region_rows):
            m = min(region_rows, hi - a)
            _hamming_block_scan(
                codes[a : a + m],
                q,
                mask,
                use_mask,
                exclude,
                0,
                m,
                a,
                k,
                out_k[c],
                out_r[c],
                st,
                hist,
                shared,
            )
            if release:
                _drop(codes, a, a + m, a + m >= hi)
        sizes[c] = _hamming_finish(out_k[c], out_r[c], st)
    return out_k, out_r, sizes


@njit(parallel=True, cache=True, fastmath=_FASTMATH)
def hamming_scan_split(planes, q, mask, use_mask, exclude, k, nchunk, release, seed, prefetch1):  # type: ignore[no-untyped-def]
    """:func:`hamming_scan` over 128-bit codes stored word-major (two uint64 planes).

    The distance over the first 64 bits bounds the full distance from below, so a
    block of :data:`SBLOCK` rows whose first-word distances all reach the current
    limit is rejected without its second words. A block with a passing row reads
    its second words in one vectorised pass (full distances and their minimum),
    and only a block whose best full distance passes is walked row by row. The
    answer is the same as the row-major scan's (same keys, same order); for a
    small ``k`` about half the bytes are read, and for a rerank's thousands of
    candidates the unwalked blocks still save their second words.

    Args:
        planes: ``(2, N)`` uint64 codes word-major, memory-mapped: read in place, each
            region (:data:`REGION_BYTES` over both planes) released after its scan when ``release``
            (read-only file mappings only).
        q: (2,) uint64 query code words.
        seed: a distance bound T (129: none). Only rows at distance <= T are kept, as if a
            chunk had proven T: the answer is exact (the same as with no seed) when the
            chunks keep at least ``k`` rows in all (``sizes.sum() >= k``: then the k-th
            distance is <= T); otherwise the caller must scan again without it
            (:meth:`store.knn.table.KnnTable.hamming_blockwise` estimates T from a sample).
        prefetch1: also prefetch every block's second words 4 kB ahead: for a large ``k``,
            where most blocks read them, demand misses cost more than the extra bytes.
        Others as in :func:`hamming_scan`.
    """
    n = planes.shape[1]
    cap = 4 * k + 64
    out_k = np.empty((nchunk, cap), np.float64)
    out_r = np.empty((nchunk, cap), np.int64)
    sizes = np.zeros(nchunk, np.int64)
    # 129 = 64 * 2 + 1: keep everything until a limit settles
    shared = np.full(1, min(np.int64(seed), np.int64(129)), np.int64)
    region_rows = REGION_BYTES // 16  # both planes of a region: REGION_BYTES, as the row-major scan
    q0 = q[0]
    q1 = q[1]
    p0 = planes[0]
    p1 = planes[1]
    for c in prange(nchunk):
        lo = n * c // nchunk
        hi = n * (c + 1) // nchunk
        keys = out_k[c]
        rows = out_r[c]
        buf = np.empty(SBLOCK, np.int32)
        st = _hamming_state(2)
        hist = np.zeros(130, np.int64)
        for a in range(lo, hi, region_rows):
            m = min(region_rows, hi - a)
            w0 = p0[a : a + m]
            w1 = p1[a : a + m]
            touched1 = False
            for b0 in range(0, m, SBLOCK):
                b1 = min(b0 + SBLOCK, m)
                # zero-based indices into block slices: LLVM then knows no index is
                # negative (numba's wraparound) and loads words as vectors, not gathers
                x0 = w0[b0:b1]
                pf = x0.ctypes.data + PREFETCH_BYTES  # the first words 4 kB ahead (8 lines)
                for line in range(0, 8 * SBLOCK, 64):
                    _prefetch(pf + line)
                if prefetch1:
                    pf1 = w1[b0:b1].ctypes.data + PREFETCH_BYTES
                    for line in range(0, 8 * SBLOCK, 64):
                        _prefetch(pf1 + line)
                lim = np.int32(min(st[1], shared[0] + 1))  # reject distances >= lim
                best = np.int32(1 << 30)
                for i in range(b1 - b0):
                    d0 = np.int32(_popcnt(x0[i] ^ q0))
                    buf[i] = d0
                    best = min(best, d0)
                if best >= lim:
                    continue
                touched1 = True
                x1 = w1[b0:b1]
                best = np.int32(1 << 30)
                for i in range(b1 - b0):  # vectorised: no branch per row
                    dist = buf[i] + np.int32(_popcnt(x1[i] ^ q1))
                    buf[i] = dist
                    best = min(best, dist)
                if best >= lim:
                    continue
                for i in range(b1 - b0):
                    dist = buf[i]
                    g = a + b0 + i
                    if dist >= lim or dist >= st[1] or g == exclude or (use_mask and not mask[g]):
                        continue
                    _hamming_keep(dist, g, k, keys, rows, st, hist, shared)
                    lim = np.int32(min(st[1], shared[0] + 1))
            if release:
                _drop(p0, a, a + m, a + m >= hi)
                if touched1:  # sparse: each release its own, rounded out
                    _drop(p1, a, a + m, True)
        sizes[c] = _hamming_finish(keys, rows, st)
    return out_k, out_r, sizes


@njit(cache=True)
def hamming_seed_counts(planes, q, starts, run, mask, use_mask, exclude, release):  # type: ignore[no-untyped-def]
    """Histogram of the distances of the rows ``start .. start + run`` for each start (a sample).

    Rows excluded or outside the mask are not counted. Returns ``(counts (130,), rows counted)``.
    With ``release`` each run's words are dropped from the resident set after (as the scans do).
    """
    hist = np.zeros(130, np.int64)
    total = 0
    q0 = q[0]
    q1 = q[1]
    p0 = planes[0]
    p1 = planes[1]
    for s in range(starts.shape[0]):
        a = starts[s]
        w0 = p0[a : a + run]
        w1 = p1[a : a + run]
        for i in range(w0.shape[0]):
            g = a + i
            if g == exclude or (use_mask and not mask[g]):
                continue
            hist[_popcnt(w0[i] ^ q0) + _popcnt(w1[i] ^ q1)] += 1
            total += 1
        if release:
            _drop(p0, a, a + w0.shape[0], True)
            _drop(p1, a, a + w1.shape[0], True)
    return hist, total
