"""The local instance's SQLite event log: Dagster's files and rows, written with less per event.

Dagster's run-sharded SQLite event log (``history/runs/<run id>.db`` per run, the cross-run
``index.db``) writes each event on its own: a new connection to the run's file (closed again,
which checkpoints its write-ahead log: that is how the Dagster UI sees a live run change),
then one to three more transactions on the index, each statement built anew, the event
serialised up to three times. Profiled on the demo's ingest, that was ~70 % of a run
process's CPU. :class:`PooledSqliteEventLogStorage` writes the same rows into the same files:

* a live run's file keeps one connection in the process that runs it (from its start
  event), closed with the run's last event (success,
  failure, cancellation) or when more than :data:`RUN_WRITERS` runs are live; each write is
  checkpointed (:data:`CHECKPOINT`), so the file changes after every write as before;
* an event's (or a batch's, :meth:`~PooledSqliteEventLogStorage.store_event_batch`) index
  rows are written in one transaction: the mirrored event, its asset tags and asset row,
  its asset check execution row;
* an event is serialised once for its rows (the check execution row and a
  materialisation's asset row reuse it), and the statements that run per event are
  SQLAlchemy's, compiled once and run on the SQLite driver's cursor
  (:mod:`pipelines.dagster_statements`: the same SQL and bound values, without
  SQLAlchemy's ~0.25 ms of Python per statement);
* the ids of the partition materialisations a live run of this process stored are kept
  until its end (:meth:`~PooledSqliteEventLogStorage.stored_materializations`): the run's
  checks link their evaluations to them without reading the events back;
* the schema facts Dagster asks per event (a table or column exists) are remembered once
  true (tables are added by migrations, never dropped while a process runs);
* a new run's file is created as Dagster creates it (its tables, WAL, the alembic revision
  stamped), with the migration scripts read once per process rather than once per run
  (alembic's ``stamp`` command loads them all each time);
* Dagster's batched event writes are switched on for the process (:data:`BATCH_SIZE_ENV`,
  unless already set): a run's planned events and the materialisations Dagster derives from
  a step's output (``add_asset_metadata`` per partition) then reach
  :meth:`~PooledSqliteEventLogStorage.store_event_batch` together (one write to the run's
  file, one index transaction) instead of one by one. Dagster's own storages only loop over
  a batch, so this is set here, where batches are written as one.

The cross-run index keeps its connections in a small pool; a run's file is read over
connections closed after use, as before. Dagster's own classes read everything back
(tests/pipelines/test_dagster_storage.py). The write semantics per event are Dagster
1.13's: same rows, same values; a batch stores its run rows, then its index rows.
"""

from __future__ import annotations

import functools
import os
import sqlite3
import threading
from collections import OrderedDict
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any, cast

import sqlalchemy as sa
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from dagster._core.errors import DagsterInvariantViolationError
from dagster._core.events import (
    ASSET_CHECK_EVENTS,
    ASSET_EVENTS,
    EVENT_TYPE_TO_PIPELINE_RUN_STATUS,
    DagsterEventType,
)
from dagster._core.events.log import EventLogEntry
from dagster._core.storage.asset_check_execution_record import AssetCheckExecutionRecordStatus
from dagster._core.storage.event_log import SqliteEventLogStorage
from dagster._core.storage.event_log.schema import (
    AssetKeyTable,
    SqlEventLogStorageMetadata,
)
from dagster._core.storage.event_log.sqlite import sqlite_event_log
from dagster._core.storage.sql import get_alembic_config
from dagster._time import datetime_from_timestamp
from dagster_shared.serdes import serialize_value
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.exc import IntegrityError
from sqlalchemy.pool import NullPool, QueuePool

from pipelines.dagster_statements import (
    DYNAMIC_PARTITIONS,
    HAS_DYNAMIC_PARTITION,
    INSERT_CHECK,
    INSERT_EVENT,
    INSERT_PLANNED_CHECK,
    UPDATE_CHECK,
    asset_statements,
)

__all__ = [
    "BATCH_SIZE",
    "BATCH_SIZE_ENV",
    "BUSY_TIMEOUT_SECONDS",
    "CHECKPOINT",
    "RUN_ENGINES",
    "RUN_WRITERS",
    "PooledSqliteEventLogStorage",
    "pooled_engine",
]

BUSY_TIMEOUT_SECONDS = 30
"""How long a statement waits for another process's write lock (Dagster's own value)."""

