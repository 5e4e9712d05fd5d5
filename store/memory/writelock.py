"""The SQLite store's write lock between processes: a hand-over, not SQLite's sleeps.

Several processes write one SQLite file when ``earthmem serve`` runs more than one
worker. SQLite serialises them itself (``BEGIN IMMEDIATE``), but a writer that
finds the lock taken waits in SQLite's busy handler, which sleeps 1, 2, 5, 10, 15,
20, 25 ... up to 100 ms between tries: the lock is usually free again within a
millisecond, and the waiter sleeps on, so two processes' writes pass at a fraction
of the rate one process reaches. :class:`ProcessWriteLock` takes an ``flock`` on a
file beside the database (``<database>-writer.lock``) before the transaction
starts, retrying every few hundred microseconds until ``timeout_s``, then the
transaction starts with the database's lock (almost always) free.

The lock only paces writers; it guards nothing by itself: ``BEGIN IMMEDIATE``
still decides who writes, so a process that does not take it (another tool, an
older version) is still serialised by SQLite, and where the lock file cannot be
made (a read-only directory, no ``fcntl``) writers go straight to SQLite as
before. The file descriptor is opened per process (a forked child opens its own:
a descriptor shared across a fork would share the lock).
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

from store.errors import MemoryBackendUnavailable

try:
    import fcntl
except ImportError:  # pragma: no cover - not POSIX: SQLite's own lock only
    fcntl = None  # type: ignore[assignment]

__all__ = ["ProcessWriteLock"]

_FIRST_WAIT_S = 0.0002
_MAX_WAIT_S = 0.001
"""Sleeps between tries: short, since a batch holds the lock for a few milliseconds."""


class ProcessWriteLock:
    """An exclusive ``flock`` on ``<database>-writer.lock`` (see the module docstring).

    Not re-entrant; the store takes it with its own thread lock held, so one thread
    of a process at a time asks for it.
    """

    def __init__(self, database: str | os.PathLike[str], timeout_s: float) -> None:
        self.path = Path(f"{os.fspath(database)}-writer.lock")
        """The lock file (created on first use; never holds data)."""
        self.timeout_s = timeout_s
        self._fd: int | None = None
        self._pid = -1
        self._guard = threading.Lock()

    def _descriptor(self) -> int | None:
        with self._guard:
            if self._pid != os.getpid():  # first use, or a forked child
                self._fd, self._pid = None, os.getpid()
                if fcntl is not None:
                    try:
                        self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
                    except OSError:
                        self._fd = None  # SQLite's lock alone
            return self._fd

    def acquire(self) -> bool:
        """Take the lock; False when there is no lock file (nothing to release).

        Raises:
            MemoryBackendUnavailable: another process held it for ``timeout_s``.
        """
        fd = self._descriptor()
        if fd is None:
            return False
        deadline = time.monotonic() + self.timeout_s
        wait = _FIRST_WAIT_S
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return True
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    raise MemoryBackendUnavailable(
                        f"the memory database's write lock ({self.path}) was held by another "
                        f"process for {self.timeout_s:g} s"
                    ) from None
                time.sleep(wait)
                wait = min(wait * 2, _MAX_WAIT_S)
            except OSError:
                return False  # a file system without flock: SQLite's lock alone

    def release(self) -> None:
        """Give the lock back (after the transaction has committed or rolled back)."""
        fd = self._fd
        if fd is not None and self._pid == os.getpid():
            fcntl.flock(fd, fcntl.LOCK_UN)

    def close(self) -> None:
        """Close the descriptor (a lock held with it is released)."""
        with self._guard:
            if self._fd is not None and self._pid == os.getpid():
                os.close(self._fd)
            self._fd, self._pid = None, -1
