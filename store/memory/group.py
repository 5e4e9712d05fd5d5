"""Group commit: concurrent writes of one process share a transaction, each in its own savepoint.

A write is a *job*: a function of the open transaction and its project's history
head that returns the result and the new head. :meth:`GroupCommit.submit` queues
the job; the leading caller takes every job queued so far
(up to :attr:`GroupCommit.max_batch`) and runs them in one transaction:

* the heads of the batch's projects are created if absent and locked first, in
  sorted order (on PostgreSQL a row lock: two processes' batches never deadlock
  on each other's projects);
* each job runs inside ``SAVEPOINT``; a job that raises is rolled back to its
  savepoint alone and its caller gets the error, the others go on. A job may
  offer a ``recover`` function for a unique-key violation (a concurrent
  duplicate ``operation_id``): it runs after the rollback, in the same
  transaction, and answers the stored result instead;
* jobs run in queue order and each sees the previous ones' rows and head, so the
  history chain is appended in that order, one seq after the other;
* the heads that moved are written, then ``COMMIT``; only then are the callers
  answered. If anything outside a job's savepoint fails (the head locks, the head
  updates, the commit), the whole transaction rolls back and *every* caller of
  the batch gets the error: no caller ever sees success before its write is
  durable, and a batch is committed whole or not at all.

Callers that are not the leader wait, each on its own lock, until their job is
answered, or until the leader hands over to them: a leader leads until its own
job is answered, then wakes the caller whose job is first in the queue (if any),
which leads the next batch. Each waiter is woken once, by name: the batch does not
wake every waiter to let each find out whether it was answered (with eight
writers, those wake-ups were a tenth of the interpreter's time). No thread is
started: the batch runs on a caller's thread.
"""

from __future__ import annotations

import _thread
import collections
import threading
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any

from store.memory.prepared import RawTx

__all__ = ["GroupCommit", "GroupStats", "Head", "Job"]

Head = tuple[int, str]
"""A project's history head inside the batch: ``(seq, hash)``."""

Job = Callable[[RawTx, Head], tuple[Any, Head]]
"""A write: runs on the open transaction from the project's head; returns (result, new head)."""


@dataclass(frozen=True)
class GroupStats:
    """What a process's group commit has done since it was made (for health checks and tests)."""

    submitted: int
    """Writes handed to :meth:`GroupCommit.submit` (answered or not yet)."""
    batches: int
    """Transactions run (committed or rolled back)."""
    writes: int
    """Writes those transactions carried."""
    largest: int
    """The most writes one transaction carried."""


@dataclass
class _Slot:
    project: str
    job: Job
    recover: Callable[[RawTx, BaseException], Any] | None
    done: bool = False
    result: Any = None
    error: BaseException | None = None
    wake: _thread.LockType = field(default_factory=threading.Lock)
    """Held from the start; released once, when the job is answered or the lead is
    handed to its caller."""

    def __post_init__(self) -> None:
        self.wake.acquire()

    def answer(self) -> Any:
        if self.error is not None:
            raise self.error
        return self.result


class GroupCommit:
    """Runs queued writes in shared transactions (see the module docstring)."""

    max_batch = 64
    """Jobs per transaction at most."""

    def __init__(
        self,
        transaction: Callable[[], AbstractContextManager[RawTx]],
        integrity_errors: tuple[type[BaseException], ...],
    ) -> None:
        """``transaction()``: a context manager yielding a :class:`RawTx` in a write
        transaction, committed on a clean exit and rolled back on an exception.
        ``integrity_errors``: the exception types of a unique-key violation."""
        self._transaction = transaction
        self._integrity = integrity_errors
        self._queue: collections.deque[_Slot] = collections.deque()
        self._lock = threading.Lock()
        self._leading = False
        self._submitted = self._batches = self._writes = self._largest = 0

    def stats(self) -> GroupStats:
        """Counts of the writes and batches so far."""
        with self._lock:
            return GroupStats(self._submitted, self._batches, self._writes, self._largest)

    @property
    def queued(self) -> int:
        """Jobs waiting for a batch (not yet taken by a leader)."""
        return len(self._queue)

    def submit(
        self,
        project: str,
        job: Job,
        recover: Callable[[RawTx, BaseException], Any] | None = None,
    ) -> Any:
        """Run ``job`` in a batch; its result once the batch has committed (or its error)."""
        slot = _Slot(project, job, recover)
        with self._lock:
            self._queue.append(slot)
            self._submitted += 1
            lead = not self._leading
            self._leading = True  # this caller leads, or a leader is at work already
        if not lead:
            slot.wake.acquire()  # answered, or handed the lead (the slot still queued)
            if slot.done:
                return slot.answer()
        try:
            while not slot.done:
                with self._lock:
                    batch = list(self._take())
                    self._batches += 1
                    self._writes += len(batch)
                    self._largest = max(self._largest, len(batch))
                try:
                    self._run(batch)
                except BaseException as exc:  # the transaction failed: nobody committed
                    for s in batch:
                        s.error, s.result = exc, None
                finally:
                    for s in batch:
                        s.done = True
                        if s is not slot:
                            s.wake.release()
        finally:
            with self._lock:  # hand over to the first caller still queued, or stop leading
                if self._queue:
                    self._queue[0].wake.release()
                else:
                    self._leading = False
        return slot.answer()

    def _take(self) -> Iterator[_Slot]:
        for _ in range(self.max_batch):
            try:
                yield self._queue.popleft()
            except IndexError:
                return

    def _run(self, batch: list[_Slot]) -> None:
        with self._transaction() as tx:
            heads = {p: tx.lock_head(p) for p in sorted({s.project for s in batch})}
            moved: set[str] = set()
            for s in batch:
                tx.raw("SAVEPOINT memory_write")
                try:
                    s.result, head = s.job(tx, heads[s.project])
                except Exception as exc:
                    tx.raw("ROLLBACK TO SAVEPOINT memory_write")
                    s.error = exc
                    if s.recover is not None and isinstance(exc, self._integrity):
                        try:
                            s.result, s.error = s.recover(tx, exc), None
                        except Exception as again:
                            s.error = again
                else:
                    if head != heads[s.project]:
                        heads[s.project] = head
                        moved.add(s.project)
                tx.raw("RELEASE SAVEPOINT memory_write")
            for project in sorted(moved):
                tx.move_head(project, *heads[project])
