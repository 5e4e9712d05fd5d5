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

from sqlalchemy.engine import Connection, Dialect
from sqlalchemy.sql import ClauseElement

__all__ = ["RawStatement"]

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
        names = tuple(compiled.positiontup or ())
        processors = tuple(
            compiled.binds[name].type.dialect_impl(dialect).bind_processor(dialect)
            for name in names
        )
        known = (compiled.string, names, processors)
        with self._lock:
            self._compiled[id(dialect)] = known
        return known

    def sql(self, dialect: Dialect) -> str:
        """The statement's SQL text as sent to the driver."""
        return self._for(dialect)[0]

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
