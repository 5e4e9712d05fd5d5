"""Primitives the k-NN scan kernels share (private to :mod:`store.knn`).

LLVM intrinsics (``ctpop``, and libc ``pread`` / ``madvise`` declared by name so that
kernels calling them can be cached), the block sizes, the release of mapped rows
from the resident set, and the fixed-size top-k heap (root = worst kept; higher key
first, then lower row). Split from :mod:`store.knn._kernels` by what the cosine and
the Hamming kernels (:mod:`store.knn._hamming`) both use.
"""

from __future__ import annotations

from typing import Any

from llvmlite import ir
from numba import njit, types
from numba.extending import intrinsic

__all__ = [
    "BLOCK",
    "HBLOCK",
    "MADV_DONTNEED",
    "PAGE",
    "REGION_BYTES",
    "REGION_ROWS",
    "SBLOCK",
    "popcount64",
    "sys_madvise",
    "sys_pread",
]

BLOCK = 32
"""Rows per block: small enough for the block buffer to stay in L1."""

HBLOCK = 256
"""Rows per block of the Hamming scans (a 1 kB int32 distance buffer, in L1)."""

SBLOCK = 64
"""Rows per block of the word-major Hamming scan: a block whose first words pass reads its
second words in one vectorised pass, so smaller blocks read fewer second words."""

_FASTMATH = {"reassoc", "contract"}
# Only reassociation (so float reductions vectorise) and FMA contraction: no
# "nnan"/"ninf", because the kernels compare against -inf sentinels.


@intrinsic
def popcount64(typingctx, x):  # type: ignore[no-untyped-def]
    """LLVM ``ctpop`` on a uint64 (vectorises to VPOPCNTQ where available)."""
    sig = types.uint64(types.uint64)

    def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
        fn = builder.module.declare_intrinsic("llvm.ctpop", [ir.IntType(64)])
        return builder.call(fn, [args[0]])

    return sig, codegen


_popcnt: Any = popcount64  # untyped alias for mypy; numba resolves it to the intrinsic


@intrinsic
def sys_pread(typingctx, fd, ptr, count, offset):  # type: ignore[no-untyped-def]
    """libc ``pread(fd, (void *) ptr, count, offset)``; returns bytes read or -1.

    Declared by name in the generated code (resolved from the process's libc when
    the code is loaded), so kernels calling it can be cached, unlike a ctypes
    function pointer. The GIL is never held: kernels call it from any thread.
    """
    sig = types.int64(types.int64, types.uintp, types.int64, types.int64)

    def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
        i64, i32, i8p = ir.IntType(64), ir.IntType(32), ir.IntType(8).as_pointer()
        fn = builder.module.globals.get("pread")
        if fn is None:
            fn = ir.Function(builder.module, ir.FunctionType(i64, [i32, i8p, i64, i64]), "pread")
        return builder.call(
            fn, [builder.trunc(args[0], i32), builder.inttoptr(args[1], i8p), args[2], args[3]]
        )

    return sig, codegen


_pread: Any = sys_pread


@intrinsic
def sys_madvise(typingctx, ptr, length, advice):  # type: ignore[no-untyped-def]
    """libc ``madvise((void *) ptr, length, advice)``; returns 0 or -1 (declared by name, cacheable)."""
    sig = types.int64(types.uintp, types.int64, types.int64)

    def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
        i64, i32, i8p = ir.IntType(64), ir.IntType(32), ir.IntType(8).as_pointer()
        fn = builder.module.globals.get("madvise")
        if fn is None:
            fn = ir.Function(builder.module, ir.FunctionType(i32, [i8p, i64, i32]), "madvise")
        r = builder.call(fn, [builder.inttoptr(args[0], i8p), args[1], builder.trunc(args[2], i32)])
        return builder.sext(r, i64)

    return sig, codegen


