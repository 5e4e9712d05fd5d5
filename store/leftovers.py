"""What a killed writer leaves behind, removed only when provably stale.

Writers of files that are published by a rename (k-NN tables, inventory files)
fill hidden temporary names first; a writer killed between the two leaves the
temporary behind, and nothing ever removed it. A temporary is provably stale
when no writer of its directory is live: every writer holds a shared ``flock``
on ``<directory>/.writers.lock`` for as long as it writes (:func:`writing`), and
the kernel drops the lock when the writer dies. A writer that finds the lock
free (an exclusive, non-blocking ``flock`` succeeds) is the only live writer,
sweeps what the ``leftovers`` callable lists, and then writes. When another
writer is live, nothing is swept (its temporaries are not garbage); a later
write sweeps.
"""

from __future__ import annotations

import fcntl
import os
import shutil
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

__all__ = ["WRITERS_LOCK_FILENAME", "sweep", "writing"]

WRITERS_LOCK_FILENAME = ".writers.lock"
"""The lock file every live writer of a directory holds shared."""

Leftovers = Callable[[Path], list[Path]]
"""Lists a directory's leftovers (meaningful only while no writer is live)."""


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)


@contextmanager
def writing(directory: str | os.PathLike[str], leftovers: Leftovers) -> Iterator[list[Path]]:
    """Write into ``directory`` as a registered writer, sweeping stale leftovers first.

    Yields:
        The leftovers removed on entry (empty when another writer was live).
    """
    root = Path(directory)
    root.mkdir(parents=True, exist_ok=True)
    with open(root / WRITERS_LOCK_FILENAME, "a+b") as handle:
        removed: list[Path] = []
        try:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            pass  # another writer is live: its temporaries are not garbage
        else:
            removed = leftovers(root)
            for path in removed:
                _remove(path)
        fcntl.flock(handle.fileno(), fcntl.LOCK_SH)  # converts an exclusive lock
        try:
            yield removed
        finally:
            fcntl.flock(handle.fileno(), fcntl.LOCK_UN)


def sweep(directory: str | os.PathLike[str], leftovers: Leftovers) -> list[Path]:
    """Remove a directory's leftovers now if no writer is live; returns what was removed."""
    root = Path(directory)
    if not root.is_dir():
        return []
    with writing(root, leftovers) as removed:
        return removed
