"""The connection a store's group commit writes through, kept open between batches.

A batch (:mod:`store.memory.group`) used to check a connection out of the pool and
back in: SQLAlchemy's checkout, its reset-on-return rollback and the connection's
setup were a few hundred microseconds of interpreter time a batch, paid while the
other writers waited. Only the group commit's leader writes, one batch at a time, so
one connection serves every batch of the process: it is opened on the first write,
kept idle (no transaction open) between batches, and replaced when a batch fails
outside its jobs' savepoints (its state is then unknown), when it was invalidated
(a lost server connection) or when the process has forked (a child never writes
through its parent's connection: it opens its own and leaves the inherited one
alone, unclosed, as SQLAlchemy's pool does). SQLite keeps it; PostgreSQL still takes
a connection of the pool for each batch, whose pre-ping on checkout replaces one the
server dropped while it was idle (a kept connection would fail that batch instead).
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager

import sqlalchemy as sa

from store.memory.prepared import Prepared, RawTx

__all__ = ["BatchConnection"]

_INHERITED: list[sa.Connection] = []
"""Connections a forked child took over from its parent: kept referenced, never closed
(closing a SQLite connection opened by another process would drop that process's locks)."""


class BatchConnection:
    """One engine connection for the group commit's batches (see the module docstring)."""

    def __init__(
        self,
        engine: sa.Engine,
        write_tx: Callable[[sa.Connection | None], AbstractContextManager[sa.Connection]],
        prepared: Prepared,
        *,
        keep: bool,
    ) -> None:
        """``write_tx(conn)``: the backend's write transaction on a given connection, or on
        one of the pool when ``conn`` is None. ``keep``: batches run on the kept connection
        (False: each batch checks one out of the pool, as a server backend's pre-ping on
        checkout replaces a connection the server dropped)."""
        self._engine = engine
        self.keep = keep
        self._write_tx = write_tx
        self._prepared = prepared
        self._conn: sa.Connection | None = None
        self._pid = -1
        self._engine_pid = os.getpid()
        """The process the engine's pool belongs to (a forked child starts a pool of its own)."""
        self._guard = threading.Lock()

    @contextlib.contextmanager
    def transaction(self) -> Iterator[RawTx]:
        """A write transaction on the kept connection with the prepared statements on its
        cursor (one group-commit batch); the connection is replaced if it fails."""
        try:
            with self._write_tx(self.get() if self.keep else None) as conn:
                tx = RawTx(conn, self._prepared)
                try:
                    yield tx
                finally:
                    tx.close()
        except BaseException:
            self.discard()
            raise

    def get(self) -> sa.Connection:
        """The open connection (opened now if there is none usable)."""
        conn = self._conn
        if conn is not None and self._pid == os.getpid() and not conn.invalidated:
            return conn
        with self._guard:
            if self._conn is not None and self._pid != os.getpid():
                _INHERITED.append(self._conn)
                self._conn = None
            if self._engine_pid != os.getpid():
                # a forked child: the inherited pool holds the parent's idle connections;
                # a new pool, without closing them (SQLAlchemy's documented step after a fork)
                self._engine.dispose(close=False)
                self._engine_pid = os.getpid()
            if self._conn is not None:  # invalidated: give it back to the pool to discard
                self._conn.close()
            self._conn, self._pid = self._engine.connect(), os.getpid()
            return self._conn

    def discard(self) -> None:
        """Close the connection (after a batch failed outside its savepoints); the next
        batch opens a new one."""
        with self._guard:
            conn, self._conn = self._conn, None
            if conn is not None:
                if self._pid == os.getpid():
                    conn.close()
                else:  # the parent's: kept from the collector, never closed here
                    _INHERITED.append(conn)

    def close(self) -> None:
        """Close the connection (the store is closing)."""
        self.discard()
