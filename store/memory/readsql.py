"""The hot reads' statements, compiled once per shape and run on the raw DBAPI cursor.

A recall issues the same few reads every time (the head, briefs and items by id,
a page of briefs in a box, the full-text passes and their word counts) with
different values. Building each through SQLAlchemy Core, keying it for the
compiled cache and running it through an execution context cost more CPU than
the database took to answer. Here a read is named by its *shape* (a hashable key
saying which conditions it has and how many values each list holds); the
statement of a shape is built once, with named bind parameters, compiled with the
engine's own dialect (its parameter style and casts, as SQLAlchemy would send
them) and remembered; a call passes the key, a builder (run on a miss only) and
the values by name, and runs on the cursor of the connection's open transaction
(the read transaction of :meth:`~store.memory.interface.MemoryStore.reading`,
so these reads see the same snapshot as the others). PostgreSQL's driver
(psycopg 3) prepares a statement on the server once it has run a few times on a
connection; SQLite's driver keeps a statement cache per connection.

The only result processing the columns read here need is JSON: a JSON column
comes back as text from SQLite and decoded from psycopg; text is decoded here
(``json.loads``, as SQLAlchemy's JSON type does). Every value a statement
depends on is a named parameter the caller supplies; the constants a builder
writes (bm25 weights) are remembered with the statement.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from sqlalchemy.sql.compiler import SQLCompiler

from store.memo import BoundedMemo

__all__ = ["MAX_SHAPES", "ReadStatements", "id_slots", "pad"]

MAX_SHAPES = 512
"""Compiled read shapes remembered per store (least recently used dropped)."""


@dataclass(frozen=True)
class _Read:
    sql: str
    order: tuple[str, ...] | None
    """Parameter names in placeholder order (positional styles), None for named styles."""
    consts: Mapping[str, Any]
    """Values of the statement's own constants (parameters the caller does not pass)."""
    json_at: tuple[int, ...]
    """Result columns holding JSON."""


def id_slots(n: int) -> int:
    """How many ``IN`` placeholders a list of ``n`` ids is given: the next power of two
    (the list padded with its last id), so a few shapes serve every length."""
    return 1 << max(0, n - 1).bit_length()


def pad(values: Sequence[Any], slots: int) -> list[Any]:
    """``values`` repeated at its last element up to ``slots`` (``IN`` ignores repeats)."""
    out = list(values)
    return out + [out[-1]] * (slots - len(out))


class ReadStatements:
    """The compiled read shapes of one engine's dialect."""

    def __init__(self, dialect: sa.Dialect) -> None:
        self._dialect = dialect
        self._memo = BoundedMemo(MAX_SHAPES)
        self._json_as_text = dialect.name == "sqlite"

    def _compile(self, stmt: sa.Select[Any], params: Mapping[str, Any]) -> _Read:
        compiled = stmt.compile(dialect=self._dialect)
        assert isinstance(compiled, SQLCompiler)
        binds = compiled.params
        missing = set(params) - set(binds)
        if missing:  # a value the statement does not use: a builder/shape mismatch
            raise ValueError(f"read shape does not use parameters {sorted(missing)}")
        consts = {k: v for k, v in binds.items() if k not in params}
        unset = [k for k, v in consts.items() if v is None]
        if unset:
            raise ValueError(f"read shape needs parameters {sorted(unset)}")
        order = tuple(compiled.positiontup or ()) if compiled.positional else None
        json_at = tuple(
            i for i, c in enumerate(stmt.selected_columns) if isinstance(c.type, sa.JSON)
        )
        return _Read(str(compiled), order, consts, json_at)

    def rows(
        self,
        conn: sa.Connection,
        key: Hashable,
        build: Callable[[], sa.Select[Any]],
        params: Mapping[str, Any],
    ) -> list[Sequence[Any]]:
        """The rows of the statement of shape ``key`` (``build()`` on a miss) with ``params``,
        read on ``conn``'s transaction, JSON columns decoded."""
        read: _Read = self._memo.get(key, lambda: self._compile(build(), params))
        values = {**read.consts, **params} if read.consts else params
        args: Any = tuple(values[k] for k in read.order) if read.order is not None else values
        cur = conn.connection.cursor()
        try:
            cur.execute(read.sql, args)
            rows = cur.fetchall()
        finally:
            cur.close()
        if not (read.json_at and self._json_as_text):
            return list(rows)
        out: list[Sequence[Any]] = []
        for r in rows:
            row = list(r)
            for i in read.json_at:
                if row[i] is not None:
                    row[i] = json.loads(row[i])
            out.append(row)
        return out