RUN_ENGINES = 32
"""Engines of run event databases kept per process (the least recently used is dropped)."""

RUN_WRITERS = 8
"""Live runs whose event file this process keeps a connection open to (least recent closed)."""

CHECKPOINT = "PRAGMA wal_checkpoint(PASSIVE)"
"""Run after each write over a kept connection: it copies the write into the run's file,
which is what the Dagster UI watches (the close of the last connection did that before)."""

BATCH_SIZE_ENV = "DAGSTER_EVENT_BATCH_SIZE"
"""Dagster's switch for batched event writes (read per event; 0 or unset: one by one)."""

BATCH_SIZE = 1000
"""Events per batch: a range run's planned events (26 weeks x 4 assets + 8 checks) in one."""

INDEX_SHARD = "index"
"""The event log's cross-run shard (Dagster's name for ``index.db``)."""

_RUN_ENDS = frozenset(
    {DagsterEventType.RUN_SUCCESS, DagsterEventType.RUN_FAILURE, DagsterEventType.RUN_CANCELED}
)
"""A run's last events: its file's kept connection is closed after writing one."""

_MIRRORED = ASSET_EVENTS | ASSET_CHECK_EVENTS | set(EVENT_TYPE_TO_PIPELINE_RUN_STATUS)
"""Event types Dagster's SQLite event log also writes into the index shard."""


def pooled_engine(conn_string: str) -> Engine:
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


@functools.cache
def _migration_scripts() -> ScriptDirectory:
    """Dagster's event log migration scripts (the SQLite event log's alembic directory)."""
    return ScriptDirectory.from_config(get_alembic_config(sqlite_event_log.__file__))


def event_record_json(event_json: str, storage_id: int) -> str:
    """``serialize_value(EventLogRecord(storage_id, entry))`` given ``serialize_value(entry)``.

    Dagster's serdes writes a record's fields in sorted order, ``json.dumps``' separators.
    """
    return (
        f'{{"__class__": "EventLogRecord", "event_log_entry": {event_json},'
        f' "storage_id": {int(storage_id)}}}'
    )


def _naive_utc(timestamp: float) -> datetime:
    return datetime.fromtimestamp(timestamp, UTC).replace(tzinfo=None)