_madvise: Any = sys_madvise
MADV_DONTNEED = 4
"""Linux ``MADV_DONTNEED``: drop a range's pages from this process (they stay in the page cache)."""
PAGE = 4096
"""Page size the release ranges are aligned to (x86-64 / arm64 base pages)."""
REGION_ROWS = 1 << 16
"""Rows a mapped scan reads before releasing them (4 MB of 64-byte heads): releasing much
smaller ranges costs more in madvise calls and refaults at region edges."""
REGION_BYTES = 4 << 20
"""Bytes of one mapped array a scan reads before releasing them (see :data:`REGION_ROWS`)."""


HUGE = 2 << 20
"""Huge-page span (x86-64 PMD) the release ranges keep to: the page cache maps large folios of
a table's files with 2 MB entries, and releasing part of one splits it, each split a TLB
flush (an inter-processor interrupt, a VM exit on a virtual machine) while the other scan
thread runs. Releasing cost ~15 ms of a 45 ms pruned cosine scan at 10^7 rows (29.8 ms never
released); keeping to 2 MB spans won back about half of it in a probe (bench/HISTORY.md, session 19)."""


@njit(inline="always")
def _drop(arr, lo, hi, final):  # type: ignore[no-untyped-def]
    """Release rows lo..hi of a C-contiguous mapped array from the resident set.

    The range keeps to :data:`HUGE` boundaries of the address space, clamped to the
    array's own pages: its start is rounded down; its end rounded down while a scan
    goes on (the rest of that span goes with the next release, which starts where this
    one ended), up at its last release (``final``). So no 2 MB mapping is split, and
    releases of consecutive regions tile the range. A span shared with rows another
    thread reads is simply faulted in again (read-only file mapping); nothing outside
    the array's pages is touched.
    """
    if hi <= lo:
        return
    base = arr.ctypes.data
    stride = arr.strides[0]
    first = base // PAGE * PAGE
    last = (base + arr.shape[0] * stride + PAGE - 1) // PAGE * PAGE
    p0 = max(first, (base + lo * stride) // HUGE * HUGE)
    end = base + hi * stride
    p1 = min(last, (end + HUGE - 1) // HUGE * HUGE) if final else min(last, end // HUGE * HUGE)
    if p1 > p0:
        _madvise(p0, p1 - p0, MADV_DONTNEED)


@njit(inline="always")
def _read_full(fd, ptr, count, offset):  # type: ignore[no-untyped-def]
    """``pread`` until ``count`` bytes are in (short reads are legal); False at EOF or error."""
    done = 0
    while done < count:
        got = _pread(fd, ptr + done, count - done, offset + done)
        if got <= 0:
            return False
        done += got
    return True


# --------------------------------------------------------------------------- heap


@njit(inline="always")
def _worse(ka: float, ra: int, kb: float, rb: int) -> bool:
    """True when (ka, ra) ranks below (kb, rb): lower key, or equal key and higher row."""
    return ka < kb or (ka == kb and ra > rb)


@njit(inline="always")
def _heap_offer(keys, rows, size: int, k: int, key: float, row: int) -> int:  # type: ignore[no-untyped-def]
    """Offer (key, row) to a min-heap of capacity k; returns the new size."""
    if size < k:
        i = size
        keys[i] = key
        rows[i] = row
        while i > 0:
            p = (i - 1) >> 1
            if _worse(keys[i], rows[i], keys[p], rows[p]):
                keys[i], keys[p] = keys[p], keys[i]
                rows[i], rows[p] = rows[p], rows[i]
                i = p
            else:
                break
        return size + 1
    if not _worse(keys[0], rows[0], key, row):
        return size
    keys[0] = key
    rows[0] = row
    i = 0
    while True:
        c = 2 * i + 1
        if c >= size:
            break
        if c + 1 < size and _worse(keys[c + 1], rows[c + 1], keys[c], rows[c]):
            c += 1
        if _worse(keys[c], rows[c], keys[i], rows[i]):
            keys[i], keys[c] = keys[c], keys[i]
            rows[i], rows[c] = rows[c], rows[i]
            i = c
        else:
            break
    return size
