"""The embedded backend: one SQLite file (WAL), FTS5 full text, R*Tree place index.

Writers are serialised by ``BEGIN IMMEDIATE`` (the database's write lock, taken
at the start of every write transaction, waited for up to ``busy_timeout``;
one process's concurrent writes share one such transaction, see
:mod:`store.memory.group`), so
a read-check-write never loses an update and history seqs never fork; readers
never block (WAL snapshots). ``synchronous=FULL`` by default: a committed write
survives a power cut, and the API answers (with its receipt) only after the
commit returns, so a receipt never names a write that can be lost. ``NORMAL``
(WAL) survives a process crash but a power loss may drop the last commits,
receipts given included (never a corruption); the bench states which it used. The driver's own transaction handling is switched off
and ``BEGIN`` is emitted by the ``begin`` event (the SQLAlchemy recipe for
pysqlite, the statement sent on the driver's connection), so DDL is transactional too.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import sqlite as sqlite_dialect

from store.errors import InvalidMemoryUrl, MemoryBackendUnavailable
from store.memory import textsearch
from store.memory.reads import FilterShape, bind
from store.memory.schema import items
from store.memory.sql import SqlMemoryStore
from store.memory.writelock import ProcessWriteLock

__all__ = ["BOX_SEEKS", "MMAP_BYTES", "SqliteMemoryStore"]

_RTREE = sa.table(
    "items_rtree",
    sa.column("pk"),
    sa.column("min_lat"),
    sa.column("max_lat"),
    sa.column("min_lng"),
    sa.column("max_lng"),
)
_FTS = sa.table("items_fts", sa.column("rowid"))
BOX_SEEKS = 2000
"""Most R*Tree candidates a full-text search within a box looks up one by one."""
MMAP_BYTES = 1 << 30
"""How much of the database file a connection reads through a memory map (SQLite's
``mmap_size``): pages read from the OS page cache without a ``read`` call and a copy
each, the connections of a process sharing them; the rest of a bigger file is read
as usual."""
_FTS_WEIGHTS = (4.0, 2.0, 1.0, 2.0)
"""bm25 column weights: title, statement, details, tags."""


class SqliteMemoryStore(SqlMemoryStore):
    """The memory store in one SQLite file."""

    backend = "sqlite"
    keep_batch_connection = True  # a file: no server to drop the connection between batches

    def __init__(
        self, url: str, *, busy_timeout_s: float = 30.0, synchronous: str = "FULL"
    ) -> None:
        """Open (and create, with its directory) the database file at ``url``.

        Args:
            url: ``sqlite:///<path>`` (relative) or ``sqlite:////<absolute path>``.
            busy_timeout_s: How long a writer waits for the write lock.
            synchronous: SQLite's ``synchronous`` pragma (``FULL`` or ``NORMAL``).

        Raises:
            InvalidMemoryUrl: an in-memory URL, or an unknown synchronous mode.
            MemoryBackendUnavailable: a path that cannot be created.
        """
        parsed = sa.make_url(url)
        path = parsed.database
        if not path or path == ":memory:":
            raise InvalidMemoryUrl("the memory store needs a SQLite file, not :memory:")
        if synchronous.upper() not in ("FULL", "NORMAL", "EXTRA"):
            raise InvalidMemoryUrl(f"unknown synchronous mode {synchronous!r}")
        try:
            Path(path).parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise MemoryBackendUnavailable(f"cannot create {Path(path).parent}: {exc}") from exc
        engine = sa.create_engine(
            parsed.set(drivername="sqlite+pysqlite"),
            connect_args={"timeout": busy_timeout_s, "check_same_thread": False},
            pool_size=8,
            max_overflow=16,
        )
        busy_ms = int(busy_timeout_s * 1000)
        sync = synchronous.upper()

        @sa.event.listens_for(engine, "connect")
        def _on_connect(dbapi_conn: Any, _record: Any) -> None:
            dbapi_conn.isolation_level = None  # we emit BEGIN ourselves
            cur = dbapi_conn.cursor()
            cur.execute("PRAGMA journal_mode=WAL")
            cur.execute(f"PRAGMA busy_timeout={busy_ms}")
            cur.execute(f"PRAGMA synchronous={sync}")
            cur.execute("PRAGMA foreign_keys=ON")
            # Statement journals (each write's savepoint) in memory rather than in a temp
            # file created, written and unlinked by every transaction; they are never
            # needed after a crash, so durability is unchanged.
            cur.execute("PRAGMA temp_store=MEMORY")
            cur.execute(f"PRAGMA mmap_size={MMAP_BYTES}")
            cur.close()

        @sa.event.listens_for(engine, "begin")
        def _on_begin(conn: sa.Connection) -> None:
            mode = conn.get_execution_options().get("sqlite_begin", "DEFERRED")
            # On the driver's connection: the same statement without a SQLAlchemy execution
            # around it (every transaction, the writes' included, starts here); a lock
            # timeout is the driver's OperationalError, which the store maps as before.
            conn.connection.dbapi_connection.execute(f"BEGIN {mode}")  # type: ignore[union-attr]

        super().__init__(engine, url)
        self._writer = threading.Lock()
        self._process_writer = ProcessWriteLock(path, busy_timeout_s)
        self.synchronous = sync
        """The ``synchronous`` pragma in force."""

    @contextlib.contextmanager
    def write_tx(self, conn: sa.Connection | None = None) -> Iterator[sa.Connection]:
        """A ``BEGIN IMMEDIATE`` transaction (on ``conn``, or on a connection of the pool):
        the write lock is held from the first statement.

        Threads of one process queue on :attr:`_writer` before asking SQLite: the
        database's own lock is waited for by polling with growing sleeps (up to
        100 ms each), so letting eight threads contend for it serialises them
        through sleeps, not through the writes. Processes hand over through
        :class:`~store.memory.writelock.ProcessWriteLock` for the same reason (and
        still meet at ``BEGIN IMMEDIATE`` and ``busy_timeout``).

        Raises:
            MemoryBackendUnavailable: another process held the write lock for
                ``busy_timeout_s``.
        """
        with self._writer:
            held = self._process_writer.acquire()
            try:
                with contextlib.ExitStack() as pooled:
                    if conn is None:
                        conn = pooled.enter_context(self.engine.connect())
                    conn.execution_options(sqlite_begin="IMMEDIATE")
                    with conn.begin():
                        yield conn
            finally:
                if held:
                    self._process_writer.release()

    def close(self) -> None:
        """Release connections and the write lock's file descriptor."""
        super().close()
        self._process_writer.close()

    def insert_ignore(self, table: sa.Table) -> sa.Executable:
        """``INSERT ... ON CONFLICT DO NOTHING``."""
        return sqlite_dialect.insert(table).on_conflict_do_nothing()

    def project_condition(self, shape: FilterShape) -> sa.ColumnElement[bool]:
        """With a bbox, ``project || ''`` (not indexable): the planner then reads the R*Tree's
        candidates by rowid instead of walking the project index in time order and testing
        each item against the box, which reads every item of the project for a small box."""
        if not shape.bbox:
            return items.c.project == sa.bindparam("project")
        return items.c.project.op("||")(sa.literal_column("''")) == sa.bindparam("project")

    def bbox_condition(self) -> sa.ColumnElement[bool]:
        """Candidates from the R*Tree (its float32 boxes are rounded outward: a superset)."""
        return items.c.pk.in_(self._in_box())

    def _in_box(self) -> sa.Select[Any]:
        s, w, n, e = (bind(f"bbox_{k}") for k in "swne")
        r = _RTREE.c
        return sa.select(r.pk).where(r.max_lat >= s, r.min_lat <= n, r.max_lng >= w, r.min_lng <= e)

    def text_match(
        self,
        conn: sa.Connection,
        words: Sequence[str],
        where: tuple[FilterShape, dict[str, Any]],
        *,
        all_words: bool,
        cap: int,
    ) -> list[tuple[str, float]]:
        """FTS5 ``MATCH`` every (or any) word, newest matches first, at most ``cap``; score
        ``-bm25`` (computed for the rows returned only). With a bbox holding at most
        :data:`BOX_SEEKS` items, the R*Tree's candidates are looked up in the FTS5 index one
        by one (instead of reading every match and testing it against the box)."""
        shape, params = where
        reads = self.read_statements
        seek = False
        if shape.bbox:
            box = {k: params[k] for k in ("bbox_s", "bbox_w", "bbox_n", "bbox_e")}
            few = reads.rows(
                conn,
                ("rtree_few",),
                lambda: sa.select(sa.func.count()).select_from(
                    self._in_box().limit(sa.bindparam("seeks", type_=sa.Integer())).subquery()
                ),
                {**box, "seeks": BOX_SEEKS + 1},
            )
            seek = few[0][0] <= BOX_SEEKS

        def build() -> sa.Select[Any]:
            fts: sa.ColumnElement[Any] = sa.literal_column("items_fts")
            score = (-sa.func.bm25(fts, *_FTS_WEIGHTS)).label("score")
            near = [_FTS.c.rowid.in_(self._in_box())] if seek else []
            return (
                sa.select(items.c.id, score)
                .select_from(_FTS.join(items, items.c.pk == _FTS.c.rowid))
                .where(fts.op("MATCH")(sa.bindparam("match")), *near, *self.conditions(shape))
                .order_by(_FTS.c.rowid.desc())
                .limit(sa.bindparam("cap", type_=sa.Integer()))
            )

        match = (" AND " if all_words else " OR ").join(f'"{w}"' for w in words)  # \\w+ words
        rows = reads.rows(conn, ("fts", shape, seek), build, {**params, "match": match, "cap": cap})
        return [(str(i), float(s)) for i, s in rows]

    def word_counts(
        self, conn: sa.Connection, project: str, words: Sequence[str], cap: int
    ) -> list[int]:
        """Rows of the FTS5 index holding each word, up to ``cap + 1`` (every project's: the
        index is shared)."""

        def holding(i: int) -> sa.Subquery:
            fts: sa.ColumnElement[Any] = sa.literal_column("items_fts")
            return (
                sa.select(_FTS.c.rowid)
                .where(fts.op("MATCH")(sa.bindparam(f"word_{i}")))
                .limit(sa.bindparam("cap1", type_=sa.Integer()))
                .subquery()
            )

        params: dict[str, Any] = {f"word_{i}": f'"{w}"' for i, w in enumerate(words)}
        params["cap1"] = cap + 1
        key = ("word_counts", len(words))
        return textsearch.counts(self.read_statements, conn, key, holding, len(words), params)
