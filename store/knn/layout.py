"""What a table directory holds, by its ``meta.json``, and the checks :meth:`KnnTable.open` makes.

:func:`array_names`: the arrays a table's metadata says it has (the four every table has,
the sign codes of D = 128 tables, the blocked heads, the word-major codes, the inverted
lists). :func:`check_arrays`: each mapped array's dtype, shape and layout against the
metadata, the head index, the list bounds; a table that still holds row-major heads of
before the block layout is opened without them, and said so once
(:data:`store.knn.codes.HEAD_BLOCKS_KEY`).
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from store.errors import VectorTableError
from store.knn.codes import BIN_BYTES, blocked_heads, head_blocks_shape, legacy_heads
from store.knn.ivf import IVF_FILES

__all__ = ["BASE_ARRAYS", "array_names", "check_arrays"]

BASE_ARRAYS = ("cells", "vectors", "scales", "norms")
"""The arrays every table has."""

_log = logging.getLogger(__name__)


def array_names(meta: Mapping[str, Any]) -> tuple[str, ...]:
    """The ``<name>.npy`` arrays of a table, by its metadata."""
    return (
        *BASE_ARRAYS,
        *(("bin128",) if meta.get("has_bin128") else ()),
        *(("head_blocks", "tailnorm") if blocked_heads(meta) else ()),
        *(("bin128w",) if meta.get("has_bin128w") else ()),
        *(IVF_FILES if meta.get("ivf") else ()),
    )


def _n_lists(meta: Mapping[str, Any]) -> int:
    cfg = meta.get("ivf")
    return int(cfg["lists"]) if isinstance(cfg, dict) and "lists" in cfg else 0


@functools.cache
def _warn_legacy(path: Path) -> None:
    """Say once per table version that its row-major heads are not read."""
    _log.warning(
        "k-NN table %s stores heads of the layout before session 21: exact cosine scans it"
        " unpruned (same answers, slower) until `earthmem knn upgrade` (store.knn.write.upgrade_table)"
        " rewrites it",
        path,
    )


def check_arrays(path: Path, meta: Mapping[str, Any], arrays: Mapping[str, Any]) -> None:
    """Check a table's mapped arrays against its metadata.

    Raises:
        VectorTableError: a wrong dtype, shape or layout, a bad head index, list bounds
            that do not cover the rows.
    """
    n, d = int(meta["n"]), int(meta["d"])
    h = blocked_heads(meta)
    expect = {
        "cells": (np.uint64, (n,)),
        "vectors": (np.int8, (n, d)),
        "scales": (np.float32, (n,)),
        "norms": (np.float32, (n,)),
        "bin128": (np.uint8, (n, BIN_BYTES)),
        "head_blocks": (np.uint8, head_blocks_shape(n, h)),
        "tailnorm": (np.float32, (n,)),
        "bin128w": (np.uint64, (2, n)),
        "ivf_centroids": (np.float32, (_n_lists(meta), d)),
        "ivf_offsets": (np.int64, (_n_lists(meta) + 1,)),
        "ivf_rows": (np.int32, (n,)),
        "ivf_codes": (np.uint8, (n, BIN_BYTES)),
    }
    if legacy_heads(meta):
        _warn_legacy(path)
    if h:
        hi = meta.get("head_index")
        if (
            h % 4
            or not isinstance(hi, list)
            or len(hi) != h
            or not all(isinstance(i, int) and not isinstance(i, bool) and 0 <= i < d for i in hi)
            or sorted(set(hi)) != hi
        ):
            raise VectorTableError(f"{path}/meta.json: bad head_block_dims or head_index")
    for name, arr in arrays.items():
        dt, shape = expect[name]
        if arr.dtype != dt or arr.shape != shape or not arr.flags.c_contiguous:
            raise VectorTableError(f"{path / name}.npy: expected {np.dtype(dt)} {shape}")
    offsets = arrays.get("ivf_offsets")
    if offsets is not None and (
        offsets[0] != 0 or offsets[-1] != n or np.any(np.diff(offsets) < 0)
    ):
        raise VectorTableError(f"{path}/ivf_offsets.npy: not list bounds over {n} rows")
