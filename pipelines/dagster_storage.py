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
  statements) but still closes its connection after each write: the Dagster UI follows
  a live run by watching that file change, which with WAL happens when the last
  connection closes (the checkpoint).

Configured in ``deploy/dagster.yaml`` (``storage: custom``), so every process that opens
the instance from it (``earthmem ingest`` and its workers, ``make dagster``'s webserver,
daemon and code server) uses it. Concurrency is SQLite's as before: WAL, a 30 s busy
timeout, and a connection returned to the pool ends its transaction, so it sees other
processes' commits.
"""

from __future__ import annotations

import os
import threading
from collections import OrderedDict
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import sqlalchemy as sa
from dagster._core.storage.event_log import SqliteEventLogStorage
from dagster._core.storage.runs import SqliteRunStorage
from dagster._core.storage.schedules import SqliteScheduleStorage
from dagster._core.storage.sqlite_storage import DagsterSqliteStorage
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.pool import NullPool, QueuePool

__all__ = [
    "BUSY_TIMEOUT_SECONDS",
    "RUN_ENGINES",
    "PooledSqliteEventLogStorage",
    "PooledSqliteRunStorage",
    "PooledSqliteScheduleStorage",
    "PooledSqliteStorage",
]

BUSY_TIMEOUT_SECONDS = 30
"""How long a statement waits for another process's write lock (Dagster's own value)."""

RUN_ENGINES = 32
"""Engines of run event databases kept per process (the least recently used is dropped)."""

INDEX_SHARD = "index"
"""The event log's cross-run shard (Dagster's name for ``index.db``)."""


def _pooled(conn_string: str) -> Engine:
    """An engine that keeps its connections to one SQLite file open (a small pool)."""
    return sa.create_engine(
        conn_string,
        poolclass=QueuePool,
        pool_size=2,
        max_overflow=8,
        connect_args={"timeout": BUSY_TIMEOUT_SECONDS},
    )


def _unpooled(conn_string: str) -> Engine:
    """An engine that closes each connection after use (its compiled statements are kept)."""
    return sa.create_engine(
        conn_string, poolclass=NullPool, connect_args={"timeout": BUSY_TIMEOUT_SECONDS}
    )


@contextmanager
def _transaction(engine: Engine) -> Iterator[Connection]:
    with engine.connect() as conn, conn.begin():
        yield conn


class _OnePooledEngine:
    """A Dagster SQLite storage's ``connect`` over one pooled engine of its file (a mixin)."""

    _engine: Engine

    def _pool(self, conn_string: str) -> None:
        self._engine = _pooled(conn_string)

    @contextmanager
    def connect(self) -> Iterator[Connection]:
        with _transaction(self._engine) as conn:
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


class PooledSqliteEventLogStorage(SqliteEventLogStorage):
    """Dagster's run-sharded SQLite event log: the index pooled, each run's file unpooled."""

    def __init__(self, base_dir: str, inst_data: Any = None) -> None:
        self._engines: OrderedDict[str, Engine] = OrderedDict()
        self._engines_lock = threading.Lock()
        super().__init__(base_dir, inst_data)

    def _engine(self, shard: str) -> Engine:
        with self._engines_lock:
            engine = self._engines.get(shard)
            if engine is not None:
                self._engines.move_to_end(shard)
                return engine
            conn_string = self.conn_string_for_shard(shard)
            engine = _pooled(conn_string) if shard == INDEX_SHARD else _unpooled(conn_string)
            self._engines[shard] = engine
            runs = [s for s in self._engines if s != INDEX_SHARD]
            for old in runs[: max(0, len(runs) - RUN_ENGINES)]:
                self._engines.pop(old).dispose()
            return engine

    def _dispose_engines(self) -> None:
        with self._engines_lock:
            engines, self._engines = list(self._engines.values()), OrderedDict()
        for engine in engines:
            engine.dispose()

    @contextmanager
    def _connect(self, shard: str) -> Iterator[Connection]:
        # as SqliteEventLogStorage._connect, with the shard's engine kept
        with self._db_lock:
            engine = self._engine(shard)
            if shard not in self._initialized_dbs:
                self._initdb(engine)
                self._initialized_dbs.add(shard)
            with _transaction(engine) as conn:
                yield conn

    def has_table(self, table_name: str) -> bool:
        engine = self._engine(INDEX_SHARD)  # Dagster's own makes an engine per call
        with engine.connect() as conn:
            return bool(engine.dialect.has_table(conn, table_name))

    def wipe(self) -> None:
        self._dispose_engines()  # the run files are deleted: no connection stays on them
        super().wipe()

    def dispose(self) -> None:
        super().dispose()
        self._dispose_engines()


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
