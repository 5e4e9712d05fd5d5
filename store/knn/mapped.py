"""Read-only access to a table's files: descriptors for pread, mapping checks, page release.

A scan may drop the pages it read from this process's resident set only when
the array is a read-only file mapping (:func:`file_mapped`): ``MADV_DONTNEED``
re-reads a file mapping from the page cache but zero-fills anonymous memory.
"""

from __future__ import annotations

import contextlib
import json
import mmap
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np

from store.errors import VectorTableError

__all__ = [
    "SCANNED",
    "advise_huge",
    "check_mapped",
    "data_offset",
    "file_mapped",
    "map_arrays",
    "open_ro",
    "read_meta",
    "release",
]

SCANNED = ("head_blocks", "norms", "tailnorm", "bin128", "bin128w")
"""Arrays the scans read in order through their mappings, region by region: the ones
advised for 2 MB pages (:func:`advise_huge`). The others are read a row or a list at a
time (the cell ids' binary search, single rows, the inverted lists) or with ``pread``
(the full rows of large tables), where a 2 MB read-ahead per fault would read more than
they need."""


@contextlib.contextmanager
def open_ro(path: Path) -> Any:
    """A read-only file descriptor for the kernels' pread, closed on exit.

    Raises:
        VectorTableError: the file cannot be opened.
    """
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError as e:
        raise VectorTableError(f"cannot open {path}: {e}") from e
    try:
        yield fd
    finally:
        os.close(fd)


def file_mapped(*arrays: Any) -> bool:
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


def data_offset(arr: Any) -> int:
    """Byte offset of a mapped ``.npy`` array's data in its file."""
    return int(getattr(arr, "offset", 0))


def check_mapped(directory: Path, arrays: dict[str, Any]) -> None:
    """Raise if a mapped array's file is shorter than its data.

    A scan reading an array in place would fault the process on a truncated
    file instead of failing one query, so it checks the files first.

    Args:
        directory: Table version directory holding ``<name>.npy``.
        arrays: The mapped arrays by file name (without ``.npy``).

    Raises:
        VectorTableError: a file is missing or shorter than its array's data.
    """
    for name, arr in arrays.items():
        need = data_offset(arr) + int(arr.nbytes)
        try:
            size = (directory / f"{name}.npy").stat().st_size
        except OSError as e:
            raise VectorTableError(f"{directory}/{name}.npy: {e}") from e
        if size < need:
            raise VectorTableError(
                f"{directory}/{name}.npy: truncated ({size} bytes, {need} expected)"
            )


def release(arr: Any, start_row: int, end_row: int) -> None:
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


def map_arrays(path: Path, names: Iterable[str]) -> dict[str, Any]:
    """Memory-map ``<path>/<name>.npy`` read-only for each name, the :data:`SCANNED` ones
    advised for 2 MB pages (:func:`advise_huge`).

    Raises:
        OSError, ValueError: a file is missing or not an ``.npy`` array.
    """
    arrays = {
        name: np.load(path / f"{name}.npy", mmap_mode="r", allow_pickle=False) for name in names
    }
    for name in SCANNED:
        if name in arrays:
            advise_huge(arrays[name])
    return arrays


def advise_huge(arr: Any) -> bool:
    """Ask the kernel for 2 MB pages under a mapped array (``MADV_HUGEPAGE``); True if the
    kernel accepted the advice (it does with transparent huge pages off, to no effect).

    A scan faults a table in through its mapping and releases it region by region, so
    its cost is the page faults and the page-table work of each release, not the bytes.
    Pages a fault brings into the page cache under this advice come in 2 MB folios
    (readahead of the huge-page order) that the mapping maps with one entry each: one
    fault and one release per 2 MB instead of one per 64 kB of fault-around, and the
    page cache keeps them so for every later mapping of the file. Pages already cached
    in small folios (read by ``read()``, say) stay as they are until the kernel drops
    them. A hint only: with transparent huge pages off (``never``) or without
    ``MADV_HUGEPAGE`` it does nothing, and nothing else changes (the same bytes are read).
    Measured in ``bench/HISTORY.md`` (session 20).
    """
    mm = getattr(arr, "_mmap", None)
    advice = getattr(mmap, "MADV_HUGEPAGE", None)
    if mm is None or advice is None:
        return False
    try:
        mm.madvise(advice)
    except (OSError, ValueError):
        return False
    return True


def read_meta(path: Path) -> dict[str, Any]:
    """The ``meta.json`` of a table version directory.

    Raises:
        VectorTableError: the file is missing or not JSON.
    """
    try:
        with open(path / "meta.json") as f:
            meta: dict[str, Any] = json.load(f)
    except (OSError, ValueError) as e:
        raise VectorTableError(f"cannot read {path / 'meta.json'}: {e}") from e
    return meta
