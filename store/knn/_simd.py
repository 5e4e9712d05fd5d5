"""Explicit SIMD blocks for the k-NN kernels (private to :mod:`store.knn`).

:func:`dot16x64`: the exact int32 dot products of 16 consecutive 64-byte int8 rows (a
Tessera row's head) with one int8 query, written as 16 float64s (exact). Written as LLVM IR
because numba's loop over one row (sign-extend to int16, multiply-add, reduce)
compiles to a chain of 128-bit multiply-adds and a horizontal sum per row, ~13 ns a
row where the pruned cosine scan needs ~2 (bench/HISTORY.md, session 13).

With AVX-512 VNNI (``vpdpbusd``: unsigned x signed bytes, four products summed into
each int32 lane, no saturation) a row is one load, one XOR and one ``vpdpbusd``:
``(v + 128) . q = v . q + 128 sum(q)``, the row's bytes made unsigned by flipping
their sign bit, and ``-128 sum(q)`` put into the accumulator's first lane
beforehand. The 16 accumulators (16 lanes each) are summed lane-wise into one
vector by a tree of shuffles and adds (15 adds for 16 rows instead of four
shuffle-add steps per row). Every intermediate is an exact int32 (|sum| <= 64 x 255
x 128 + 128 x 128 x 64 < 2^31), so the result equals the integer dot product.

Each block also prefetches the rows :data:`PREFETCH_BYTES` ahead.

Without VNNI (decided when the kernel is compiled, from the target's features:
numba's cache is keyed by CPU) the same block is generic vector IR: bytes
sign-extended to int32, multiplied, folded to 16 lanes, then the same tree.
"""

from __future__ import annotations

from typing import Any

from llvmlite import ir
from numba import types
from numba.extending import intrinsic

__all__ = ["PREFETCH_BYTES", "dot16x64", "dot16x64_generic", "has_vnni512", "prefetch"]

_I8 = ir.IntType(8)
_I32 = ir.IntType(32)
_V16 = ir.VectorType(_I32, 16)
_V64B = ir.VectorType(_I8, 64)
_V64 = ir.VectorType(_I32, 64)
_VPDPBUSD = "llvm.x86.avx512.vpdpbusd.512"
_PREFETCH = "llvm.prefetch.p0"

PREFETCH_BYTES = 4096
"""How far ahead of a block its rows are prefetched (4 blocks of 16 rows).

A scan of a fresh mapping faults in ranges of pages and then reads them in
order; the hardware prefetchers stop at each 4 kB page, so without a software
prefetch every page starts with a miss. Measured at 10^7 rows (bench/HISTORY.md,
session 13): the pruned scan 0.81 of its CPU without (2 threads, 20 paired
rounds); 2 kB ahead gave the same. A prefetch never faults, so prefetching past
the array's end or into an unmapped page is harmless."""


def has_vnni512(features: str) -> bool:
    """True when an LLVM target feature string has AVX-512 VNNI (and BW) enabled."""
    return "+avx512vnni" in features and "+avx512bw" in features


def _mask(lanes: list[int]) -> ir.Constant:
    return ir.Constant(ir.VectorType(_I32, len(lanes)), [ir.Constant(_I32, x) for x in lanes])


def _tree_sum(builder: ir.IRBuilder, accs: list[Any]) -> Any:
    """16 vectors of 16 int32 lanes -> one vector whose lane ``r`` is the lane sum of ``accs[r]``.

    Each level pairs vectors and halves the lane groups: lanes that held partial
    sums of one row are added pairwise, the two inputs' groups interleaved. The
    row each lane ends up holding is tracked here, and a final shuffle puts row
    ``r`` in lane ``r``.
    """
    items = [(a, [r] * 16) for r, a in enumerate(accs)]
    width = 8
    while len(items) > 1:
        nxt = []
        for (a, la), (b, lb) in zip(items[0::2], items[1::2], strict=True):
            lo: list[int] = []
            hi: list[int] = []
            for g in range(0, 16, 2 * width):
                lo += [*range(g, g + width), *range(16 + g, 16 + g + width)]
                hi += [*range(g + width, g + 2 * width), *range(16 + g + width, 16 + g + 2 * width)]
            s = builder.add(
                builder.shuffle_vector(a, b, _mask(lo)), builder.shuffle_vector(a, b, _mask(hi))
            )
            both = la + lb
            nxt.append((s, [both[x] for x in lo]))
        items = nxt
        width //= 2
    v, lay = items[0]
    return builder.shuffle_vector(v, v, _mask([lay.index(r) for r in range(16)]))


