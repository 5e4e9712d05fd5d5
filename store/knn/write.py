"""Writing k-NN tables: :func:`write_table` (atomic, content-addressed) and :func:`upgrade_table`.

Writes are atomic: :func:`write_table` fills a hidden versioned directory and
then swaps a symlink (``<name> -> .<name>@<digest>``) with one ``rename``, so a
reader resolving the name sees either the old or the new table, never a mix.
Every file and both directories are fsynced before the swap. What a writer
killed mid-write leaves (``.<name>.tmp-*`` folders, ``.<name>.link-*`` links,
version folders no name points at) is removed by the next write into the same
folder once no other writer is live (:func:`store.leftovers.writing`).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
import uuid
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import blake3
import numpy as np
import numpy.typing as npt

from store.errors import VectorTableError
from store.knn.codes import (
    BIN_BYTES,
    HEAD_BLOCKS_KEY,
    HEAD_MIN_D,
    ROTATION_SEED,
    binarize,
    blocked_heads,
    head_layout,
    int8_norms,
)
from store.knn.ivf import IVF_MIN_ROWS, IvfPlan, build_ivf, calibrate_ivf
from store.knn.mapped import read_meta
from store.knn.scan import calibrate_rerank_multiple, calibration_truth, cosine_topk
from store.knn.table import KnnTable
from store.leftovers import writing

__all__ = [
    "FORMAT",
    "install_version",
    "meta_needs_upgrade",
    "table_leftovers",
    "upgrade_table",
    "write_table",
]

FORMAT = "earthmem.knn/1"
"""Format tag written into ``meta.json``."""


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


_TEMPORARY = re.compile(r"^\..+\.(tmp|link)-[0-9a-z_]+$")
_VERSION = re.compile(r"^\..+@[0-9a-f]{16}-[0-9a-f]{8}$")


def table_leftovers(parent: Path) -> list[Path]:
    """A tables folder's temporaries and the version folders no table name points at.

    Meaningful only while no writer of ``parent`` is live (see :mod:`store.leftovers`).
    """
    entries = list(parent.iterdir())
    pointed = {os.readlink(p) for p in entries if p.is_symlink() and not p.name.startswith(".")}
    return sorted(
        p
        for p in entries
        if _TEMPORARY.match(p.name) or (_VERSION.match(p.name) and p.name not in pointed)
    )


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
    ivf: bool | None = None,
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
            ``rerank_multiple`` (with the recall per multiple), unless meta has one; and
            for a table with inverted lists the lists probed and the multiple of their
            triage (:func:`store.knn.ivf.calibrate_ivf`; uncalibrated: :data:`UNCALIBRATED_IVF`).
        ivf: Write inverted lists (:mod:`store.knn.ivf`); None: for tables with bin128
            codes and at least :data:`~store.knn.ivf.IVF_MIN_ROWS` rows.

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
        head_index, arrays["head_blocks"], arrays["tailnorm"] = head_layout(arrays["vectors"])
        extra[HEAD_BLOCKS_KEY] = int(head_index.size)
        extra["head_index"] = head_index.tolist()
    if d == BIN_BYTES * 8:
        arrays["bin128"] = binarize(v, ROTATION_SEED)
        # the same codes word-major: plane j holds word j of every row (scanned first-word first)
        arrays["bin128w"] = np.ascontiguousarray(arrays["bin128"].view("<u8").T)
        lists = (n >= IVF_MIN_ROWS if ivf is None else ivf) and 1 < n < 2**31
        full = calibrate and "rerank_multiple" not in meta and n > 1
        # both calibrations ask the same queries: their exact answers are computed once
        truth = (
            calibration_truth(arrays["vectors"], arrays["norms"])
            if calibrate and (lists or full)
            else None
        )
        if full:
            chosen, recall = calibrate_rerank_multiple(
                arrays["vectors"], arrays["norms"], arrays["bin128"], truth=truth
            )
            extra["rerank_multiple"] = chosen
            extra["rerank_recall_at_10"] = {str(m): r for m, r in recall.items()}
        if lists:
            extra["ivf"] = _add_ivf(arrays, truth)
    digest = _digest(arrays)
    full_meta = {
        # what the arrays written here derive (heads, lists, ...) is never taken from the
        # caller's meta: a key copied from another table would claim arrays this one lacks
        **{k: v for k, v in meta.items() if k not in _DERIVED_META},
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

    with writing(path.parent, table_leftovers):
        _publish(path, arrays, full_meta, digest, replace)


def _publish(
    path: Path, arrays: dict[str, np.ndarray], full_meta: dict[str, Any], digest: str, replace: bool
) -> None:
    """Write the version folder and swap the name onto it (see :func:`write_table`)."""
    if path.exists() or path.is_symlink():
        if not path.is_symlink():
            raise VectorTableError(f"{path} exists and is not a table written by write_table")
        old_meta = read_meta(path)
        if old_meta.get("digest") == digest and old_meta == full_meta:
            return
        if not replace:
            raise VectorTableError(f"{path} holds a different table (pass replace=True)")

    def fill(tmp: Path) -> None:
        for name, arr in arrays.items():
            with open(tmp / f"{name}.npy", "wb") as f:
                np.save(f, arr)
                f.flush()
                os.fsync(f.fileno())
        with open(tmp / "meta.json", "w") as f:
            json.dump(full_meta, f, indent=2, sort_keys=True)
            f.flush()
            os.fsync(f.fileno())

    _install(path, digest, fill)


def install_version(path: Path, digest: str, fill: Callable[[Path], None]) -> None:
    """Swap the table name ``path`` onto a new version folder that ``fill`` writes.

    The layout :func:`write_table` writes, for tables that arrive already made (a server's
    cache of the tables on object storage, :mod:`store.knn.remote`): ``fill`` writes the
    files into an empty hidden temporary folder (fsyncing each), which is renamed to
    ``.<name>@<digest>-<uuid>``; then the name is pointed at it by one atomic symlink rename
    and the version it pointed at before is removed (open memory maps stay valid). A
    ``fill`` that raises leaves nothing behind and the name where it was.
    """
    with writing(path.parent, table_leftovers):
        _install(path, digest, fill)


def _install(path: Path, digest: str, fill: Callable[[Path], None]) -> None:
    parent = path.parent
    version = parent / f".{path.name}@{digest[:16]}-{uuid.uuid4().hex[:8]}"
    tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.tmp-", dir=parent))
    os.chmod(tmp, 0o755)  # mkdtemp makes it owner-only; tables are read by the server
    try:
        fill(tmp)
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
    # realpath on both sides: a data directory reached through a symlink resolves the old
    # target's folder to its real path, never equal to ``parent`` as given
    if (
        old_target is not None
        and old_target.parent == Path(os.path.realpath(parent))
        and old_target != Path(os.path.realpath(version))
    ):
        shutil.rmtree(old_target, ignore_errors=True)


UNCALIBRATED_IVF = IvfPlan(nprobe=8, multiple=64)
"""The list triage's plan of a table written with ``calibrate=False``."""


