"""k-NN vector tables (one directory per band vintage, memory-mapped) and their scans.

Layout of a table directory (all arrays ``.npy``, C-contiguous, little-endian)::

    cells.npy    uint64 (N,)     raw cell64 ids, strictly ascending
    vectors.npy  int8   (N, D)   Tessera int8 embedding (D=128; 256 for a two-vintage concat, ...)
    scales.npy   float32 (N,)    per-cell Tessera dequantisation scale (value = int8 * scale)
    norms.npy    float32 (N,)    L2 norm of the int8 row
    bin128.npy   uint8  (N, 16)  sign bits of the rotated vector (only when D == 128)
    bin128w.npy  uint64 (2, N)   the same codes word-major (plane j = word j of every row)
    head.npy     int8   (N, H)   the row at its H highest-variance dimensions (H = D / 2)
    tailnorm.npy float32 (N,)    L2 norm of the row's other dimensions, rounded up
    meta.json                    band, tslot, vintage, N, D, rotation_seed, digest,
                                 head_dims, head_index, rerank_multiple, ...

Tables written before heads and planes existed open and scan unpruned;
:func:`upgrade_table` rewrites them with the current layout.

Writes are atomic: :func:`write_table` fills a hidden versioned directory and
then swaps a symlink (``<name> -> .<name>@<digest>``) with one ``rename``, so a
reader resolving the name sees either the old or the new table, never a mix.
:meth:`KnnTable.open` resolves the link once and memory-maps every array
(``np.load(mmap_mode="r")``): opening a 10^7-row table reads only headers.

Scoring (see :mod:`store._kernels` for the scan loops):

* ``cosine``: exact. The stored value is ``int8 * scale`` with ``scale > 0`` per
  cell, so cos(a*s, b*t) = cos(a, b): the int8 dot product (int32 accumulate)
  divided by the int8 norms is the cosine of the dequantised vectors. Tables of
  at least :data:`PRUNE_MIN_ROWS` rows are scanned pruned: heads first, a
  Cauchy-Schwarz bound per row, whole rows only where the bound reaches the
  current k-th best (:func:`store._kernels.cosine_scan_pruned`; same answer). An inline
  float query that is an exact multiple of an int8 vector (what a dequantised
  Tessera pixel is) is scanned on the int8 path; any other float query runs a
  float32-accumulate path against the int8 rows (exact up to float32 rounding).
  Quantising an arbitrary float query to int8 would move it by up to half a
  quantisation step per coordinate, which changes rankings, so it is never done.
* ``hamming``: popcount over 128 sign bits of the vector rotated by a fixed,
  seeded orthogonal matrix; score = 1 - 2 * distance / 128.
* ``hamming_then_rerank``: ``multiple * k`` Hamming candidates, then exact
  cosine over the candidates only.
"""

from __future__ import annotations

import contextlib
import functools
import json
import math
import mmap
import os
import shutil
import tempfile
import threading
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import blake3
import numba
import numpy as np
import numpy.typing as npt

from store import _kernels
from store.errors import InvalidVectorQuery, VectorTableError

__all__ = [
    "BIN_BYTES",
    "CALIBRATION_MULTIPLES",
    "DEFAULT_RERANK_MULTIPLE",
    "FORMAT",
    "K_MAX",
    "MODES",
    "ROTATION_SEED",
    "KnnResult",
    "KnnTable",
    "Mode",
    "binarize",
    "calibrate_rerank_multiple",
    "cosine_topk",
    "hamming_then_rerank",
    "hamming_topk",
    "head_dims",
    "head_layout",
    "int8_norms",
    "rotation",
    "upgrade_table",
    "write_table",
]

FORMAT = "earthmem.knn/1"
"""Format tag written into ``meta.json``."""

ROTATION_SEED = 0x7E55E4A
"""Seed of the fixed orthogonal rotation applied before taking sign bits."""

BIN_BYTES = 16
"""Bytes per binary code (128 sign bits)."""

DEFAULT_RERANK_MULTIPLE = 32
"""Hamming candidates per requested neighbour when a table stores no calibrated multiple.

Recall@10 of the rerank against exact cosine on bench/data.py clustered data
(50 queries) for multiples 4 / 8 / 16 / 32 / 64 / 128: at 10^5 rows
0.64 / 0.76 / 0.91 / 0.97 / 0.99 / 0.99; at 10^6 rows 0.44 / 0.62 / 0.76 / 0.87 /
0.93 / 0.98. The multiple needed grows with the number of near-duplicates of the
query (128 sign bits resolve angles only so finely), so :func:`write_table`
calibrates it per table and stores ``meta["rerank_multiple"]``; 32 is the smallest
multiple that reaches 0.95 at demo-sample sizes (<= 10^5 rows).
"""

K_MAX = 1000
"""Largest ``k`` a scan accepts."""

Mode = Literal["cosine", "hamming", "hamming_then_rerank"]
MODES: tuple[str, ...] = ("cosine", "hamming", "hamming_then_rerank")

_CHUNK_ROWS = 1 << 16  # rows per scan chunk (chunks are scheduled dynamically on the threads)
_SERIAL_BYTES = 8 << 20  # scans smaller than this run on the calling thread (no barrier wait)
_MAX_CANDIDATES = 1 << 17  # cap on hamming_then_rerank candidates (multiple * k)
_SPARSE_MASK = 0.25  # below this mask density, gather the eligible rows instead of scanning all
_INT8_TOL = 2e-5  # in quantisation steps: float32 rounding of int8 * scale stays far below
_WRITE_CHUNK = 1 << 18  # rows per chunk when deriving norms / codes (bounds float temporaries)
_ARRAYS = ("cells", "vectors", "scales", "norms")
FILE_SCAN_BYTES = 8 << 20
"""Tables with more bytes than this (per scanned array) are scanned in parallel chunks that never
leave the table resident (pread into small buffers, or the mapping released region by region)."""
PRUNE_MIN_ROWS = 1 << 19
"""Tables with at least this many rows are scanned pruned (heads first) when they have heads.

Below, the seed sample and the per-buffer bookkeeping cost more than the bytes
saved. bench/RESULTS.md lists the pruned scan beside the unpruned one
("cosine full scan, no pruning") at 10^6 and 10^7 rows.
"""
_SPLIT_MAX_KEEP = 64  # Hamming scans keeping fewer rows than this read the word-major planes
_SAMPLE_RUNS = 32
_SEED_RUN_ROWS = 256  # rows per run of the pruned cosine scan's seed sample (32 x 256 rows, 1 MB)
_GATHER_ROWS = 1 << 16  # a sparse mask with at most this many rows is gathered by pread