class PooledSqliteEventLogStorage(SqliteEventLogStorage):
    """Dagster's run-sharded SQLite event log with the write path described above."""

    def __init__(self, base_dir: str, inst_data: Any = None) -> None:
        self._engines: OrderedDict[str, Engine] = OrderedDict()
        self._engines_lock = threading.Lock()
        self._writers: OrderedDict[str, Connection] = OrderedDict()
        self._known: set[str] = set()
        self._materialized: OrderedDict[tuple[str, str], dict[str, tuple[int, float]]] = (
            OrderedDict()
        )
        self._batch = threading.local()
        super().__init__(base_dir, inst_data)
        os.environ.setdefault(BATCH_SIZE_ENV, str(BATCH_SIZE))

    # ------------------------------------------------------------------ engines

    def _engine(self, shard: str) -> Engine:
        with self._engines_lock:
            engine = self._engines.get(shard)
            if engine is not None:
                self._engines.move_to_end(shard)
                return engine
            conn_string = self.conn_string_for_shard(shard)
            engine = pooled_engine(conn_string) if shard == INDEX_SHARD else _unpooled(conn_string)
            self._engines[shard] = engine
            runs = [s for s in self._engines if s != INDEX_SHARD]
            for old in runs[: max(0, len(runs) - RUN_ENGINES)]:
                self._engines.pop(old).dispose()
            return engine

    def _dispose_engines(self) -> None:
        with self._db_lock:
            writers, self._writers = list(self._writers.values()), OrderedDict()
        for conn in writers:
            conn.close()
        with self._engines_lock:
            engines, self._engines = list(self._engines.values()), OrderedDict()
        for engine in engines:
            engine.dispose()

    @contextmanager
    def _connect(self, shard: str) -> Iterator[Connection]:
        # as SqliteEventLogStorage._connect, with the shard's engine kept
        held = getattr(self._batch, "index", None)
        if held is not None and shard == INDEX_SHARD:
            yield held  # inside a batch's index transaction (this thread's)
            return
        with self._db_lock:
            engine = self._engine(shard)
            if shard not in self._initialized_dbs:
                self._initdb(engine)
                self._initialized_dbs.add(shard)
            with _transaction(engine) as conn:
                yield conn

    def has_table(self, table_name: str) -> bool:
        if table_name in self._known:
            return True
        engine = self._engine(INDEX_SHARD)  # Dagster's own makes an engine per call
        with engine.connect() as conn:
            found = bool(engine.dialect.has_table(conn, table_name))
        if found:
            self._known.add(table_name)
        return found

    def _has_asset_key_col_on_connection(self, conn: Connection, column_name: str) -> bool:
        known = f"{AssetKeyTable.name}.{column_name}"
        if known in self._known:
            return True
        found = super()._has_asset_key_col_on_connection(conn, column_name)
        if found:
            self._known.add(known)
        return found

    # ------------------------------------------------------------------ dynamic partitions
    # Dagster's reads (asked per partition key while a run validates its range), on the
    # driver's cursor

    def get_dynamic_partitions(self, partitions_def_name: str) -> Sequence[str]:
        self._check_partitions_table()
        with self.index_connection() as conn:
            rows = DYNAMIC_PARTITIONS.execute(conn, {"name": partitions_def_name}).fetchall()
        return [str(r[0]) for r in rows]

    def has_dynamic_partition(self, partitions_def_name: str, partition_key: str) -> bool:
        self._check_partitions_table()
        values = {"name": partitions_def_name, "key": partition_key}
        with self.index_connection() as conn:
            return HAS_DYNAMIC_PARTITION.execute(conn, values).fetchone() is not None

    def wipe(self) -> None:
        self._dispose_engines()  # the run files are deleted: no connection stays on them
        super().wipe()

    def dispose(self) -> None:
        super().dispose()
        self._dispose_engines()

    def _initdb(self, engine: Engine, for_index_shard: bool = False) -> None:
        """Dagster's ``_initdb`` for a run's file, with the migration scripts read once."""
        if for_index_shard:
            super()._initdb(engine, for_index_shard)
            return
        try:
            with engine.connect() as conn:
                context = MigrationContext.configure(conn)
                if context.get_current_revision():
                    return  # created before (Dagster's test: a revision is stamped)
                SqlEventLogStorageMetadata.create_all(conn)
                conn.execute(sa.text("PRAGMA journal_mode=WAL;"))
                context.stamp(_migration_scripts(), "head")
                conn.commit()
        except (sa.exc.DatabaseError, sqlite3.DatabaseError):
            super()._initdb(engine)  # e.g. another process creating it: Dagster's retries

    # ------------------------------------------------------------------ writes

    def store_event(self, event: EventLogEntry) -> None:
        self.store_event_batch([event])

    def store_event_batch(self, events: Sequence[EventLogEntry]) -> None:
        """Store events in order: their run files' rows, then their index rows in one transaction.

        When a batch's index rows fail after its run rows were committed, Dagster stores the
        batch again event by event (``handle_new_event``'s fallback): those retries write only
        the index rows, so the run's file does not hold the batch twice. The batch's events
        are remembered (this thread, by identity, the objects held) until the next batch.
        """
        written = self._run_rows_written()
        if len(events) > 1:
            written.clear()
        rows = [self._event_to_row(e) for e in events]
        by_run: dict[str, list[dict[str, Any]]] = {}
        ends: set[str] = set()
        starts: set[str] = set()
        for event, row in zip(events, rows, strict=True):
            if event.is_dagster_event and event.dagster_event_type in _RUN_ENDS:
                ends.add(event.run_id)
            elif event.is_dagster_event and event.dagster_event_type == DagsterEventType.RUN_START:
                starts.add(event.run_id)
            if written.pop(id(event), None) is event:
                continue  # a fallback retry: its run row is in the run's file already
            by_run.setdefault(event.run_id, []).append(row)
        for run_id, run_rows in by_run.items():
            self._write_run_rows(run_id, run_rows, run_id in ends, run_id in starts)
        for run_id in ends - by_run.keys():
            self._close_writer(run_id)
        mirrored = [
            (e, r)
            for e, r in zip(events, rows, strict=True)
            if e.is_dagster_event and e.dagster_event_type in _MIRRORED
        ]
        if not mirrored:
            return
        try:
            self._write_index_rows(mirrored)
        except Exception:
            if len(events) > 1:
                written.update({id(e): e for e in events})
            raise

    def _run_rows_written(self) -> dict[int, EventLogEntry]:
        """This thread's events of a failed batch whose run rows are committed (by id)."""
        written: dict[int, EventLogEntry] | None = getattr(self._batch, "written", None)
        if written is None:
            written = self._batch.written = {}
        return written

    def _close_writer(self, run_id: str) -> None:
        """Close a run's kept connection (its last event was written)."""
        with self._db_lock:
            conn = self._writers.pop(run_id, None)
            self._forget(run_id)
        if conn is not None:
            conn.close()

    def _write_run_rows(
        self, run_id: str, rows: list[dict[str, Any]], ends: bool, starts: bool
    ) -> None:
        """Insert rows into a run's file, then checkpoint it.

        The connection is kept from the run's start (``starts``: this process runs it) until
        its last event; a process that only writes some of a run's events (the daemon's
        queue and launch events, the webserver's) closes it after each write, as Dagster
        does, so it holds no run file (and no write-ahead log beside it) open.
        """
        with self._db_lock:
            if not (starts or run_id in self._writers):
                ends = True  # not this process's live run: do not keep the connection
            conn = self._writer(run_id)
            try:
                with conn.begin():
                    INSERT_EVENT.executemany(conn, rows)
                conn.connection.driver_connection.execute(CHECKPOINT)  # type: ignore[union-attr]
            except BaseException:
                ends = True  # a failed connection is not kept
                raise
            finally:
                if ends:
                    self._writers.pop(run_id, None)
                    self._forget(run_id)
                    conn.close()

    def _writer(self, run_id: str) -> Connection:
        """The kept connection to a live run's file (under ``_db_lock``)."""
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

    def _write_index_rows(self, mirrored: list[tuple[EventLogEntry, dict[str, Any]]]) -> None:
        """The index rows of events, in one transaction (Dagster's rows, in Dagster's order)."""
        stored: list[tuple[EventLogEntry, dict[str, Any], int]] = []
        with self._connect(INDEX_SHARD) as conn:
            self._batch.index = conn
            self._batch.serialized = {id(e): r["event"] for e, r in mirrored}
            try:
                for event, row in mirrored:
                    key = INSERT_EVENT.execute(conn, row).lastrowid
                    if key is None:
                        raise DagsterInvariantViolationError("An event was stored without an id.")
                    event_id = int(key)
                    kind = event.dagster_event_type
                    if kind == DagsterEventType.ASSET_MATERIALIZATION and row["partition"]:
                        stored.append((event, row, event_id))
                    if kind in ASSET_EVENTS:
                        self._store_asset_event_tags(conn, [event], [event_id])
                        self._store_asset_event(conn, event, event_id)
                    elif kind in ASSET_CHECK_EVENTS:
                        self.store_asset_check_event(event, event_id)
            finally:
                self._batch.index = None
                self._batch.serialized = None
        self._remember_materializations(stored)  # committed: their ids are the stored ones

    def _forget(self, run_id: str) -> None:
        """Drop what is kept for a run that ended here (under ``_db_lock``)."""
        for key in [k for k in self._materialized if k[0] == run_id]:
            del self._materialized[key]

    def _remember_materializations(
        self, stored: list[tuple[EventLogEntry, dict[str, Any], int]]
    ) -> None:
        """Keep the ids of partition materialisations this process stored for a live run."""
        if not stored:
            return
        with self._db_lock:
            for event, row, event_id in stored:
                if event.run_id not in self._writers:
                    continue  # not a run this process runs (or it ended): nothing to keep
                key = (event.run_id, row["asset_key"])
                by_partition = self._materialized.setdefault(key, {})
                self._materialized.move_to_end(key)
                by_partition[row["partition"]] = (event_id, event.timestamp)
            while len(self._materialized) > 4 * RUN_WRITERS:
                self._materialized.popitem(last=False)

    def stored_materializations(self, run_id: str, asset_key: str) -> dict[str, tuple[int, float]]:
        """Partition -> (storage id, timestamp) of the newest materialisation of ``asset_key``
        (``AssetKey.to_string()``) that this process stored for its live run ``run_id``.

        What a check of the run links its evaluation to, without reading the events back;
        empty for a run this process does not run or that has ended (ask the storage then).
        """
        with self._db_lock:
            return dict(self._materialized.get((run_id, asset_key), {}))

    def _serialized(self, event: EventLogEntry) -> str:
        """The event's JSON as its own row stored it (serialised once per batch)."""
        known = getattr(self._batch, "serialized", None) or {}
        return known.get(id(event)) or serialize_value(event)

    def _store_asset_event(self, conn: Connection, event: EventLogEntry, event_id: int) -> None:
        # Dagster's: insert the asset's row, or update it when it exists; here the update
        # first (the row exists after an asset's first event) with bound parameters
        dagster_event = event.dagster_event
        if not (dagster_event and dagster_event.asset_key):
            return
        values = self._get_asset_entry_values(
            event, event_id, self._has_asset_key_index_cols_on_connection(conn)
        )
        if not values:
            return
        key = dagster_event.asset_key.to_string()
        update, insert = asset_statements(tuple(values))
        if update.execute(conn, {**values, "w_asset_key": key}).rowcount:
            return
        try:
            insert.execute(conn, {"asset_key": key, **values})
        except (IntegrityError, sqlite3.IntegrityError):  # another process inserted it meanwhile
            update.execute(conn, {**values, "w_asset_key": key})

    def _get_asset_entry_values(
        self, event: EventLogEntry, event_id: int, has_asset_key_index_cols: bool
    ) -> dict[str, Any]:
        # Dagster's, with a materialisation's record written around the event's JSON that its
        # own row stored (Dagster serialises the event again inside the record)
        dagster_event = event.dagster_event
        known = getattr(self._batch, "serialized", None) or {}
        serialized = known.get(id(event))
        if dagster_event is None or not dagster_event.is_step_materialization or not serialized:
            return super()._get_asset_entry_values(event, event_id, has_asset_key_index_cols)
        values: dict[str, Any] = {
            "last_materialization": event_record_json(serialized, event_id),
            "last_run_id": event.run_id,
        }
        if has_asset_key_index_cols:
            values["last_materialization_timestamp"] = datetime_from_timestamp(event.timestamp)
        return values

    def _store_asset_check_evaluation_planned(
        self, event: EventLogEntry, event_id: int | None
    ) -> None:
        # Dagster's, with the event serialised once for its rows (one a planned partition)
        planned = cast(Any, event.get_dagster_event().event_specific_data)
        subset = planned.partitions_subset
        keys = subset.get_partition_keys() if subset else [None]
        serialized = self._serialized(event)
        common = {
            "asset_key": planned.asset_key.to_string(),
            "check_name": planned.check_name,
            "run_id": event.run_id,
            "execution_status": AssetCheckExecutionRecordStatus.PLANNED.value,
            "evaluation_event": serialized,
            "evaluation_event_timestamp": self._event_insert_timestamp(event),
            "evaluation_event_storage_id": event_id,
        }
        with self.index_connection() as conn:
            INSERT_PLANNED_CHECK.executemany(conn, [{**common, "partition": key} for key in keys])

    def _update_asset_check_evaluation(self, event: EventLogEntry, event_id: int | None) -> None:
        # Dagster's: update the row the check's planned event made, or insert one
        evaluation = cast(Any, event.get_dagster_event().event_specific_data)
        target = evaluation.target_materialization_data
        values = {
            "execution_status": (
                AssetCheckExecutionRecordStatus.SUCCEEDED.value
                if evaluation.passed
                else AssetCheckExecutionRecordStatus.FAILED.value
            ),
            "evaluation_event": self._serialized(event),
            "evaluation_event_timestamp": _naive_utc(event.timestamp),
            "evaluation_event_storage_id": event_id,
            "materialization_event_storage_id": target.storage_id if target else None,
            "partition": evaluation.partition,
        }
        where = {
            "w_asset_key": evaluation.asset_key.to_string(),
            "w_check_name": evaluation.check_name,
            "w_run_id": event.run_id,
        }
        partitioned = evaluation.partition is not None
        if partitioned:
            where["w_partition"] = evaluation.partition
        with self.index_connection() as conn:
            updated = UPDATE_CHECK[partitioned].execute(conn, {**values, **where}).rowcount
            if updated == 0:
                row = {
                    "asset_key": where["w_asset_key"],
                    "check_name": evaluation.check_name,
                    "run_id": event.run_id,
                    **values,
                }
                updated = INSERT_CHECK.execute(conn, row).rowcount
        if updated > 1:
            raise DagsterInvariantViolationError(
                f"Updated {updated} rows for asset check evaluation {evaluation.asset_check_key}"
                " as a result of duplicate AssetCheckPlanned events."
            )
