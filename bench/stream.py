"""The read-bandwidth limit of a scan, measured on the scan's own files the way the scan reads them.

A scan's "share of the read bandwidth" is only physical when the limit is
measured on the same bytes, through the same access path, with the same threads
and the same page-cache state as the scan itself. A bandwidth taken on a
private anonymous array (no page faults, no syscalls) is not that limit, and a
scan can then appear to exceed it. Here:

* :func:`mapped_pass`: a STREAM-like parallel read (XOR of 64-bit words) over
  the very ``np.memmap`` arrays a scan reads in place, after releasing them
  from this process (``MADV_DONTNEED``, as the scan leaves them), so every page
  is faulted in from the page cache exactly as in the scan.
* :func:`pread_pass`: parallel ``pread`` of the same byte ranges into small
  per-thread buffers, as the file scans read (:data:`BUF_BYTES` per call).

Both read everything in one parallel launch made as the scans make theirs
(:func:`store.knn.scan.run_parallel`: chunks handed out one at a time, so a
preempted thread's chunks go to the other), split into the same number of
chunks (:func:`store.knn.scan.n_chunks`), and return seconds; the caller
divides the bytes the scan read by them.
"""

from __future__ import annotations

import ctypes
import mmap
import os
import time
from pathlib import Path
from typing import Any

import numba
import numpy as np

from store.knn._simd import PREFETCH_BYTES, prefetch
from store.knn.mapped import advise_huge, release
from store.knn.scan import run_parallel

__all__ = ["BUF_BYTES", "mapped_pass", "page_in", "pread_pass", "words_of"]

BUF_BYTES = 1 << 18
"""Bytes per pread of :func:`pread_pass` (the file scans' buffer size)."""

_prefetch: Any = prefetch  # untyped alias for mypy; numba resolves it to the intrinsic
_libc = ctypes.CDLL(None, use_errno=True)
_pread = _libc.pread
_pread.restype = ctypes.c_ssize_t
_pread.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_ssize_t]


@numba.njit(inline="always")
def _xor_range(a, lo, hi):  # type: ignore[no-untyped-def]
    """XOR of the words ``a[lo:hi]``, read 4 kB at a time, the next 4 kB prefetched.

    Indices are zero-based into a slice (LLVM then knows none is negative, so numba's
    wraparound does not turn the loads into scalar or gathered ones): the reduction
    vectorises, and the pass is limited by the reads, not by its own instructions.
    The scans prefetch :data:`store.knn._simd.PREFETCH_BYTES` ahead; so does the limit.
    """
    x = a[lo:hi]
    n = x.shape[0]
    base = x.ctypes.data
    acc = np.uint64(0)
    step = PREFETCH_BYTES // 8
    for p in range(0, n, step):
        for line in range(0, PREFETCH_BYTES, 64):
            _prefetch(base + 8 * p + PREFETCH_BYTES + line)
        y = x[p : min(p + step, n)]
        for i in range(y.shape[0]):
            acc ^= y[i]
    return acc