@contextlib.contextmanager
def _open_ro(path: Path) -> Any:
    """A read-only file descriptor for the kernels' pread, closed on exit."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError as e:
        raise VectorTableError(f"cannot open {path}: {e}") from e
    try:
        yield fd
    finally:
        os.close(fd)


def _file_mapped(*arrays: Any) -> bool:
    """True when every array is a view of a read-only file mapping (``np.load(mmap_mode="r")``).

    Only then may a scan drop the pages it read (``MADV_DONTNEED`` re-reads a file
    mapping from the page cache, but zero-fills anonymous memory).
    """
    for arr in arrays:
        base = arr
        while base is not None and not isinstance(base, np.memmap):
            base = getattr(base, "base", None)
        if (
            not isinstance(base, np.memmap)
            or base.mode != "r"
            or getattr(base, "_mmap", None) is None
        ):
            return False
    return True


def _data_offset(arr: Any) -> int:
    """Byte offset of a mapped ``.npy`` array's data in its file."""
    return int(getattr(arr, "offset", 0))


def _advise(arr: Any, advice: str) -> None:
    """``madvise`` a whole memory-mapped array (no-op where unsupported)."""
    mm = getattr(arr, "_mmap", None)
    flag = getattr(mmap, advice, None)
    if mm is not None and flag is not None:
        with contextlib.suppress(OSError, ValueError):
            mm.madvise(flag)


def _release(arr: Any, start_row: int, end_row: int) -> None:
    """Drop a memory-mapped array's rows ``[start_row, end_row)`` from this process's resident set.

    The pages stay in the page cache (other readers and the next scan reuse
    them); only this mapping lets go. A no-op for arrays that are not mapped.
    """
    mm = getattr(arr, "_mmap", None)
    if mm is None or not hasattr(mmap, "MADV_DONTNEED") or arr.shape[0] == 0:
        return
    row_bytes = int(np.prod(arr.shape[1:], dtype=np.int64)) * arr.itemsize
    base = int(getattr(arr, "offset", 0))
    page = mmap.PAGESIZE
    lo = (base + start_row * row_bytes) // page * page
    hi = min(len(mm), base + end_row * row_bytes)
    if hi > lo:
        with contextlib.suppress(OSError, ValueError):
            mm.madvise(mmap.MADV_DONTNEED, lo, hi - lo)


# --------------------------------------------------------------------------- results


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


# --------------------------------------------------------------------------- binary codes


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


HEAD_MIN_D = 64
"""Tables with at least this many dimensions get heads (see :func:`head_layout`)."""


