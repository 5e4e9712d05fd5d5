"""The write path's statements, compiled once per engine and run on the raw DBAPI cursor.

A memory write issues the same handful of statements every time (the head lock,
the operation lookup, the item, tag, history and operation inserts, the head
update). Building and compiling them through SQLAlchemy Core on every call was
most of a write's CPU time; here each is compiled once, with the engine's own
dialect (so PostgreSQL's ``::JSON`` casts and the driver's parameter style are
the ones SQLAlchemy would send), and executed on the transaction's DBAPI
cursor. The only bind processing those columns need is JSON: values of JSON
columns are serialised here exactly as SQLAlchemy's JSON type does
(``json.dumps``; ``None`` stays SQL ``NULL``, as ``none_as_null``), or sent as the
text they were already serialised to (:class:`~store.memory.codec.JsonText`).

SQLAlchemy keeps the schema, the migrations, the reads and the cold write
paths; these statements run inside the same transaction as its connection.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from sqlalchemy.sql.compiler import SQLCompiler

from store.memory.codec import JsonText, token_from_row
from store.memory.interface import GENESIS_HASH
from store.memory.model import Token
from store.memory.schema import (
    history,
    item_tags,
    items,
    operations,
    projects,
    relations,
    tokens,
)

__all__ = ["Prepared", "RawTx"]


@dataclass(frozen=True)
class _Stmt:
    """One compiled statement: its SQL, parameter order (positional styles) and JSON params."""

    sql: str
    order: tuple[str, ...] | None
    json_keys: frozenset[str]

    def params(self, values: Mapping[str, Any]) -> Any:
        if self.json_keys:
            values = dict(values)
            for k in self.json_keys:
                v = values.get(k)
                if type(v) is JsonText:
                    values[k] = v.text  # serialised once already (codec.json_pair)
                elif v is not None:
                    values[k] = json.dumps(v)
        if self.order is not None:
            return tuple(values[k] for k in self.order)
        return values


def _compile(stmt: sa.ClauseElement, dialect: sa.Dialect, table: sa.Table) -> _Stmt:
    compiled = stmt.compile(dialect=dialect)
    assert isinstance(compiled, SQLCompiler)
    names = tuple(compiled.positiontup or ()) if compiled.positional else None
    keys = compiled.params.keys()
    json_keys = frozenset(c.name for c in table.c if isinstance(c.type, sa.JSON) and c.name in keys)
    return _Stmt(str(compiled), names, json_keys)


def _insert(table: sa.Table, cols: Sequence[str]) -> sa.Insert:
    return table.insert().values({c: sa.bindparam(c) for c in cols})


class Prepared:
    """The hot write statements of one engine's dialect (compiled once, at open)."""

    def __init__(self, dialect: sa.Dialect, insert_ignore: sa.Executable, row_locks: bool) -> None:
        """``insert_ignore``: the backend's ``INSERT ... ON CONFLICT DO NOTHING`` of ``projects``."""
        assert isinstance(insert_ignore, sa.Insert)
        item_cols = [c.name for c in items.c if c.name not in ("pk", "search")]
        p = projects.c
        lock = sa.select(p.head_seq, p.head_hash).where(p.project == sa.bindparam("project"))
        if row_locks:
            lock = lock.with_for_update()
        o = operations.c
        self.head_create = _compile(
            insert_ignore.values(
                project=sa.bindparam("project"),
                head_seq=sa.bindparam("head_seq"),
                head_hash=sa.bindparam("head_hash"),
            ),
            dialect,
            projects,
        )
        self.head_lock = _compile(lock, dialect, projects)
        self.head_move = _compile(
            projects.update()
            .where(p.project == sa.bindparam("project"))
            .values(head_seq=sa.bindparam("head_seq"), head_hash=sa.bindparam("head_hash")),
            dialect,
            projects,
        )
        self.op_lookup = _compile(
            sa.select(o.request_digest).where(
                o.project == sa.bindparam("project"), o.operation_id == sa.bindparam("operation_id")
            ),
            dialect,
            operations,
        )
        self.item = _compile(_insert(items, item_cols).returning(items.c.pk), dialect, items)
        self.tag = _compile(_insert(item_tags, ["item_pk", "tag", "project"]), dialect, item_tags)
        self.entry = _compile(_insert(history, [c.name for c in history.c]), dialect, history)
        self.relation = _compile(
            _insert(relations, [c.name for c in relations.c]), dialect, relations
        )
        self.operation = _compile(
            _insert(operations, [c.name for c in operations.c]), dialect, operations
        )
        self.token = _compile(
            sa.select(tokens).where(tokens.c.token_hash == sa.bindparam("token_hash")),
            dialect,
            tokens,
        )
        self.token_columns = tuple(c.name for c in tokens.c)
        self.token_json = frozenset(c.name for c in tokens.c if isinstance(c.type, sa.JSON))
        self.json_as_text = dialect.name == "sqlite"
        """The driver hands JSON columns back as text (SQLite), not decoded (psycopg)."""

    def token_row(self, row: Sequence[Any]) -> dict[str, Any]:
        """A ``tokens`` row as SQLAlchemy would read it (its JSON columns decoded)."""
        out = dict(zip(self.token_columns, row, strict=True))
        if self.json_as_text:
            for k in self.token_json:
                if out[k] is not None:
                    out[k] = json.loads(out[k])
        return out


