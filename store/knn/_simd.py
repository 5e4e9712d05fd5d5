"""Explicit SIMD blocks for the k-NN kernels (private to :mod:`store.knn`).

:func:`dot16x64`: the exact int32 dot products of one *block* of 16 Tessera heads (64
int8 dimensions each) with one int8 query, written as 16 float64s (exact). The heads are
stored blocked (:func:`store.knn.codes.head_blocks`): a block holds 16 rows as 16 groups
of 64 bytes, group ``g`` holding dimensions ``4g .. 4g + 3`` of rows 0..15 (4 bytes a
row), each byte the value plus 128 (unsigned). Written as LLVM IR because numba's loop
over one row compiles to a chain of multiply-adds and a horizontal sum per row.

With AVX-512 VNNI (``vpdpbusd``: unsigned x signed bytes, four products summed into each
int32 lane, no saturation) a group is one load and one ``vpdpbusd`` against the query's
4 bytes of that group broadcast to every lane: lane ``r`` accumulates row ``r``, so a
block of 16 rows is 16 loads and 16 multiply-adds and no horizontal sum (the row-major
form of sessions 13-20 needed an XOR per row and a 15-add shuffle tree per block: a
thread of the pruned cosine scan took 40.6 ms at 10^7 rows in memory with it, 29.6 ms
with this; bench/HISTORY.md, session 21). ``(v + 128) . q = v . q + 128 sum(q)``, so
every lane starts from ``-128 sum(q)``. Every intermediate is an exact int32 (|sum| <= 64
x 255 x 128 + 128 x 128 x 64 < 2^31), so the result equals the integer dot product.
Four accumulators split the 16 multiply-adds so they do not wait on each other.

Each block also prefetches the rows :data:`PREFETCH_BYTES` ahead.

Without VNNI (decided when the kernel is compiled, from the target's features: numba's
cache is keyed by CPU) the same block is generic vector IR: bytes widened to int32,
multiplied, each row's four lanes of a group added.
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
    block_p = builder.inttoptr(args[0], _V64B.as_pointer())
    qw = builder.load(builder.inttoptr(args[1], _V16.as_pointer()), align=1)  # 16 groups of q
    corr = builder.insert_element(
        ir.Constant(_V16, [ir.Constant(_I32, 0)] * 16), args[2], ir.Constant(_I32, 0)
    )
    zero = ir.Constant(_V16, [ir.Constant(_I32, 0)] * 16)
    accs = [builder.shuffle_vector(corr, corr, _mask([0] * 16)), zero, zero, zero]
    if vnni:
        fn = builder.module.globals.get(_VPDPBUSD)
        if fn is None:
            fn = ir.Function(builder.module, ir.FunctionType(_V16, [_V16, _V16, _V16]), _VPDPBUSD)
        for g in range(16):
            v = builder.load(builder.gep(block_p, [ir.Constant(_I32, g)]), align=1)
            qg = builder.shuffle_vector(qw, qw, _mask([g] * 16))
            accs[g % 4] = builder.call(fn, [accs[g % 4], builder.bitcast(v, _V16), qg])
    else:
        qb = builder.bitcast(qw, _V64B)
        for g in range(16):
            v = builder.load(builder.gep(block_p, [ir.Constant(_I32, g)]), align=1)
            # q's bytes 4g..4g+3, repeated for the 16 rows of the group
            qg = builder.sext(
                builder.shuffle_vector(qb, qb, _mask([4 * g + j % 4 for j in range(64)])), _V64
            )
            p = builder.mul(builder.zext(v, _V64), qg)
            lanes = [
                builder.shuffle_vector(p, p, _mask([4 * r + j for r in range(16)]))
                for j in range(4)
            ]
            row = builder.add(builder.add(lanes[0], lanes[1]), builder.add(lanes[2], lanes[3]))
            accs[g % 4] = builder.add(accs[g % 4], row)
    total = builder.add(builder.add(accs[0], accs[1]), builder.add(accs[2], accs[3]))
    v16d = ir.VectorType(ir.DoubleType(), 16)
    base = builder.bitcast(block_p, _I8.as_pointer())
    for line in range(16):
        _prefetch_line(builder, builder.gep(base, [ir.Constant(_I32, PREFETCH_BYTES + 64 * line)]))
    out_p = builder.inttoptr(args[3], v16d.as_pointer())
    builder.store(builder.sitofp(total, v16d), out_p, align=1)


def _sig() -> Any:
    return types.void(types.uintp, types.uintp, types.int32, types.uintp)


@intrinsic
def dot16x64(typingctx, rows_ptr, q_ptr, corr, out_ptr):  # type: ignore[no-untyped-def]
    """``out[r] = row r . q`` for one block of 16 heads at ``rows_ptr`` (1,024 bytes, the
    blocked layout above), ``q_ptr`` the query's 64 int8.

    The int32 dot products are written as 16 float64 (exact) at ``out_ptr``.
    ``corr`` must be ``-128 * sum(q)``. Pointers are raw addresses
    (``arr.ctypes.data``); nothing needs to be aligned.
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