@numba.njit(parallel=True, cache=True)
def _xor_words(a, b, c, nchunk):  # type: ignore[no-untyped-def]
    """One parallel launch reading up to three uint64 arrays, each cut into ``nchunk`` chunks.

    Chunk ``k`` of every array goes to the same task, as a scan's chunk reads
    its rows of every array (XOR-reduce; nothing is written).
    """
    out = np.zeros(nchunk, np.uint64)
    for k in numba.prange(nchunk):
        acc = np.uint64(0)
        na, nb, nc = a.shape[0], b.shape[0], c.shape[0]
        acc ^= _xor_range(a, na * k // nchunk, na * (k + 1) // nchunk)
        acc ^= _xor_range(b, nb * k // nchunk, nb * (k + 1) // nchunk)
        acc ^= _xor_range(c, nc * k // nchunk, nc * (k + 1) // nchunk)
        out[k] = acc
    return out.sum()


@numba.njit(parallel=True)
def _pread_chunks(fds, offsets, sizes, buf_bytes, nchunk):  # type: ignore[no-untyped-def]
    """One parallel launch preading every range; chunk ``k`` reads part ``k`` of each range.

    Returns -1 on a short read, else 0.
    """
    bad = np.zeros(nchunk, np.int64)
    for c in numba.prange(nchunk):
        buf = np.empty(buf_bytes, np.uint8)
        for r in range(fds.shape[0]):
            nbytes = sizes[r]
            lo = nbytes * c // nchunk
            hi = nbytes * (c + 1) // nchunk
            a = lo
            while a < hi:
                m = min(buf_bytes, hi - a)
                got = _pread(fds[r], buf.ctypes.data, m, offsets[r] + a)
                if got <= 0:
                    bad[c] = 1
                    break
                a += got
    return -1 if bad.sum() > 0 else 0


def words_of(arr: Any) -> np.ndarray:
    """The whole 64-bit words of a C-contiguous array's bytes (a view: nothing is copied)."""
    flat = arr.reshape(-1).view(np.uint8)
    whole = flat.shape[0] // 8 * 8
    return flat[:whole].view(np.uint64)


def mapped_pass(arrays: list[Any], nchunk: int) -> float:
    """Seconds to read every byte of ``arrays`` (read-only memmaps) in place, in parallel.

    Each array is released from this process first and after (its pages stay in
    the page cache), so the pass faults every page in from the page cache as a
    scan does. Reads whole 64-bit words (the last < 8 bytes of an array are not read).
    """
    if not 1 <= len(arrays) <= 3:
        raise ValueError(f"mapped_pass reads 1 to 3 arrays, got {len(arrays)}")
    empty = np.zeros(0, np.uint64)
    empty.flags.writeable = False
    words = [words_of(a) for a in arrays] + [empty] * (3 - len(arrays))
    for a in arrays:
        release(a, 0, a.shape[0])
    t0 = time.perf_counter()
    run_parallel(_xor_words, words[0], words[1], words[2], nchunk)
    dt = time.perf_counter() - t0
    for a in arrays:
        release(a, 0, a.shape[0])
    return dt


def pread_pass(ranges: list[tuple[Path, int, int]], nchunk: int) -> float:
    """Seconds to pread the byte ranges ``(file, offset, nbytes)`` in parallel chunks.

    Raises:
        OSError: a range runs past its file's end.
    """
    fds = [os.open(p, os.O_RDONLY) for p, _, _ in ranges]
    try:
        fd_arr = np.array(fds, np.int64)
        offs = np.array([off for _, off, _ in ranges], np.int64)
        sizes = np.array([nb for _, _, nb in ranges], np.int64)
        t0 = time.perf_counter()
        bad = run_parallel(_pread_chunks, fd_arr, offs, sizes, BUF_BYTES, nchunk)
        dt = time.perf_counter() - t0
        if bad < 0:
            raise OSError(f"short read in the bandwidth pass ({ranges})")
        return dt
    finally:
        for fd in fds:
            os.close(fd)


def warm() -> None:
    """Compile both kernels (JIT) so no pass pays for compilation."""
    a = np.zeros(64, np.uint64)
    a.flags.writeable = False  # the passes read read-only memmaps (a distinct numba type)
    _xor_words(a, a, a, 2)
    import tempfile

    with tempfile.NamedTemporaryFile() as f:
        f.write(b"\0" * 4096)
        f.flush()
        fd = os.open(f.name, os.O_RDONLY)
        try:
            one = np.ones(1, np.int64)
            _pread_chunks(one * fd, one * 0, one * 4096, 1024, 2)
        finally:
            os.close(fd)


def page_in(path: Path) -> None:
    """Put every file of a table directory in the page cache afresh, as the table's writing
    (or a server's cache fill) leaves it: dropped, then faulted in once through a private
    mapping advised for 2 MB pages (every page touched, the last too), so the page cache
    holds each file in 2 MB folios whatever path a scan then reads it by.

    Until session 20 the files were read with ``read()``, which leaves small folios (the
    read-ahead's) that a mapped scan faults in 64 kB at a time: 1-thread Hamming at 10^7
    took 6.5-6.7 ms in that state and 4.2-4.4 ms in this one (bench/HISTORY.md). "Warm":
    pages that stayed cached through other work can sit in small folios (session 17:
    20.1 ms Hamming, 91 ms cosine).
    """
    for f in sorted(p for p in path.iterdir() if p.is_file()):
        fd = os.open(f, os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)
        if not f.stat().st_size:
            continue
        view = np.memmap(f, np.uint8, mode="r")
        advise_huge(view)  # as the table's own scanned mappings are (store.knn.mapped)
        int(view[:: mmap.PAGESIZE].sum()) + int(view[-1])  # a byte a page, and the last
        del view  # unmapped
