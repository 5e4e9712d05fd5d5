"""The server backend: PostgreSQL (psycopg 3), for several API processes or machines.

Writers of one project are serialised by locking the project's ``projects`` row
(``INSERT ... ON CONFLICT DO NOTHING`` then ``SELECT ... FOR UPDATE``), so its
history seqs never fork and a read-check-write never loses an update; writers
of different projects do not wait for each other. Read committed isolation:
every statement after the lock sees what the previous holder committed. Full
text: the generated ``items.search`` tsvector (GIN) ranked by ``ts_rank``;
places: a GiST index over ``box(point(min_lng, min_lat), point(max_lng,
max_lat))`` (built-in geometric types, no PostGIS). Concurrent migrations are
serialised by a transaction-scoped advisory lock.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql as pg_dialect

from store.memory import textsearch
from store.memory.reads import FilterShape
from store.memory.schema import items
from store.memory.sql import SqlMemoryStore

__all__ = ["MIGRATION_LOCK_KEY", "PostgresMemoryStore"]

MIGRATION_LOCK_KEY = 0x6D656D6F7279
"""The advisory lock key migrations hold (``"memory"`` in hex)."""

_CONFIG: sa.ColumnElement[Any] = sa.literal_column("'english'::regconfig")
_SEARCH: sa.ColumnElement[Any] = sa.literal_column("items.search")


def _box(min_lng: Any, min_lat: Any, max_lng: Any, max_lat: Any) -> sa.ColumnElement[Any]:
    return sa.func.box(sa.func.point(min_lng, min_lat), sa.func.point(max_lng, max_lat))


class PostgresMemoryStore(SqlMemoryStore):
    """The memory store in a PostgreSQL database."""

    backend = "postgresql"
    row_locks = True
    snapshot_options: Mapping[str, Any] = {"isolation_level": "REPEATABLE READ"}
    """A :meth:`reading` block sees one snapshot (read committed would take one per statement)."""

    def __init__(self, url: str, *, pool_size: int = 8) -> None:
        """Connect lazily to ``postgresql://user@host:port/db`` (driver psycopg 3)."""
        parsed = sa.make_url(url).set(drivername="postgresql+psycopg")
        engine = sa.create_engine(
            parsed, pool_size=pool_size, max_overflow=2 * pool_size, pool_pre_ping=True
        )
        super().__init__(engine, url)

    def insert_ignore(self, table: sa.Table) -> sa.Executable:
        """``INSERT ... ON CONFLICT DO NOTHING``."""
        return pg_dialect.insert(table).on_conflict_do_nothing()

    def migration_lock(self, conn: sa.Connection) -> None:
        """``pg_advisory_xact_lock``: one migration at a time, released at commit."""
        conn.execute(sa.select(sa.func.pg_advisory_xact_lock(MIGRATION_LOCK_KEY)))

    def bbox_condition(self) -> sa.ColumnElement[bool]:
        """Box overlap (``&&``) through the GiST index (touching boxes overlap)."""
        s, w, n, e = (sa.bindparam(f"bbox_{k}", type_=sa.Float()) for k in "swne")
        c = items.c
        return _box(c.min_lng, c.min_lat, c.max_lng, c.max_lat).op("&&")(_box(w, s, e, n))

    def text_match(
        self,
        conn: sa.Connection,
        words: Sequence[str],
        where: tuple[FilterShape, dict[str, Any]],
        *,
        all_words: bool,
        cap: int,
    ) -> list[tuple[str, float]]:
        """``search @@`` every (``&&``) or any (``||``) word's ``plainto_tsquery``, at most
        ``cap`` matches in the GIN scan's order; score ``ts_rank`` (of the rows returned)."""
        shape, params = where

        def build() -> sa.Select[Any]:
            queries: list[sa.ColumnElement[Any]] = [
                sa.func.plainto_tsquery(_CONFIG, sa.bindparam(f"word_{i}", type_=sa.Text()))
                for i in range(len(words))
            ]
            op = "&&" if all_words else "||"
            tsq = functools.reduce(lambda a, b: a.op(op)(b), queries)
            score = sa.func.ts_rank(_SEARCH, tsq).label("score")
            return (
                sa.select(items.c.id, score)
                .where(_SEARCH.op("@@")(tsq), *self.conditions(shape))
                .limit(sa.bindparam("cap", type_=sa.Integer()))
            )

        values = {**params, **{f"word_{i}": w for i, w in enumerate(words)}, "cap": cap}
        key = ("fts", shape, all_words, len(words))
        rows = self.read_statements.rows(conn, key, build, values)
        return [(str(i), float(s)) for i, s in rows]

    def word_counts(
        self, conn: sa.Connection, project: str, words: Sequence[str], cap: int
    ) -> list[int]:
        """The project's items whose ``search`` holds each word, up to ``cap + 1``."""

        def holding(i: int) -> sa.Subquery:
            tsq = sa.func.plainto_tsquery(_CONFIG, sa.bindparam(f"word_{i}", type_=sa.Text()))
            q = sa.select(items.c.pk).where(
                items.c.project == sa.bindparam("project"), _SEARCH.op("@@")(tsq)
            )
            return q.limit(sa.bindparam("cap1", type_=sa.Integer())).subquery()

        params: dict[str, Any] = {f"word_{i}": w for i, w in enumerate(words)}
        params.update(project=project, cap1=cap + 1)
        key = ("word_counts", len(words))
        return textsearch.counts(self.read_statements, conn, key, holding, len(words), params)
