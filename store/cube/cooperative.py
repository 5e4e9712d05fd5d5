"""Cooperative writes: many workers write forks of one session, one coordinator commits them.

icechunk's distributed-write pattern (https://icechunk.io/en/latest/parallel/): the
coordinator opens one writable session (:class:`CooperativeCommit`), forks it once per
task (:meth:`CooperativeCommit.fork`: a ``ForkSession``, picklable), each task writes its
chunk-aligned region into its fork (:func:`write_in_fork`) wherever it runs and sends the
fork back, and the coordinator merges the forks it keeps and commits once
(:meth:`CooperativeCommit.commit`). Until that commit nothing a worker wrote is visible: a
fork that is lost (its worker died) or dropped (its checks failed) leaves only
unreferenced chunk objects, which garbage collection removes. Concurrent coordinators are
ordered by the store (icechunk's conflict detection, :meth:`CubeWriter.commit_session`):
commits touching different chunks both land, the same chunk changed twice is a
:class:`~store.errors.CommitConflict` naming the arrays, and nothing committed is lost.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import icechunk as ic

from store.cube.layout import LAYOUT_VERSION
from store.cube.write import CubeTransaction, CubeWriter
from store.deadline import UNSENT, within_deadline
from store.errors import InvalidWrite, StorageTimeout, TransactionClosed
from store.snapshots import MAIN_BRANCH, object_root, writer_presence

__all__ = ["CooperativeCommit", "ForkWrite", "write_in_fork"]


@dataclass(frozen=True)
class ForkWrite:
    """A fork a task wrote into, sent back to the coordinator (picklable)."""

    fork: ic.ForkSession
    """The fork holding the task's changes (uncommitted)."""
    partition_key: str
    """The partition the task wrote."""
    chunks_written: int
    """Distinct chunks the task's writes covered."""


def write_in_fork(
    fork: ic.ForkSession,
    partition_key: str,
    write: Callable[[CubeTransaction], None],
    remote: bool | None = None,
) -> ForkWrite:
    """Run ``write`` on a transaction over a fork and store its chunks there (no commit).

    The same :class:`CubeTransaction` as the single-process path, so chunks, summaries and
    inventory rows are encoded exactly alike; it needs no data directory and no lock, so it
    runs on any machine that reaches the cube's storage.

    ``remote``: whether the cube is on object storage (None: whether this process's
    environment names an object-storage root, as every machine of a cluster deployment's
    does). There the writes run under the storage deadline (:mod:`store.deadline`): a fork
    abandoned to a store that stopped answering is never returned, so never merged.

    Raises:
        Whatever ``write`` raises (the fork is then not returned, so never merged).
        StorageTimeout: On object storage, the store did not answer within the deadline.
    """
    if not partition_key:
        raise InvalidWrite("partition_key must be a non-empty string")
    remote = object_root() is not None if remote is None else remote
    tx = CubeTransaction(fork, partition_key, remote=remote)
    write(tx)
    what = f"storing {partition_key!r} in a fork"
    within_deadline(tx.store_pending, what, UNSENT, remote=remote)
    return ForkWrite(fork, partition_key, tx.chunks_written)


class CooperativeCommit:
    """One writable session of the cube, forked to tasks, merged and committed once.

    Use as a context manager: it holds the writer presence lock (garbage collection waits)
    from the first fork to the commit and discards the session if the block raises.

    Args:
        writer: The cube writer (its repository, location and data directory).
    """

    def __init__(self, writer: CubeWriter) -> None:
        self._writer = writer
        self._session: ic.Session | None = None
        self._presence: Any = None
        self.snapshot_id: str | None = None
        """Snapshot id after :meth:`commit` (the tip if nothing changed)."""
        self.committed = False
        """Whether :meth:`commit` created a new snapshot."""

    def __enter__(self) -> CooperativeCommit:
        self._presence = writer_presence(self._writer.data_dir)
        self._presence.__enter__()
        self._session = self._writer.repo.writable_session(MAIN_BRANCH)
        return self

    @property
    def remote(self) -> bool:
        """Whether the cube is on object storage (writes and commits under the deadline)."""
        return bool(self._writer._remote)

    def __exit__(self, *exc: Any) -> None:
        session, self._session = self._session, None
        if exc[0] is not None and issubclass(exc[0], StorageTimeout):
            session = None  # an abandoned call still holds it (store.deadline): left alone
        try:
            if session is not None and exc[0] is not None and session.has_uncommitted_changes:
                session.discard_changes()
        finally:
            presence, self._presence = self._presence, None
            presence.__exit__(*exc)

    def _open(self) -> ic.Session:
        if self._session is None:
            raise TransactionClosed("cooperative commit is not open (use it in a with block)")
        return self._session

    def fork(self) -> ic.ForkSession:
        """A fork of the session for one task (all forks share the session's base snapshot)."""
        return self._open().fork()

    def merge(self, writes: Sequence[ForkWrite]) -> None:
        """Merge forks into the session now (:meth:`commit` merges the forks it is given too).

        Lets a coordinator merge forks as they come back, while others still run.
        """
        if writes:
            self._open().merge(*(w.fork for w in writes))

    def commit(
        self,
        writes: Sequence[ForkWrite],
        partition_keys: Sequence[str],
        message: str,
        metadata: Mapping[str, Any] | None = None,
    ) -> tuple[str, bool]:
        """Merge the kept forks and commit once (rebased onto commits that landed meanwhile).

        Args:
            writes: The forks to keep (the others are dropped: never visible).
            partition_keys: The partitions the commit materialises (commit metadata
                ``partition_keys``; ``partition_key`` is the range ``first..last``).
            message: Commit message.
            metadata: Extra JSON-serialisable commit metadata.

        Returns:
            ``(snapshot id, committed)``; the tip and False when the forks changed nothing.

        Raises:
            CommitConflict: A concurrent commit changed the same chunks (nothing committed).
            StorageTimeout: On object storage, the store did not answer the commit within the
                deadline (its outcome unknown; :mod:`store.deadline`).
        """
        session = self._open()
        keys = sorted(partition_keys)
        if not keys:
            raise InvalidWrite("a cooperative commit names at least one partition")
        self.merge(writes)
        meta = {
            **(metadata or {}),
            "partition_key": keys[0] if len(keys) == 1 else f"{keys[0]}..{keys[-1]}",
            "partition_keys": keys,
            "layout_version": LAYOUT_VERSION,
        }
        try:
            self.snapshot_id, self.committed = self._writer.commit_session(session, message, meta)
        except StorageTimeout:
            self._session = None  # the abandoned commit still holds it: never touched again
            raise
        self._session = None
        return self.snapshot_id, self.committed
