"""Dagster's event-log statements, run on the SQLite driver's own cursor.

SQLAlchemy Core spends ~0.2–0.3 ms of Python on each small statement it executes (an
execution context, its parameters processed by name, a result object): with a Dagster
event costing three to four statements (its run file's row, its index row, its asset or
check execution row), that was a third of an ingest's event-log CPU. A
:class:`RawStatement` is the same SQLAlchemy statement compiled once per dialect (the
same SQL text SQLAlchemy sends), its parameters bound in order by each bind's own type
processor (a ``DATETIME`` becomes SQLAlchemy's text form, as before), executed on the
connection's DBAPI connection inside the caller's SQLAlchemy transaction (``with
conn.begin()``: SQLAlchemy commits or rolls it back as before).

Only for SQLite's driver (``sqlite3``, ``qmark`` parameters): the local instance's
storage (:mod:`pipelines.dagster_event_log`). Deployments on PostgreSQL use Dagster's
own storage classes.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import sqlalchemy as sa
from dagster._core.storage.event_log.schema import (
    AssetCheckExecutionsTable,
    AssetKeyTable,
    DynamicPartitionsTable,
    SqlEventLogStorageTable,
)
from sqlalchemy.engine import Connection, Dialect
from sqlalchemy.sql import ClauseElement
from sqlalchemy.sql.compiler import SQLCompiler

__all__ = [
    "DYNAMIC_PARTITIONS",
    "HAS_DYNAMIC_PARTITION",
    "INSERT_CHECK",
    "INSERT_EVENT",
    "INSERT_PLANNED_CHECK",
    "UPDATE_CHECK",
    "RawStatement",
    "asset_statements",
]

Processor = Callable[[Any], Any] | None


class RawStatement:
    """A SQLAlchemy Core statement whose parameters are the mapping keys ``keys``."""

    def __init__(self, statement: ClauseElement, keys: Sequence[str]) -> None:
        self._statement = statement
        self._keys = list(keys)
        self._compiled: dict[int, tuple[str, tuple[str, ...], tuple[Processor, ...]]] = {}
        self._lock = threading.Lock()

    def _for(self, dialect: Dialect) -> tuple[str, tuple[str, ...], tuple[Processor, ...]]:
        known = self._compiled.get(id(dialect))
        if known is not None:
            return known
        if dialect.name != "sqlite" or dialect.paramstyle != "qmark":
            raise ValueError(f"RawStatement runs on SQLite's qmark driver, not {dialect.name}")
        compiled = self._statement.compile(dialect=dialect, column_keys=self._keys)
        assert isinstance(compiled, SQLCompiler)  # a Core statement's compiled form
        names = tuple(compiled.positiontup or ())
        processors = tuple(
            compiled.binds[name].type.dialect_impl(dialect).bind_processor(dialect)
            for name in names
        )
        known = (compiled.string, names, processors)
        with self._lock:
            self._compiled[id(dialect)] = known
        return known

    def params(self, dialect: Dialect, values: Mapping[str, Any]) -> tuple[Any, ...]:
        """``values`` in the statement's parameter order, each as SQLAlchemy would bind it."""
        _, names, processors = self._for(dialect)
        return tuple(
            value if proc is None else proc(value)
            for proc, value in zip(processors, (values[n] for n in names), strict=True)
        )

    def execute(self, conn: Connection, values: Mapping[str, Any]) -> Any:
        """Run once with ``values``; returns the driver's cursor (``lastrowid``, ``rowcount``)."""
        sql, _, _ = self._for(conn.dialect)
        return _driver(conn).execute(sql, self.params(conn.dialect, values))

    def executemany(self, conn: Connection, rows: Iterable[Mapping[str, Any]]) -> None:
        """Run once per row of ``rows``."""
        sql, _, _ = self._for(conn.dialect)
        _driver(conn).executemany(sql, [self.params(conn.dialect, r) for r in rows])


def _driver(conn: Connection) -> Any:
    """The DBAPI (``sqlite3``) connection under a SQLAlchemy connection."""
    return conn.connection.driver_connection


# ---------------------------------------------------------------- the event log's statements

_EVENT_COLUMNS = ("run_id", "event", "dagster_event_type", "timestamp", "step_key", "asset_key")
INSERT_EVENT = RawStatement(SqlEventLogStorageTable.insert(), (*_EVENT_COLUMNS, "partition"))
_INSERT_ASSET = AssetKeyTable.insert()
_CHECK_COLUMNS = (
    "asset_key",
    "check_name",
    "partition",
    "run_id",
    "execution_status",
    "evaluation_event",
    "evaluation_event_timestamp",
    "evaluation_event_storage_id",
)
INSERT_PLANNED_CHECK = RawStatement(AssetCheckExecutionsTable.insert(), _CHECK_COLUMNS)
INSERT_CHECK = RawStatement(
    AssetCheckExecutionsTable.insert(), (*_CHECK_COLUMNS, "materialization_event_storage_id")
)


def _check_update(partitioned: bool) -> Any:
    """UPDATE of the execution row a check's planned event made (Dagster's WHERE clause)."""
    t = AssetCheckExecutionsTable.c
    where = [
        t.asset_key == sa.bindparam("w_asset_key"),
        t.check_name == sa.bindparam("w_check_name"),
        t.run_id == sa.bindparam("w_run_id"),
        t.partition == sa.bindparam("w_partition") if partitioned else t.partition.is_(None),
    ]
    return AssetCheckExecutionsTable.update().where(sa.and_(*where))


_CHECK_VALUES = (
    "execution_status",
    "evaluation_event",
    "evaluation_event_timestamp",
    "evaluation_event_storage_id",
    "materialization_event_storage_id",
    "partition",
)
UPDATE_CHECK = {
    True: RawStatement(
        _check_update(True),
        (*_CHECK_VALUES, "w_asset_key", "w_check_name", "w_run_id", "w_partition"),
    ),
    False: RawStatement(
        _check_update(False), (*_CHECK_VALUES, "w_asset_key", "w_check_name", "w_run_id")
    ),
}
_UPDATE_ASSET = AssetKeyTable.update().where(
    AssetKeyTable.c.asset_key == sa.bindparam("w_asset_key")
)
_ASSET_STATEMENTS: dict[tuple[str, ...], tuple[RawStatement, RawStatement]] = {}
_PARTITIONS = DynamicPartitionsTable.c
DYNAMIC_PARTITIONS = RawStatement(
    sa.select(_PARTITIONS.partition)
    .where(_PARTITIONS.partitions_def_name == sa.bindparam("name"))
    .order_by(_PARTITIONS.id),
    ("name",),
)
HAS_DYNAMIC_PARTITION = RawStatement(
    sa.select(_PARTITIONS.id).where(
        sa.and_(
            _PARTITIONS.partitions_def_name == sa.bindparam("name"),
            _PARTITIONS.partition == sa.bindparam("key"),
        )
    ),
    ("name", "key"),
)


def asset_statements(keys: tuple[str, ...]) -> tuple[RawStatement, RawStatement]:
    """The asset row's UPDATE and INSERT for the value columns ``keys`` (a few shapes)."""
    known = _ASSET_STATEMENTS.get(keys)
    if known is None:
        known = _ASSET_STATEMENTS[keys] = (
            RawStatement(_UPDATE_ASSET, (*keys, "w_asset_key")),
            RawStatement(_INSERT_ASSET, ("asset_key", *keys)),
        )
    return known
