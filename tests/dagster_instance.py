"""The tests' in-memory Dagster instance: ``DagsterInstance.ephemeral()`` with an event log
that runs every statement group on the connection it already holds.

Dagster's ``InMemoryEventLogStorage`` holds one connection to its in-memory database for
the instance's life, yet opens another for every statement group (under its own lock) and
sets two PRAGMAs on it: about 9,000 connects in one ingest of the tiny sample, ~2.5 of its
~14.5 s of CPU (measured back to back, four runs). The tests ingest through such instances
dozens of times. :class:`HeldConnectionEventLogStorage` keeps Dagster's lock, tables and
queries and uses the held connection instead, as ``pipelines.dagster_storage`` keeps the
persistent instance's connections (what ``earthmem ingest`` and the benches run on).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

from dagster import DagsterInstance
from dagster._core.instance import InstanceType
from dagster._core.launcher.sync_in_memory_run_launcher import SyncInMemoryRunLauncher
from dagster._core.run_coordinator import DefaultRunCoordinator
from dagster._core.storage.event_log import InMemoryEventLogStorage
from dagster._core.storage.noop_compute_log_manager import NoOpComputeLogManager
from dagster._core.storage.root import TemporaryLocalArtifactStorage
from dagster._core.storage.runs import InMemoryRunStorage
from sqlalchemy.engine import Connection

__all__ = ["HeldConnectionEventLogStorage", "ephemeral"]


class HeldConnectionEventLogStorage(InMemoryEventLogStorage):
    """Dagster's in-memory event log; each statement group runs in a transaction on the
    connection the storage holds (serialised by its lock, as before), from the thread that
    made it. SQLite connections to an in-memory database belong to their thread: any other
    thread gets a connection of its own, as Dagster's class gives every call."""

    def __init__(self) -> None:
        super().__init__()
        self._owner = threading.get_ident()

    @contextmanager
    def _connect(self) -> Iterator[Connection]:  # type: ignore[override]
        if threading.get_ident() != self._owner:
            with super()._connect() as conn:
                yield conn
            return
        with self._db_lock, self._held_conn.begin():
            yield self._held_conn


def ephemeral() -> DagsterInstance:
    """An in-memory instance, as ``DagsterInstance.ephemeral()`` builds it, with
    :class:`HeldConnectionEventLogStorage`."""
    return DagsterInstance(
        instance_type=InstanceType.EPHEMERAL,
        local_artifact_storage=TemporaryLocalArtifactStorage(),
        run_storage=InMemoryRunStorage(),
        event_storage=HeldConnectionEventLogStorage(),
        compute_log_manager=NoOpComputeLogManager(),
        run_coordinator=DefaultRunCoordinator(),
        run_launcher=SyncInMemoryRunLauncher(),
    )