class RawTx:
    """The prepared statements bound to one transaction's DBAPI cursor."""

    def __init__(self, conn: sa.Connection, prepared: Prepared) -> None:
        self.conn = conn
        """The SQLAlchemy connection of the same transaction (for the cold statements)."""
        self.cur = conn.connection.cursor()
        self.p = prepared
        self._tokens: dict[str, Token | None] = {}

    def run(self, stmt: _Stmt, values: Mapping[str, Any]) -> Any:
        """Execute one statement; the cursor (for a ``RETURNING`` or a ``SELECT``)."""
        self.cur.execute(stmt.sql, stmt.params(values))
        return self.cur

    def run_many(self, stmt: _Stmt, rows: Sequence[Mapping[str, Any]]) -> None:
        """Execute one statement for each row."""
        if rows:
            self.cur.executemany(stmt.sql, [stmt.params(r) for r in rows])

    def raw(self, sql: str) -> None:
        """A statement without parameters (savepoints)."""
        self.cur.execute(sql)

    def lock_head(self, project: str) -> tuple[int, str]:
        """Create the project's head row if absent, lock it (row lock where the backend has
        them), return ``(seq, hash)``."""
        row = self.run(self.p.head_lock, {"project": project}).fetchone()
        if row is None:  # a project's first write (an existing head is never deleted)
            head = {"project": project, "head_seq": 0, "head_hash": GENESIS_HASH}
            self.run(self.p.head_create, head)
            row = self.run(self.p.head_lock, {"project": project}).fetchone()
        seq, head_hash = row
        return int(seq), str(head_hash)

    def move_head(self, project: str, seq: int, head_hash: str) -> None:
        self.run(self.p.head_move, {"project": project, "head_seq": seq, "head_hash": head_hash})

    def operation_digest(self, project: str, operation_id: str) -> tuple[bool, str | None]:
        """``(applied, request digest)`` of an operation id in the project."""
        row = self.run(
            self.p.op_lookup, {"project": project, "operation_id": operation_id}
        ).fetchone()
        return (row is not None, row[0] if row is not None else None)

    def token(self, token_hash: str) -> Token | None:
        """The stored token with this hash (read in this transaction), or None.

        Read once per transaction: the writes of a batch (often one agent's, one token)
        never change a token, and a revocation committed by another transaction is
        seen by the next batch, whose transaction reads the row again.
        """
        if token_hash in self._tokens:
            return self._tokens[token_hash]
        row = self.run(self.p.token, {"token_hash": token_hash}).fetchone()
        token = token_from_row(self.p.token_row(row)) if row is not None else None
        self._tokens[token_hash] = token
        return token

    def close(self) -> None:
        self.cur.close()