def head_dims(d: int) -> int:
    """Dimensions kept in a row's head: half of D in multiples of 16 (64 for D = 128).

    On bench/data.py clustered data (10^6 rows, k = 10) the share of rows whose
    bound still reaches the final 10th-best cosine was 0.5 % / 0.09 % / 0.03 % for
    heads of 32 / 48 / 64 dimensions (dimensions ordered by variance); 64 also
    makes a head exactly one 64-byte cache line.
    """
    return max(16, (d // 2) // 16 * 16)


def head_layout(
    vectors: npt.ArrayLike,
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int8], npt.NDArray[np.float32]]:
    """Heads for pruned exact cosine scans.

    The head dimensions are the :func:`head_dims` dimensions of largest
    variance over the table (ascending indices); a row's head is its values
    there, its tail norm the L2 norm of its other values, rounded up to the next
    float32 (a safe Cauchy-Schwarz bound; see :func:`store._kernels.cosine_scan_pruned`).

    Returns:
        ``(head_index (H,), heads (N, H) int8, tail_norms (N,) float32)``.
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
    heads = np.empty((n, head.size), np.int8)
    tnorm = np.empty(n, np.float32)
    for a in range(0, n, _WRITE_CHUNK):
        block = v[a : a + _WRITE_CHUNK]
        heads[a : a + _WRITE_CHUNK] = block[:, head]
        t = block[:, tail].astype(np.int32)
        exact = np.sqrt(np.einsum("ij,ij->i", t, t).astype(np.float64))
        tnorm[a : a + _WRITE_CHUNK] = np.nextafter(exact.astype(np.float32), np.float32(np.inf))
    return head, heads, tnorm


# --------------------------------------------------------------------------- writing


def _digest(arrays: dict[str, np.ndarray]) -> str:
    h = blake3.blake3()
    for name in sorted(arrays):
        a = np.ascontiguousarray(arrays[name])
        h.update(f"{name}:{a.dtype.str}:{a.shape}".encode())
        flat = a.reshape(-1).view(np.uint8)
        step = 1 << 26
        for i in range(0, flat.size, step):
            h.update(flat[i : i + step].data)
    return h.hexdigest()


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_table(
    directory: str | os.PathLike[str],
    cells: npt.ArrayLike,
    vectors_int8: npt.ArrayLike,
    scales: npt.ArrayLike,
    meta: dict[str, Any],
    *,
    replace: bool = False,
    calibrate: bool = True,
) -> None:
    """Write one k-NN table atomically.

    The arrays are written into a hidden sibling ``.<name>@<digest>``; then the
    name ``directory`` is pointed at it by an atomic symlink rename. If a table
    already exists there: identical content is a no-op; different content
    raises unless ``replace=True``, in which case it is swapped atomically and
    the old version directory is removed (open memory maps stay valid).

    Args:
        directory: Table path (becomes a symlink to the version directory).
        cells: ``(N,)`` raw cell64 ids, unique (sorted here if needed).
        vectors_int8: ``(N, D)`` int8 embeddings.
        scales: ``(N,)`` positive per-cell dequantisation scales.
        meta: Caller metadata; must hold ``band`` and ``tslot`` (also e.g. ``vintage``).
        replace: Allow replacing a different existing table.
        calibrate: For tables with bin128 codes, measure the ``hamming_then_rerank``
            candidate multiple that keeps recall@10 >= 0.95 on this table
            (:func:`calibrate_rerank_multiple`, 50 queries) and store it in meta as
            ``rerank_multiple`` (with the recall per multiple), unless meta has one.

    Raises:
        VectorTableError: bad shapes/dtypes, duplicate cells, non-positive scales,
            or an existing different table without ``replace``.
    """
    path = Path(directory)
    c = np.asarray(cells)
    v = np.asarray(vectors_int8)
    s = np.asarray(scales)
    if c.ndim != 1 or not np.issubdtype(c.dtype, np.integer):
        raise VectorTableError(f"cells must be a 1-D integer array, got {c.dtype} {c.shape}")
    if v.dtype != np.int8 or v.ndim != 2 or v.shape[0] != c.shape[0] or v.shape[1] < 1:
        raise VectorTableError(
            f"vectors must be int8 (N, D) with N={c.shape[0]}, got {v.dtype} {v.shape}"
        )
    if s.shape != c.shape or not np.all(np.isfinite(s)) or (s.size and s.min() <= 0):
        raise VectorTableError("scales must be finite, positive, one per cell")
    for key in ("band", "tslot"):
        if key not in meta:
            raise VectorTableError(f"meta must contain {key!r}")
    c = c.astype(np.uint64, copy=False)
    if c.size > 1 and not np.all(c[1:] > c[:-1]):
        order = np.argsort(c, kind="stable")
        c, v, s = c[order], v[order], s[order]
        if np.any(c[1:] == c[:-1]):
            raise VectorTableError("cells contain duplicates")
    n, d = v.shape
    arrays: dict[str, np.ndarray] = {
        "cells": np.ascontiguousarray(c),
        "vectors": np.ascontiguousarray(v),
        "scales": np.ascontiguousarray(s, dtype=np.float32),
        "norms": int8_norms(v),
    }
    extra: dict[str, Any] = {}
    if d >= HEAD_MIN_D and n > 0:
        head_index, arrays["head"], arrays["tailnorm"] = head_layout(arrays["vectors"])
        extra["head_dims"] = int(head_index.size)
        extra["head_index"] = head_index.tolist()
    if d == BIN_BYTES * 8:
        arrays["bin128"] = binarize(v, ROTATION_SEED)
        # the same codes word-major: plane j holds word j of every row (scanned first-word first)
        arrays["bin128w"] = np.ascontiguousarray(arrays["bin128"].view("<u8").T)
        if calibrate and "rerank_multiple" not in meta and n > 1:
            chosen, recall = calibrate_rerank_multiple(
                arrays["vectors"], arrays["norms"], arrays["bin128"]
            )
            extra["rerank_multiple"] = chosen
            extra["rerank_recall_at_10"] = {str(m): r for m, r in recall.items()}
    digest = _digest(arrays)
    full_meta = {
        **meta,
        **extra,
        "format": FORMAT,
        "n": int(n),
        "d": int(d),
        "rotation_seed": ROTATION_SEED,
        "has_bin128": "bin128" in arrays,
        "has_bin128w": "bin128w" in arrays,
        "digest": digest,
        "created_by": meta.get("created_by", "earthmem.store.vectors"),
    }

    parent = path.parent
    parent.mkdir(parents=True, exist_ok=True)
    if path.exists() or path.is_symlink():
        if not path.is_symlink():
            raise VectorTableError(f"{path} exists and is not a table written by write_table")
        old_meta = _read_meta(path)
        if old_meta.get("digest") == digest and old_meta == full_meta:
            return
        if not replace:
            raise VectorTableError(f"{path} holds a different table (pass replace=True)")
    version = parent / f".{path.name}@{digest[:16]}-{uuid.uuid4().hex[:8]}"
    tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.tmp-", dir=parent))
    os.chmod(tmp, 0o755)  # mkdtemp makes it owner-only; tables are read by the server
    try:
        for name, arr in arrays.items():
            with open(tmp / f"{name}.npy", "wb") as f:
                np.save(f, arr)
                f.flush()
                os.fsync(f.fileno())
        with open(tmp / "meta.json", "w") as f:
            json.dump(full_meta, f, indent=2, sort_keys=True)
            f.flush()
            os.fsync(f.fileno())
        _fsync_dir(tmp)
        os.rename(tmp, version)
        old_target = Path(os.path.realpath(path)) if path.is_symlink() else None
        link_tmp = parent / f".{path.name}.link-{uuid.uuid4().hex[:8]}"
        os.symlink(version.name, link_tmp)
        os.replace(link_tmp, path)  # the atomic step
        _fsync_dir(parent)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    if old_target is not None and old_target.parent == parent and old_target != version:
        shutil.rmtree(old_target, ignore_errors=True)


_DERIVED_META = (
    "format",
    "n",
    "d",
    "rotation_seed",
    "has_bin128",
    "digest",
    "head_dims",
    "head_index",
)


def upgrade_table(directory: str | os.PathLike[str]) -> bool:
    """Rewrite a table written by an older version with the current layout (heads).

    The rows, cells, scales and caller metadata (including a stored calibration)
    are kept; the derived arrays are recomputed and the new version is swapped in
    atomically, as :func:`write_table` does. Readers holding the old version keep
    reading it.

    Returns:
        True when the table was rewritten, False when it was current already.
    """
    t = KnnTable.open(directory)
    heads_ok = t.head is not None or t.d < HEAD_MIN_D
    planes_ok = t.bin128w is not None or t.d != BIN_BYTES * 8
    if (heads_ok and planes_ok) or t.n == 0:
        return False
    meta = {k: v for k, v in t.meta.items() if k not in _DERIVED_META}
    write_table(
        directory,
        np.array(t.cells),
        np.array(t.vectors),
        np.array(t.scales),
        meta,
        replace=True,
    )
    return True


def _read_meta(path: Path) -> dict[str, Any]:
    try:
        with open(path / "meta.json") as f:
            meta: dict[str, Any] = json.load(f)
    except (OSError, ValueError) as e:
        raise VectorTableError(f"cannot read {path / 'meta.json'}: {e}") from e
    return meta


# --------------------------------------------------------------------------- scans


def _nchunk(n: int) -> int:
    return max(1, min(-(-n // _CHUNK_ROWS), max(numba.get_num_threads(), 1) * 8))


def _merge(
    out: tuple[np.ndarray, np.ndarray, np.ndarray], k: int
) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.int64]]:
    keys, rows, sizes = out
    valid = np.arange(keys.shape[1])[None, :] < sizes[:, None]
    kv, rv = keys[valid], rows[valid]
    if kv.size > 2 * k:  # cut to the k-th best key (ties kept) before the exact sort
        kth = np.partition(kv, kv.size - k)[kv.size - k]
        sel = kv >= kth
        kv, rv = kv[sel], rv[sel]
    order = np.lexsort((rv, -kv))[:k]
    return kv[order], rv[order]


_LAYER: list[str] = []
"""numba's threading layer, once a parallel kernel has started it."""
_SERIAL_LAUNCH = threading.Lock()
"""Held around a parallel launch under the workqueue layer (or before the layer is known)."""


def _run(fn: Any, *args: Any) -> Any:
    """Run a parallel kernel with dynamic scheduling (one chunk at a time per thread).

    numba's "workqueue" layer (its fallback where neither OpenMP nor TBB loads)
    aborts the process when two threads launch parallel work at once, so under
    it, and until the layer is known, launches are serialised.
    """
    if _LAYER and _LAYER[0] != "workqueue":
        return _launch(fn, args)
    with _SERIAL_LAUNCH:
        out = _launch(fn, args)
        if not _LAYER:
            with contextlib.suppress(ValueError):  # not initialised: no parallel region ran
                _LAYER.append(str(numba.threading_layer()))
        return out


def _launch(fn: Any, args: tuple[Any, ...]) -> Any:
    old = numba.set_parallel_chunksize(1)
    try:
        return fn(*args)
    finally:
        numba.set_parallel_chunksize(old)


def _check_k(k: int) -> int:
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or not 1 <= k <= K_MAX:
        raise InvalidVectorQuery(f"k must be an integer in 1..{K_MAX}, got {k!r}")
    return int(k)


def _prep_query(query: npt.ArrayLike, d: int) -> tuple[np.ndarray, np.ndarray, bool, float]:
    """Split a query into (int8 values as int16, float32, use_float, norm); int8 path when exact.

    The int8 query travels as int16 (same values): the kernels multiply int16 x int16.
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


def _prep_mask(mask: npt.ArrayLike | None, n: int) -> np.ndarray | None:
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
        norms: ``(N,)`` float32 row norms (:func:`int8_norms`).
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
    k = _check_k(k)
    n, d = vectors.shape
    qi, qf, use_float, qnorm = _prep_query(query, d)
    m = _prep_mask(mask, n)
    exclude = -1 if exclude_row is None else int(exclude_row)
    if rows is not None:
        cand = np.asarray(rows, dtype=np.int64)
        if m is not None:
            cand = cand[m[cand]]
    elif m is not None and m.mean() < _SPARSE_MASK:
        cand = np.flatnonzero(m).astype(np.int64)
    else:
        cand = None
    if cand is not None:
        out = _kernels.cosine_scan_rows(vectors, norms, qi, qf, use_float, cand, exclude, k)
        scanned = int(cand.size)
    else:
        use_mask = m is not None
        marr = m if m is not None else np.ones(1, np.bool_)
        args = (vectors, norms, qi, qf, use_float, marr, use_mask, exclude, k)
        if n * (d + 4) <= _SERIAL_BYTES:
            out = _kernels.cosine_scan_serial(*args)
        else:
            out = _run(_kernels.cosine_scan, *args, _nchunk(n))
        scanned = int(n)
    keys, top = _merge(out, k)
    return KnnResult(rows=top, scores=keys / qnorm, scanned=scanned, mode="cosine")


def _words(codes: np.ndarray) -> np.ndarray:
    if codes.dtype != np.uint8 or codes.ndim != 2 or codes.shape[1] % 8:
        raise InvalidVectorQuery(f"codes must be uint8 (N, 8w), got {codes.dtype} {codes.shape}")
    return codes.view(np.uint64)


def _hamming_candidates(
    codes: np.ndarray,
    qcode: np.ndarray,
    n_keep: int,
    mask: npt.ArrayLike | None,
    exclude_row: int | None,
) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.int64], int]:
    """Best ``n_keep`` rows by Hamming distance: (keys = -distance, rows, rows scanned)."""
    words = _words(codes)
    n, nbytes = codes.shape
    q = np.ascontiguousarray(np.asarray(qcode, dtype=np.uint8))
    if q.shape != (nbytes,):
        raise InvalidVectorQuery(f"query code must have {nbytes} bytes, got shape {q.shape}")
    qw = q.view(np.uint64)
    m = _prep_mask(mask, n)
    exclude = -1 if exclude_row is None else int(exclude_row)
    if m is not None and m.mean() < _SPARSE_MASK:
        cand = np.flatnonzero(m).astype(np.int64)
        out = _kernels.hamming_scan_rows(words, qw, cand, exclude, n_keep)
        scanned = int(cand.size)
    else:
        marr = m if m is not None else np.ones(1, np.bool_)
        args = (words, qw, marr, m is not None, exclude, n_keep)
        if n * nbytes <= _SERIAL_BYTES:
            out = _kernels.hamming_scan_serial(*args)
        else:
            out = _run(_kernels.hamming_scan, *args, _nchunk(n), False)
        scanned = int(n)
    keys, rows = _merge(out, n_keep)
    return keys, rows, scanned


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
    k = _check_k(k)
    keys, top, scanned = _hamming_candidates(codes, np.asarray(query_code), k, mask, exclude_row)
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
    k = _check_k(k)
    if isinstance(multiple, bool) or not isinstance(multiple, (int, np.integer)) or multiple < 1:
        raise InvalidVectorQuery(f"multiple must be a positive integer, got {multiple!r}")
    qc = binarize(np.asarray(query)) if query_code is None else np.asarray(query_code, np.uint8)
    n_cand = min(_MAX_CANDIDATES, int(multiple) * k)
    _, cand, scanned = _hamming_candidates(codes, qc, n_cand, mask, exclude_row)
    if cand.size == 0:
        return KnnResult(np.empty(0, np.int64), np.empty(0), scanned, "hamming_then_rerank", 0)
    exact = cosine_topk(vectors, norms, query, k, rows=np.sort(cand), exclude_row=exclude_row)
    return KnnResult(exact.rows, exact.scores, scanned, "hamming_then_rerank", int(cand.size))


CALIBRATION_MULTIPLES: tuple[int, ...] = (4, 8, 16, 32, 64, 128, 256, 512)
"""Candidate multiples tried by :func:`calibrate_rerank_multiple`."""


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
) -> tuple[int, dict[int, float]]:
    """Smallest candidate multiple whose mean recall@k reaches ``target`` on this table.

    Queries are ``n_queries`` rows drawn with ``default_rng(seed)`` (each excluded
    from its own answer); recall is measured against exact cosine. The Hamming
    ranking is computed once at the largest multiple: the candidates of a smaller
    multiple are a prefix of it (the order is total), so each multiple costs only
    its rerank. Store the result as ``meta["rerank_multiple"]`` when writing the
    table; :meth:`KnnTable.search` uses it.

    Returns:
        (chosen multiple, {multiple: recall}); the largest multiple when none reaches target.
    """
    n = vectors.shape[0]
    rows = np.random.default_rng(seed).choice(n, min(n_queries, n), replace=False)
    top_m = max(multiples)
    hits = {m: 0 for m in multiples}
    for r in rows.tolist():
        exact = set(cosine_topk(vectors, norms, vectors[r], k, exclude_row=r).rows.tolist())
        _, ranked, _ = _hamming_candidates(
            codes, codes[r], min(_MAX_CANDIDATES, top_m * k), None, r
        )
        for m in multiples:
            got = cosine_topk(vectors, norms, vectors[r], k, rows=np.sort(ranked[: m * k]))
            hits[m] += len(exact & set(got.rows.tolist()))
    recall = {m: hits[m] / (k * rows.size) for m in multiples}
    chosen = next((m for m in sorted(multiples) if recall[m] >= target), max(multiples))
    return chosen, recall


# --------------------------------------------------------------------------- table


@dataclass(frozen=True, eq=False)
class KnnTable:
    """One memory-mapped k-NN table (a band vintage). Open with :meth:`open`."""

    path: Path
    """Resolved version directory the arrays were mapped from."""
    meta: dict[str, Any]
    """Contents of ``meta.json``."""
    cells: npt.NDArray[np.uint64]
    """``(N,)`` raw cell64 ids, ascending (memmap)."""
    vectors: npt.NDArray[np.int8]
    """``(N, D)`` int8 rows (memmap)."""
    scales: npt.NDArray[np.float32]
    """``(N,)`` dequantisation scales (memmap)."""
    norms: npt.NDArray[np.float32]
    """``(N,)`` int8 row norms (memmap)."""
    bin128: npt.NDArray[np.uint8] | None = field(default=None)
    """``(N, 16)`` binary codes (memmap), or None when D != 128."""
    head: npt.NDArray[np.int8] | None = field(default=None)
    """``(N, H)`` row heads (memmap; :func:`head_layout`), or None (older tables, small D)."""
    tailnorm: npt.NDArray[np.float32] | None = field(default=None)
    """``(N,)`` tail norms rounded up (memmap), with :attr:`head`."""
    bin128w: npt.NDArray[np.uint64] | None = field(default=None)
    """``(2, N)`` the binary codes word-major (memmap), or None (older tables, D != 128)."""

    @classmethod
    def open(cls, directory: str | os.PathLike[str]) -> KnnTable:
        """Memory-map a table written by :func:`write_table` (reads headers only).

        Raises:
            VectorTableError: missing files, wrong shapes or dtypes.
        """
        for attempt in range(3):
            # Resolve the link once; retry if a concurrent replace removed that version
            # between the resolve and the maps (open maps themselves stay valid).
            path = Path(os.path.realpath(directory))
            try:
                meta = _read_meta(path)
                names = (
                    *_ARRAYS,
                    *(("bin128",) if meta.get("has_bin128") else ()),
                    *(("head", "tailnorm") if meta.get("head_dims") else ()),
                    *(("bin128w",) if meta.get("has_bin128w") else ()),
                )
                arrays = {
                    name: np.load(path / f"{name}.npy", mmap_mode="r", allow_pickle=False)
                    for name in names
                }
                break
            except (OSError, ValueError) as e:
                if attempt == 2 or Path(os.path.realpath(directory)) == path:
                    raise VectorTableError(f"cannot open table {path}: {e}") from e
        n, d = int(meta["n"]), int(meta["d"])
        expect = {
            "cells": (np.uint64, (n,)),
            "vectors": (np.int8, (n, d)),
            "scales": (np.float32, (n,)),
            "norms": (np.float32, (n,)),
            "bin128": (np.uint8, (n, BIN_BYTES)),
            "head": (np.int8, (n, int(meta.get("head_dims") or 0))),
            "tailnorm": (np.float32, (n,)),
            "bin128w": (np.uint64, (2, n)),
        }
        if meta.get("head_dims"):
            hi = meta.get("head_index")
            if (
                not isinstance(hi, list)
                or len(hi) != int(meta["head_dims"])
                or sorted(set(hi)) != hi
                or not all(isinstance(i, int) and 0 <= i < d for i in hi)
            ):
                raise VectorTableError(f"{path}/meta.json: bad head_index")
        for name, arr in arrays.items():
            dt, shape = expect[name]
            if arr.dtype != dt or arr.shape != shape or not arr.flags.c_contiguous:
                raise VectorTableError(f"{path / name}.npy: expected {np.dtype(dt)} {shape}")
        return cls(
            path=path,
            meta=meta,
            cells=arrays["cells"],
            vectors=arrays["vectors"],
            scales=arrays["scales"],
            norms=arrays["norms"],
            bin128=arrays.get("bin128"),
            head=arrays.get("head"),
            tailnorm=arrays.get("tailnorm"),
            bin128w=arrays.get("bin128w"),
        )

    @property
    def n(self) -> int:
        """Number of rows."""
        return int(self.vectors.shape[0])

    @property
    def d(self) -> int:
        """Vector dimension."""
        return int(self.vectors.shape[1])

    @property
    def rerank_multiple(self) -> int:
        """Candidate multiple for ``hamming_then_rerank`` (calibrated one if stored)."""
        return int(self.meta.get("rerank_multiple", DEFAULT_RERANK_MULTIPLE))

    def row_of(self, cell_raw: int) -> int | None:
        """Row of a raw cell64 id, or None when the table has no vector for it."""
        c = np.uint64(cell_raw)
        try:
            i = int(np.searchsorted(self.cells, c))
            return i if i < self.n and self.cells[i] == c else None
        finally:
            _release(self.cells, 0, self.n)

    def rows_of(self, cells_raw: npt.ArrayLike) -> npt.NDArray[np.int64]:
        """Vectorised :meth:`row_of`; -1 where a cell is absent."""
        c = np.asarray(cells_raw, dtype=np.uint64)
        try:
            i = np.searchsorted(self.cells, c)
            ok = i < self.n
            ok[ok] = self.cells[i[ok]] == c[ok]
        finally:
            _release(self.cells, 0, self.n)
        return np.where(ok, i, -1).astype(np.int64)

    # Point reads copy out of the mapping and then drop the touched pages: a fault
    # on a hot page-cache file maps the whole large folio around the page (measured:
    # ~16 MB of RSS per row read of a 10^7-row table), so a server answering many
    # queries would otherwise grow towards the table's size.

    def vector(self, row: int) -> npt.NDArray[np.int8]:
        """The int8 vector of one row (a copy)."""
        return self._point(self.vectors, row)

    def scale(self, row: int) -> float:
        """The dequantisation scale of one row."""
        return float(self._point(self.scales, row))

    def norm(self, row: int) -> float:
        """The int8 L2 norm of one row."""
        return float(self._point(self.norms, row))

    def cells_at(self, rows: npt.ArrayLike) -> npt.NDArray[np.uint64]:
        """Raw cell64 ids of the given rows (a copy)."""
        r = np.asarray(rows, dtype=np.int64)
        if r.size == 0:
            return np.zeros(0, np.uint64)
        try:
            return np.array(self.cells[r])
        finally:
            _release(self.cells, 0, self.n)

    def _point(self, arr: Any, row: int) -> Any:
        r = int(row)
        if not 0 <= r < self.n:
            raise InvalidVectorQuery(f"row {row} outside 0..{self.n - 1}")
        try:
            return np.array(arr[r])
        finally:
            _release(arr, r, r + 1)

    def dequantised(self, row: int) -> npt.NDArray[np.float32]:
        """The float32 embedding of one row (int8 * scale)."""
        return self.vector(row).astype(np.float32) * np.float32(self.scale(row))

    def search(
        self,
        query: npt.ArrayLike,
        *,
        k: int = 10,
        mode: str = "cosine",
        mask: npt.ArrayLike | None = None,
        exclude_row: int | None = None,
        rerank_multiple: int | None = None,
        query_code: npt.ArrayLike | None = None,
    ) -> KnnResult:
        """Nearest rows to a query vector.

        Args:
            query: ``(D,)`` int8 or float vector (inline vectors are float).
            k: 1..:data:`K_MAX`.
            mode: ``cosine``, ``hamming`` or ``hamming_then_rerank``.
            mask: Optional ``(N,)`` bool eligibility (the caller's filter).
            exclude_row: Row never returned.
            rerank_multiple: Hamming candidates per neighbour for the rerank (default:
                the table's calibrated ``meta["rerank_multiple"]``, else
                :data:`DEFAULT_RERANK_MULTIPLE`).
            query_code: The query's 16-byte code if known (default: :func:`binarize`).

        Raises:
            InvalidVectorQuery: unknown mode, Hamming on a table without codes,
                wrong dimension, zero query, bad k or mask.
        """
        if mode not in MODES:
            raise InvalidVectorQuery(f"unknown mode {mode!r}; valid: {', '.join(MODES)}")
        if mode == "cosine":
            return self._cosine_blockwise(query, k, mask, exclude_row)
        if self.bin128 is None:
            raise InvalidVectorQuery(
                f"mode {mode!r} needs binary codes; this table (D={self.d}) has none"
            )
        q = np.asarray(query)
        if q.ndim != 1 or q.shape[0] != self.d:
            raise InvalidVectorQuery(f"query must have dimension {self.d}, got shape {q.shape}")
        code = binarize(q) if query_code is None else np.asarray(query_code, np.uint8)
        if mode == "hamming":
            kk = _check_k(k)
            keys, top, scanned = self._hamming_blockwise(code, kk, mask, exclude_row)
            bits = self.bin128.shape[1] * 8
            return KnnResult(
                rows=top, scores=1.0 + 2.0 * keys / bits, scanned=scanned, mode="hamming"
            )
        multiple = self.rerank_multiple if rerank_multiple is None else rerank_multiple
        if (
            isinstance(multiple, bool)
            or not isinstance(multiple, (int, np.integer))
            or multiple < 1
        ):
            raise InvalidVectorQuery(f"multiple must be a positive integer, got {multiple!r}")
        k = _check_k(k)
        _, cand, scanned = self._hamming_blockwise(
            code, min(_MAX_CANDIDATES, int(multiple) * k), mask, exclude_row
        )
        if cand.size == 0:
            return KnnResult(np.empty(0, np.int64), np.empty(0), scanned, "hamming_then_rerank", 0)
        cand = np.sort(cand)
        # Read the candidates with pread, not through the mapping: a page fault on a
        # hot file maps the whole (large) page-cache folio around it, so a few
        # thousand scattered rows would make ~1 GB resident (measured).
        vectors = self._read_rows(cand)
        norms = int8_norms(vectors)  # equal to the stored norms; avoids faulting those pages in
        exact = cosine_topk(vectors, norms, q, k)
        return KnnResult(
            cand[exact.rows], exact.scores, scanned, "hamming_then_rerank", int(cand.size)
        )

    def _hamming_blockwise(
        self,
        code: npt.NDArray[np.uint8],
        n_keep: int,
        mask: npt.ArrayLike | None,
        exclude_row: int | None,
    ) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.int64], int]:
        """Best ``n_keep`` rows by Hamming distance; ``(-distance, rows, scanned)``, best first.

        Small tables and sparse masks use the serial kernels. A large table is
        scanned in parallel chunks through the mapping, each chunk releasing every
        4 MB region after its scan (:func:`store._kernels.hamming_scan`, or
        :func:`store._kernels.hamming_scan_split` over the word-major planes for
        small ``n_keep``), so the codes never become resident in this process.
        """
        assert self.bin128 is not None
        n = self.n
        m = _prep_mask(mask, n)
        if n * BIN_BYTES <= FILE_SCAN_BYTES or (m is not None and m.mean() < _SPARSE_MASK):
            try:
                return _hamming_candidates(self.bin128, code, n_keep, m, exclude_row)
            finally:
                _release(self.bin128, 0, n)
        q = np.ascontiguousarray(np.asarray(code, dtype=np.uint8))
        if q.shape != (BIN_BYTES,):
            raise InvalidVectorQuery(f"query code must have {BIN_BYTES} bytes, got shape {q.shape}")
        marr = m if m is not None else np.ones(1, np.bool_)
        exclude = -1 if exclude_row is None else int(exclude_row)
        # word-major planes pay off when the limit is tight (few rows pass the first
        # word): small n_keep. For rerank candidate lists (thousands of rows) most
        # regions need their second words anyway, and the row-major scan reads less.
        planes = self.bin128w if n_keep < _SPLIT_MAX_KEEP else None
        self._check_mapped(("bin128w",) if planes is not None else ("bin128",))
        if planes is not None:
            out = _run(
                _kernels.hamming_scan_split,
                planes,
                q.view("<u8"),
                marr,
                m is not None,
                exclude,
                n_keep,
                _nchunk(n),
                _file_mapped(planes),
            )
        else:
            out = _run(
                _kernels.hamming_scan,
                self.bin128.view(np.uint64),
                q.view(np.uint64),
                marr,
                m is not None,
                exclude,
                n_keep,
                _nchunk(n),
                _file_mapped(self.bin128),
            )
        keys, rows = _merge(out, n_keep)
        return keys, rows, n

    def _check_mapped(self, names: tuple[str, ...]) -> None:
        """Raise if a mapped array's file is shorter than its data (read in place, a
        truncated file would fault the process instead of failing one query)."""
        for name in names:
            arr = getattr(self, name)
            need = _data_offset(arr) + int(arr.nbytes)
            try:
                size = (self.path / f"{name}.npy").stat().st_size
            except OSError as e:
                raise VectorTableError(f"{self.path}/{name}.npy: {e}") from e
            if size < need:
                raise VectorTableError(
                    f"{self.path}/{name}.npy: truncated ({size} bytes, {need} expected)"
                )

    def _check_errs(self, errs: npt.NDArray[np.int64], name: str) -> None:
        bad = errs[errs > 0]
        if bad.size:
            raise VectorTableError(f"{self.path}/{name}: short read at row {int(bad.min()) - 1}")

    def _read_rows(self, rows: npt.NDArray[np.int64]) -> npt.NDArray[np.int8]:
        """Rows of ``vectors`` read with ``pread`` (runs coalesced, in a compiled loop)."""
        out = np.empty((rows.size, self.d), dtype=np.int8)
        with _open_ro(self.path / "vectors.npy") as fd:
            bad = _kernels.pread_rows(
                fd, np.ascontiguousarray(rows, np.int64), self.d, _data_offset(self.vectors), out
            )
        if bad >= 0:
            raise VectorTableError(f"{self.path}/vectors.npy: short read at row {int(rows[bad])}")
        return out

    def _cosine_blockwise(
        self, query: npt.ArrayLike, k: int, mask: npt.ArrayLike | None, exclude_row: int | None
    ) -> KnnResult:
        """Exact cosine over the whole table, never holding it resident.

        A memory-mapped scan would leave every page it touched resident in the
        process (a 10^7-row table: 1.3 GB of RSS), and dropping pages after each
        block costs a page fault per page on every query. Instead a large table is
        read with ``pread`` into small per-chunk buffers that stay in cache
        (:func:`store._kernels.cosine_scan_file`), in parallel chunks; the page
        cache serves repeated scans. Small tables (<= :data:`FILE_SCAN_BYTES`) are
        scanned through the mapping. A sparse mask (< 25 % eligible, at most
        2^16 rows) reads only the eligible rows. Results equal one whole-table
        :func:`cosine_topk` scan (ties by lower row).
        """
        k = _check_k(k)
        n, d = self.n, self.d
        if n * (d + 4) <= FILE_SCAN_BYTES:
            try:
                return cosine_topk(
                    self.vectors, self.norms, query, k, mask=mask, exclude_row=exclude_row
                )
            finally:
                _release(self.vectors, 0, n)
        qi, qf, use_float, qnorm = _prep_query(query, d)
        m = _prep_mask(mask, n)
        exclude = -1 if exclude_row is None else int(exclude_row)
        if m is not None and m.mean() < _SPARSE_MASK:
            cand = np.flatnonzero(m).astype(np.int64)
            cand = cand[cand != exclude]
            if cand.size <= _GATHER_ROWS:
                vectors = self._read_rows(cand)
                part = cosine_topk(vectors, int8_norms(vectors), query, k)
                return KnnResult(cand[part.rows], part.scores, int(cand.size), "cosine")
        marr = m if m is not None else np.ones(1, np.bool_)
        if (
            self.head is not None
            and self.tailnorm is not None
            and not use_float
            and self.n >= PRUNE_MIN_ROWS
        ):
            return self._cosine_pruned(qi, qnorm, k, marr, m is not None, exclude)
        with _open_ro(self.path / "vectors.npy") as fdv, _open_ro(self.path / "norms.npy") as fdn:
            out = _run(
                _kernels.cosine_scan_file,
                fdv,
                _data_offset(self.vectors),
                fdn,
                _data_offset(self.norms),
                n,
                d,
                qi,
                qf,
                use_float,
                marr,
                m is not None,
                exclude,
                k,
                _nchunk(n),
            )
        self._check_errs(out[3], "vectors.npy or norms.npy")
        keys, top = _merge(out[:3], k)
        return KnnResult(rows=top, scores=keys / qnorm, scanned=n, mode="cosine")

    def _cosine_pruned(
        self,
        qi: npt.NDArray[np.int16],
        qnorm: float,
        k: int,
        mask: npt.NDArray[np.bool_],
        use_mask: bool,
        exclude: int,
    ) -> KnnResult:
        """Exact cosine from the heads (:func:`store._kernels.cosine_scan_pruned`)."""
        assert self.head is not None
        assert self.tailnorm is not None
        head_index = np.asarray(self.meta["head_index"], np.int64)
        tail = np.ones(self.d, bool)
        tail[head_index] = False
        qt = qi[tail].astype(np.float64)
        qtn = math.nextafter(math.sqrt(float(np.dot(qt, qt))), math.inf)
        self._check_mapped(("head", "norms", "tailnorm"))
        with _open_ro(self.path / "vectors.npy") as fdv:
            out = _run(
                _kernels.cosine_scan_pruned,
                self.head,
                self.norms,
                self.tailnorm,
                fdv,
                _data_offset(self.vectors),
                self.n,
                int(head_index.size),
                self.d,
                np.ascontiguousarray(qi[head_index]),
                qi,
                qtn,
                mask,
                use_mask,
                exclude,
                k,
                _nchunk(self.n),
                self._cosine_seed(qi, k, mask, use_mask, exclude),
                _file_mapped(self.head, self.norms, self.tailnorm),
            )
        self._check_errs(out[3], "head.npy, norms.npy, tailnorm.npy or vectors.npy")
        keys, top = _merge(out[:3], k)
        return KnnResult(
            rows=top,
            scores=keys / qnorm,
            scanned=self.n,
            mode="cosine",
            rows_read_whole=int(out[4].sum()),
        )

    def _cosine_seed(
        self,
        qi: npt.NDArray[np.int16],
        k: int,
        mask: npt.NDArray[np.bool_],
        use_mask: bool,
        exclude: int,
    ) -> float:
        """The k-th best exact key over a sample of eligible rows (-inf if fewer than k).

        Any k eligible rows bound the k-th best key of the table from below, so the
        pruned scan may skip every row whose bound is under it from its first
        buffer on, instead of waiting for its heaps to fill. The sample is
        :data:`_SAMPLE_RUNS` evenly spaced runs of :data:`_SEED_RUN_ROWS` rows.
        """
        n = self.n
        starts = np.linspace(0, max(0, n - _SEED_RUN_ROWS), _SAMPLE_RUNS).astype(np.int64)
        rows = (starts[:, None] + np.arange(_SEED_RUN_ROWS)[None, :]).ravel()
        if n < 2 * _SAMPLE_RUNS * _SEED_RUN_ROWS:  # runs may overlap: make the rows unique
            rows = np.unique(rows)
        rows = rows[(rows < n) & (rows != exclude)]
        if use_mask:
            rows = rows[mask[rows]]
        if rows.size < k:
            return -math.inf
        vectors = self._read_rows(rows)
        out = _kernels.cosine_scan_serial(
            vectors,
            int8_norms(vectors),
            qi,
            np.zeros(1, np.float32),
            False,
            np.ones(1, np.bool_),
            False,
            -1,
            k,
        )
        kth, _ = _merge(out, k)
        return float(kth[-1]) if kth.size == k else -math.inf

    def search_row(self, row: int, **kwargs: Any) -> KnnResult:
        """Neighbours of a stored row (the row itself is excluded).

        Uses the stored int8 vector (and stored code for Hamming, which equals
        :func:`binarize` of the row). Keyword arguments as in :meth:`search`.
        """
        if not 0 <= int(row) < self.n:
            raise InvalidVectorQuery(f"row {row} outside 0..{self.n - 1}")
        r = int(row)
        code = None if self.bin128 is None else self._point(self.bin128, r)
        return self.search(self.vector(r), exclude_row=r, query_code=code, **kwargs)