def _prefetch_line(builder: ir.IRBuilder, ptr: Any) -> None:
    """``llvm.prefetch`` of the cache line at ``ptr``: read, high locality, data cache."""
    pf = builder.module.globals.get(_PREFETCH)
    if pf is None:
        pf = ir.Function(
            builder.module,
            ir.FunctionType(ir.VoidType(), [_I8.as_pointer(), _I32, _I32, _I32]),
            _PREFETCH,
        )
    builder.call(pf, [ptr, ir.Constant(_I32, 0), ir.Constant(_I32, 3), ir.Constant(_I32, 1)])


def _dot_block(builder: ir.IRBuilder, args: Any, vnni: bool) -> None:
    rows_p = builder.inttoptr(args[0], _V64B.as_pointer())
    q = builder.load(builder.inttoptr(args[1], _V64B.as_pointer()), align=1)
    accs = []
    if vnni:
        fn = builder.module.globals.get(_VPDPBUSD)
        if fn is None:
            fn = ir.Function(builder.module, ir.FunctionType(_V16, [_V16, _V16, _V16]), _VPDPBUSD)
        qw = builder.bitcast(q, _V16)
        flip = builder.bitcast(ir.Constant(_V64B, [ir.Constant(_I8, 0x80)] * 64), _V16)
        # -128 sum(q) in lane 0: the tree adds it to the row's sum
        corr = builder.insert_element(
            ir.Constant(_V16, [ir.Constant(_I32, 0)] * 16), args[2], ir.Constant(_I32, 0)
        )
        for r in range(16):
            v = builder.load(builder.gep(rows_p, [ir.Constant(_I32, r)]), align=1)
            u = builder.xor(builder.bitcast(v, _V16), flip)
            accs.append(builder.call(fn, [corr, u, qw]))
    else:
        qx = builder.sext(q, _V64)
        for r in range(16):
            v = builder.load(builder.gep(rows_p, [ir.Constant(_I32, r)]), align=1)
            p = builder.mul(builder.sext(v, _V64), qx)
            quarters = [
                builder.shuffle_vector(p, p, _mask(list(range(i, i + 16)))) for i in (0, 16, 32, 48)
            ]
            accs.append(
                builder.add(
                    builder.add(quarters[0], quarters[1]), builder.add(quarters[2], quarters[3])
                )
            )
    v16d = ir.VectorType(ir.DoubleType(), 16)
    base = builder.bitcast(rows_p, _I8.as_pointer())
    for line in range(16):
        _prefetch_line(builder, builder.gep(base, [ir.Constant(_I32, PREFETCH_BYTES + 64 * line)]))
    out_p = builder.inttoptr(args[3], v16d.as_pointer())
    builder.store(builder.sitofp(_tree_sum(builder, accs), v16d), out_p, align=1)


def _sig() -> Any:
    return types.void(types.uintp, types.uintp, types.int32, types.uintp)


@intrinsic
def dot16x64(typingctx, rows_ptr, q_ptr, corr, out_ptr):  # type: ignore[no-untyped-def]
    """``out[r] = rows[r] . q`` for 16 rows of 64 int8 at ``rows_ptr``, ``q_ptr`` 64 int8.

    The int32 dot products are written as 16 float64 (exact) at ``out_ptr``.

    ``corr`` must be ``-128 * sum(q)`` (used by the VNNI form). Pointers are raw
    addresses (``arr.ctypes.data``); nothing is aligned.
    """

    def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
        _dot_block(builder, args, has_vnni512(getattr(context.codegen(), "_tm_features", "")))
        return context.get_dummy_value()

    return _sig(), codegen


@intrinsic
def dot16x64_generic(typingctx, rows_ptr, q_ptr, corr, out_ptr):  # type: ignore[no-untyped-def]
    """:func:`dot16x64` always in its generic (non-VNNI) form: for tests on VNNI machines."""

    def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
        _dot_block(builder, args, False)
        return context.get_dummy_value()

    return _sig(), codegen


@intrinsic
def prefetch(typingctx, addr):  # type: ignore[no-untyped-def]
    """Prefetch the cache line at the raw address ``addr`` for reading (never faults)."""

    def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
        _prefetch_line(builder, builder.inttoptr(args[0], _I8.as_pointer()))
        return context.get_dummy_value()

    return types.void(types.uintp), codegen
