"""The local Dagster instance's SQLite storage, with its connections kept instead of remade.

Dagster's SQLite storages create a new SQLAlchemy engine for every statement group
(``NullPool``) and close its connection afterwards. Each event of a run therefore pays
an engine, a connection (SQLite re-reads the schema), SQLAlchemy's statement compilation
(its compiled-statement cache belongs to the engine, so it is always empty) and, on the
close of the last connection to a WAL database, a checkpoint. Profiled on the tiny
sample's ingest, that was most of the run's cost. :class:`PooledSqliteStorage` is
Dagster's ``DagsterSqliteStorage`` with the same files in the same places (an existing
home is read as it is; Dagster's own classes can read it back) and one engine per file:

* the cross-run databases (``history/runs.db``, the event index ``history/runs/index.db``
  and ``schedules/schedules.db``) keep their connections open in a pool;
* a run's own event database (``history/runs/<run id>.db``) keeps its engine (compiled
  statements) and, while the run lives, one connection for its writes
  (:mod:`pipelines.dagster_event_log`, which also writes each event's rows with less work).

Configured in ``deploy/dagster.yaml`` (``storage: custom``), so every process that opens
the instance from it (``earthmem ingest`` and its workers, ``make dagster``'s webserver,
daemon and code server) uses it. Concurrency is SQLite's as before: WAL, a 30 s busy
timeout, and a connection returned to the pool ends its transaction, so it sees other
processes' commits.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from dagster._core.storage.runs import SqliteRunStorage
from dagster._core.storage.schedules import SqliteScheduleStorage
from dagster._core.storage.sqlite_storage import DagsterSqliteStorage
from sqlalchemy.engine import Connection, Engine

from pipelines.dagster_event_log import (
    BUSY_TIMEOUT_SECONDS,
    RUN_ENGINES,
    PooledSqliteEventLogStorage,
    pooled_engine,
)

__all__ = [
    "BUSY_TIMEOUT_SECONDS",
    "RUN_ENGINES",
    "PooledSqliteEventLogStorage",
    "PooledSqliteRunStorage",
    "PooledSqliteScheduleStorage",
    "PooledSqliteStorage",
]


class _OnePooledEngine:
    """A Dagster SQLite storage's ``connect`` over one pooled engine of its file (a mixin)."""

    _engine: Engine

    def _pool(self, conn_string: str) -> None:
        self._engine = pooled_engine(conn_string)

    @contextmanager
    def connect(self) -> Iterator[Connection]:
        with self._engine.connect() as conn, conn.begin():
            yield conn

    def dispose(self) -> None:
        super().dispose()  # type: ignore[misc]
        self._engine.dispose()


class PooledSqliteRunStorage(_OnePooledEngine, SqliteRunStorage):
    """Dagster's SQLite run storage (``runs.db``) over one pooled engine."""

    def __init__(self, conn_string: str, inst_data: Any = None) -> None:
        super().__init__(conn_string, inst_data)
        self._pool(conn_string)


class PooledSqliteScheduleStorage(_OnePooledEngine, SqliteScheduleStorage):
    """Dagster's SQLite schedule storage (``schedules.db``) over one pooled engine."""

    def __init__(self, conn_string: str, inst_data: Any = None) -> None:
        super().__init__(conn_string, inst_data)
        self._pool(conn_string)


class PooledSqliteStorage(DagsterSqliteStorage):
    """``DagsterSqliteStorage`` (same layout under ``base_dir``) over the pooled storages.

    ``deploy/dagster.yaml``: ``storage: {custom: {module: pipelines.dagster_storage,
    class: PooledSqliteStorage, config: {base_dir: {env: DAGSTER_HOME}}}}``.
    """

    def __init__(self, base_dir: str, inst_data: Any = None) -> None:
        # DagsterSqliteStorage.__init__ with the pooled classes; Dagster's default layout
        self.base_dir = base_dir
        self._run_storage = PooledSqliteRunStorage.from_local(os.path.join(base_dir, "history", ""))
        self._event_log_storage = PooledSqliteEventLogStorage(
            os.path.join(base_dir, "history", "runs", "")
        )
        self._schedule_storage = PooledSqliteScheduleStorage.from_local(
            os.path.join(base_dir, "schedules")
        )
        self._inst_data = inst_data
        super(DagsterSqliteStorage, self).__init__()

    @classmethod
    def from_config_value(cls, inst_data: Any, config_value: Any) -> PooledSqliteStorage:
        return cls.from_local(inst_data=inst_data, **config_value)
