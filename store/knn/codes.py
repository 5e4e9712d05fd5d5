"""Derived per-row data of a table: sign codes of the rotated rows, int8 norms, row heads.

* :func:`binarize`: sign bits of the row rotated by a fixed, seeded orthogonal
  matrix (:func:`rotation`), packed; the ``hamming`` modes compare these.
* :func:`int8_norms`: exact L2 norm of each int8 row (the cosine denominator).
* :func:`head_layout`: the row at its highest-variance dimensions plus the norm
  of the rest rounded up, which bounds a row's dot product for the pruned scan;
  the heads are stored in blocks of 16 rows (:func:`head_blocks`) as the scan's
  SIMD block reads them.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any

import numpy as np
import numpy.typing as npt

from store.errors import InvalidVectorQuery

__all__ = [
    "BIN_BYTES",
    "HEAD_BLOCKS_KEY",
    "HEAD_BLOCK_ROWS",
    "HEAD_MIN_D",
    "ROTATION_SEED",
    "binarize",
    "blocked_heads",
    "head_blocks",
    "head_blocks_shape",
    "head_dims",
    "head_layout",
    "head_values",
    "int8_norms",
    "legacy_heads",
    "rotation",
]

ROTATION_SEED = 0x7E55E4A
"""Seed of the fixed orthogonal rotation applied before taking sign bits."""

BIN_BYTES = 16
"""Bytes per binary code (128 sign bits)."""

_WRITE_CHUNK = 1 << 18  # rows per chunk when deriving norms / codes (bounds float temporaries)


HEAD_BLOCK_ROWS = 16
"""Rows per block of the stored heads (:func:`head_blocks`)."""
HEAD_BLOCKS_KEY = "head_block_dims"
"""``meta.json`` key of a table whose heads are stored in blocks (:func:`head_blocks`) in
``head_blocks.npy``: the head dimensions H. Tables written before session 21 stored them
row-major int8 in ``head.npy`` under ``head_dims``: this code opens those without heads
(unpruned, the same answers) until :func:`store.knn.write.upgrade_table` rewrites them, and
code of before session 21 opens tables of this layout the same way (it knows neither the
key nor the file)."""
HEAD_MIN_D = 64
"""Tables with at least this many dimensions get heads (see :func:`head_layout`)."""


@functools.cache
def _rotation_cached(d: int, seed: int) -> npt.NDArray[np.float64]:
    g = np.random.default_rng(seed).standard_normal((d, d))
    q, r = np.linalg.qr(g)
    q = q * np.where(np.diag(r) < 0, -1.0, 1.0)[None, :]
    q.setflags(write=False)
    return q


def rotation(d: int = 128, seed: int = ROTATION_SEED) -> npt.NDArray[np.float64]:
    """The fixed orthogonal matrix used before binarising.

    QR of a seeded standard normal ``d x d`` matrix (numpy ``default_rng``), with
    the columns' signs corrected so that R has a positive diagonal (this makes
    the matrix unique, i.e. Haar-distributed, and reproducible).

    Args:
        d: Dimension.
        seed: ``default_rng`` seed.

    Returns:
        Read-only float64 ``(d, d)`` orthogonal matrix.
    """
    return _rotation_cached(int(d), int(seed))


def binarize(vectors: npt.ArrayLike, seed: int = ROTATION_SEED) -> npt.NDArray[np.uint8]:
    """Sign bits of the rotated vectors, packed (``np.packbits``, big bit order).

    The per-cell Tessera scale is positive, so the signs of ``int8 @ R.T`` are
    the signs of the dequantised vector's rotation: codes come from the int8
    rows directly. Worked in row chunks (float64 temporaries stay small).

    Args:
        vectors: ``(N, D)`` int8 (or float) rows, D a multiple of 8; or one ``(D,)`` vector.
        seed: rotation seed.

    Returns:
        ``(N, D // 8)`` uint8 codes (``(D // 8,)`` for a single vector).
    """
    v = np.asarray(vectors)
    single = v.ndim == 1
    v2 = v[None, :] if single else v
    if v2.ndim != 2 or v2.shape[1] % 8:
        raise InvalidVectorQuery(f"cannot binarize shape {v.shape}: need (N, D) with D % 8 == 0")
    d = v2.shape[1]
    rt = rotation(d, seed).T
    out = np.empty((v2.shape[0], d // 8), np.uint8)
    for a in range(0, v2.shape[0], _WRITE_CHUNK):
        block = np.asarray(v2[a : a + _WRITE_CHUNK], dtype=np.float64)
        out[a : a + _WRITE_CHUNK] = np.packbits(block @ rt > 0, axis=1)
    return out[0] if single else out


def int8_norms(vectors: npt.ArrayLike) -> npt.NDArray[np.float32]:
    """L2 norm of each int8 row (exact integer sum of squares, then sqrt)."""
    v = np.asarray(vectors)
    out = np.empty(v.shape[0], np.float32)
    for a in range(0, v.shape[0], _WRITE_CHUNK):
        block = v[a : a + _WRITE_CHUNK].astype(np.int32)
        out[a : a + _WRITE_CHUNK] = np.sqrt(np.einsum("ij,ij->i", block, block).astype(np.float64))
    return out


def head_dims(d: int) -> int:
    """Dimensions kept in a row's head: half of D in multiples of 16 (64 for D = 128).

    A longer head leaves less energy in the tail, so the bound prunes more rows;
    half of D keeps the heads at half the table's bytes, and 64 dimensions make a
    head exactly one 64-byte cache line.
    """
    return max(16, (d // 2) // 16 * 16)


def blocked_heads(meta: Mapping[str, Any]) -> int:
    """Head dimensions H of a table whose ``meta.json`` says its heads are stored in blocks
    (:data:`HEAD_BLOCKS_KEY`), else 0.

    A ``head_dims`` key wins: this code never writes it, so a table carrying both was
    rewritten by older code (its ``upgrade_table`` keeps keys it does not know), and its
    heads are the row-major ``head.npy``.
    """
    h = meta.get(HEAD_BLOCKS_KEY)
    if "head_dims" in meta or isinstance(h, bool) or not isinstance(h, int):
        return 0
    return max(h, 0)


def legacy_heads(meta: Mapping[str, Any]) -> bool:
    """The table stores row-major heads of before the block layout (not read: see
    :data:`HEAD_BLOCKS_KEY`)."""
    return bool(meta.get("head_dims"))  # it wins over the block key (blocked_heads)


def head_blocks_shape(n: int, h: int) -> tuple[int, int]:
    """Shape of the stored heads of ``n`` rows of ``h`` head dimensions (:func:`head_blocks`)."""
    return -(-n // HEAD_BLOCK_ROWS), HEAD_BLOCK_ROWS * h


def head_blocks(heads: npt.ArrayLike) -> npt.NDArray[np.uint8]:
    """Row heads ``(N, H)`` int8 in the stored block layout: ``(ceil(N / 16), 16 H)`` uint8.

    Block ``b`` holds rows ``16 b .. 16 b + 15`` as ``H / 4`` groups of 64 bytes: group
    ``g`` is dimensions ``4 g .. 4 g + 3`` of the 16 rows in row order, 4 bytes a row;
    each byte is the value plus 128 (so it reads as unsigned). A vector multiply-add
    over one group then gives all 16 rows' partial dot products at once, one row per
    lane (:func:`store.knn._simd.dot16x64`). Rows past N in the last block are zeros
    (bytes 128).

    Raises:
        ValueError: not int8 ``(N, H)`` with ``H`` a multiple of 4 (:func:`head_dims`
            gives multiples of 16).
    """
    v = np.asarray(heads)
    n, h = v.shape
    if v.dtype != np.int8 or h % 4:
        raise ValueError(
            f"heads must be int8 (N, H) with H a multiple of 4, got {v.dtype} {v.shape}"
        )
    nb = head_blocks_shape(n, h)[0]
    out = np.full(head_blocks_shape(n, h), 128, np.uint8)
    step = _WRITE_CHUNK // HEAD_BLOCK_ROWS
    for b in range(0, nb, step):
        rows = v[b * HEAD_BLOCK_ROWS : (b + step) * HEAD_BLOCK_ROWS]
        m = -(-rows.shape[0] // HEAD_BLOCK_ROWS)
        pad = np.zeros((m * HEAD_BLOCK_ROWS, h), np.int8)
        pad[: rows.shape[0]] = rows
        u = pad.view(np.uint8) ^ np.uint8(0x80)
        blocks = u.reshape(m, HEAD_BLOCK_ROWS, h // 4, 4).transpose(0, 2, 1, 3)
        out[b : b + m] = blocks.reshape(m, HEAD_BLOCK_ROWS * h)
    return out


def head_values(blocks: npt.ArrayLike, rows: npt.ArrayLike, h: int) -> npt.NDArray[np.int8]:
    """The int8 heads ``(len(rows), H)`` of some rows, read back from :func:`head_blocks`."""
    b = np.asarray(blocks)
    r = np.asarray(rows, np.int64)
    grouped = b[r // HEAD_BLOCK_ROWS].reshape(r.size, h // 4, HEAD_BLOCK_ROWS, 4)
    mine = grouped[np.arange(r.size), :, r % HEAD_BLOCK_ROWS, :]  # (len(rows), H / 4, 4)
    return (mine.reshape(r.size, h) ^ np.uint8(0x80)).view(np.int8)


def head_layout(
    vectors: npt.ArrayLike,
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.uint8], npt.NDArray[np.float32]]:
    """Heads for pruned exact cosine scans.

    The head dimensions are the :func:`head_dims` dimensions of largest
    variance over the table (ascending indices); a row's head is its values
    there, its tail norm the L2 norm of its other values, rounded up to the next
    float32 (a safe Cauchy-Schwarz bound; see :func:`store.knn._kernels.cosine_scan_pruned`).

    Returns:
        ``(head_index (H,), heads (ceil(N / 16), 16 H) uint8 in blocks (:func:`head_blocks`),
        tail_norms (N,) float32)``.
    """
    v = np.asarray(vectors)
    n, d = v.shape
    s1 = np.zeros(d)
    s2 = np.zeros(d)
    for a in range(0, n, _WRITE_CHUNK):
        block = v[a : a + _WRITE_CHUNK].astype(np.float64)
        s1 += block.sum(axis=0)
        s2 += (block * block).sum(axis=0)
    var = s2 / max(n, 1) - (s1 / max(n, 1)) ** 2
    head = np.sort(np.argsort(-var, kind="stable")[: head_dims(d)]).astype(np.int64)
    tail = np.setdiff1d(np.arange(d), head)
    heads = np.empty(head_blocks_shape(n, head.size), np.uint8)
    tnorm = np.empty(n, np.float32)
    for a in range(0, n, _WRITE_CHUNK):  # a chunk starts on a block (_WRITE_CHUNK % 16 == 0)
        block = v[a : a + _WRITE_CHUNK]
        mine = head_blocks(block[:, head])
        heads[a // HEAD_BLOCK_ROWS : a // HEAD_BLOCK_ROWS + mine.shape[0]] = mine
        t = block[:, tail].astype(np.int32)
        exact = np.sqrt(np.einsum("ij,ij->i", t, t).astype(np.float64))
        tnorm[a : a + _WRITE_CHUNK] = np.nextafter(exact.astype(np.float32), np.float32(np.inf))
    return head, heads, tnorm
