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
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import sqlalchemy as sa
from dagster._core.events import (
    ASSET_CHECK_EVENTS,
    ASSET_EVENTS,
    EVENT_TYPE_TO_PIPELINE_RUN_STATUS,
    DagsterEventType,
)
from dagster._core.events.log import EventLogEntry
from dagster._core.storage.event_log import SqliteEventLogStorage
from dagster._core.storage.event_log.schema import SqlEventLogStorageTable
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

_RUN_ENDS = frozenset(
    {DagsterEventType.RUN_SUCCESS, DagsterEventType.RUN_FAILURE, DagsterEventType.RUN_CANCELED}
)
"""A run's last events: its file's kept connection is closed after writing one."""

RUN_WRITERS = 8
"""Live runs whose event file this process keeps a connection open to (least recent closed)."""

CHECKPOINT = "PRAGMA wal_checkpoint(PASSIVE)"
"""Run after each write to a kept run file: copies the write into the file itself, which is
what the Dagster UI watches (a closing last connection did that before)."""

_MIRRORED = ASSET_EVENTS | ASSET_CHECK_EVENTS | set(EVENT_TYPE_TO_PIPELINE_RUN_STATUS)
"""Event types the SQLite event log also writes into the index shard."""


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
        self._tables: set[str] = set()
        self._held = threading.local()
        self._writers: OrderedDict[str, Connection] = OrderedDict()
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
        held = getattr(self._held, "index", None)
        if held is not None and shard == INDEX_SHARD:
            yield held  # inside store_event_batch's index transaction (same thread)
            return
        with self._db_lock:
            engine = self._engine(shard)
            if shard not in self._initialized_dbs:
                self._initdb(engine)
                self._initialized_dbs.add(shard)
            with _transaction(engine) as conn:
                yield conn

    def has_table(self, table_name: str) -> bool:
        if table_name in self._tables:  # tables are never dropped while a process runs
            return True
        engine = self._engine(INDEX_SHARD)  # Dagster's own makes an engine per call
        with engine.connect() as conn:
            found = bool(engine.dialect.has_table(conn, table_name))
        if found:
            self._tables.add(table_name)
        return found

    def _has_asset_key_col_on_connection(self, conn: Connection, column_name: str) -> bool:
        key = f"asset_keys.{column_name}"
        if key not in self._tables:
            if not super()._has_asset_key_col_on_connection(conn, column_name):
                return False
            self._tables.add(key)
        return True

    def store_event(self, event: EventLogEntry) -> None:
        self.store_event_batch([event])

    def store_event_batch(self, events: Sequence[EventLogEntry]) -> None:
        rows = [self._event_to_row(e) for e in events]  # each event serialised once
        by_run: dict[str, list[dict[str, Any]]] = {}
        ends: set[str] = set()
        for event, row in zip(events, rows, strict=True):
            by_run.setdefault(event.run_id, []).append(row)
            if event.is_dagster_event and event.dagster_event_type in _RUN_ENDS:
                ends.add(event.run_id)
        for run_id, run_rows in by_run.items():
            self._write_run_rows(run_id, run_rows, run_id in ends)
        mirrored = [
            (e, r)
            for e, r in zip(events, rows, strict=True)
            if e.is_dagster_event and e.dagster_event_type in _MIRRORED
        ]
        if not mirrored:
            return
        with self._connect(INDEX_SHARD) as conn:
            self._held.index = conn
            try:
                for event, row in mirrored:
                    kind = event.dagster_event_type
                    result = conn.execute(SqlEventLogStorageTable.insert(), row)
                    event_id = result.inserted_primary_key[0]
                    if kind in ASSET_EVENTS:
                        self._store_asset_event_tags(conn, [event], [event_id])
                        self._store_asset_event(conn, event, event_id)
                    elif kind in ASSET_CHECK_EVENTS:
                        self.store_asset_check_event(event, event_id)
            finally:
                self._held.index = None

    def _write_run_rows(self, run_id: str, rows: list[dict[str, Any]], ends: bool) -> None:
        """Insert rows into a live run's file over its kept connection, checkpointed."""
        with self._db_lock:
            conn = self._writer(run_id)
            try:
                with conn.begin():
                    conn.execute(SqlEventLogStorageTable.insert(), rows)
                conn.connection.driver_connection.execute(CHECKPOINT)  # type: ignore[union-attr]
            except BaseException:
                ends = True
                raise
            finally:
                if ends:
                    self._writers.pop(run_id, None)
                    conn.close()

    def _writer(self, run_id: str) -> Connection:
        """The kept connection of a live run's file (under ``_db_lock``)."""
        conn = self._writers.get(run_id)
        if conn is not None:
            self._writers.move_to_end(run_id)
            return conn
        engine = self._engine(run_id)
        if run_id not in self._initialized_dbs:
            self._initdb(engine)
            self._initialized_dbs.add(run_id)
        conn = engine.connect()
        self._writers[run_id] = conn
        while len(self._writers) > RUN_WRITERS:
            self._writers.popitem(last=False)[1].close()
        return conn

    def _close_writers(self) -> None:
        with self._db_lock:
            writers, self._writers = list(self._writers.values()), OrderedDict()
        for conn in writers:
            conn.close()

    def wipe(self) -> None:
        self._close_writers()
        self._dispose_engines()  # the run files are deleted: no connection stays on them
        super().wipe()

    def dispose(self) -> None:
        super().dispose()
        self._close_writers()
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