def _add_ivf(arrays: dict[str, np.ndarray], truth: dict[int, set[int]] | None) -> dict[str, Any]:
    """Build a table's inverted lists into ``arrays``; their ``meta["ivf"]`` entry, calibrated
    on ``truth`` (:func:`~store.knn.scan.calibration_truth`; None: not calibrated)."""
    vectors, norms = arrays["vectors"], arrays["norms"]
    lists = build_ivf(vectors, arrays["bin128"])
    arrays.update(
        ivf_centroids=lists.centroids,
        ivf_offsets=lists.offsets,
        ivf_rows=lists.rows,
        ivf_codes=lists.codes,
    )
    cfg: dict[str, Any] = {"lists": lists.n_lists}
    if truth is None:
        plan = UNCALIBRATED_IVF
    else:

        def rerank(r: int, cand: np.ndarray) -> set[int]:
            got = cosine_topk(vectors, norms, vectors[r], 10, rows=cand, exclude_row=r)
            return set(got.rows.tolist())

        plan, recall = calibrate_ivf(lists, truth, rerank, lambda r: vectors[r], vectors.shape[1])
        cfg["recall_at_10"] = recall
    calibrated = truth is not None
    return {**cfg, "nprobe": plan.nprobe, "multiple": plan.multiple, "calibrated": calibrated}


_DERIVED_META = (
    "format",
    "n",
    "d",
    "rotation_seed",
    "has_bin128",
    "digest",
    "head_dims",
    "head_index",
    HEAD_BLOCKS_KEY,
    "head_layout",  # written by session 21's first commits (f739972..4573c29) only
    "ivf",
)


def upgrade_table(
    directory: str | os.PathLike[str], out: str | os.PathLike[str] | None = None
) -> bool:
    """Rewrite a table written by an older version with the current layout (heads, planes, lists).

    The rows, cells, scales and caller metadata (including a stored calibration)
    are kept; the derived arrays are recomputed and the new version is swapped in
    atomically, as :func:`write_table` does. Readers holding the old version keep
    reading it.

    Args:
        directory: The table.
        out: Where to write the new version (default: ``directory`` itself); e.g. a data
            directory's own path of a table read from an object-storage cache, to publish.

    Returns:
        True when the table was rewritten, False when it was current already.
    """
    t = KnnTable.open(directory)
    if not _needs_upgrade(t):
        return False
    write_table(  # it drops the derived keys of the old meta (_DERIVED_META) itself
        directory if out is None else out,
        np.array(t.cells),
        np.array(t.vectors),
        np.array(t.scales),
        dict(t.meta),
        replace=True,
    )
    return True


def _needs_upgrade(t: KnnTable) -> bool:
    """Whether the open table lacks arrays the current layout writes (heads in blocks, word-major
    planes, inverted lists): its meta names the arrays it opened with
    (:func:`store.knn.layout.array_names`)."""
    return _outdated(t.meta, t.n, t.d)


def meta_needs_upgrade(meta: dict[str, Any]) -> bool | None:
    """:func:`upgrade_table`'s verdict from a table's ``meta.json`` alone, or None when the meta
    does not say (no ``n`` or ``d``): then the table itself must be opened. Lets an upgrade on
    object storage leave current tables where they are instead of copying them to find out."""
    try:
        n, d = int(meta["n"]), int(meta["d"])
    except (KeyError, TypeError, ValueError):
        return None
    return _outdated(meta, n, d)


def _outdated(meta: Mapping[str, Any], n: int, d: int) -> bool:
    """The one rule: a table of ``n`` rows of ``d`` dimensions whose meta lists no heads in
    blocks (d >= 64), no word-major planes (d = 128) or no inverted lists (2**18 rows or more,
    d = 128) is of an older layout; an empty table never is."""
    heads_ok = blocked_heads(meta) > 0 or d < HEAD_MIN_D  # 0 for row-major heads too
    planes_ok = bool(meta.get("has_bin128w")) or d != BIN_BYTES * 8
    lists_ok = bool(meta.get("ivf")) or n < IVF_MIN_ROWS or d != BIN_BYTES * 8
    return not (heads_ok and planes_ok and lists_ok) and n > 0
