"""Stored tokens: whether one may be used (the one rule the API's authentication and the
write transaction's own check, :attr:`store.memory.interface.WriteMeta.token_hash`, share),
and the SQL backends' listing and revocation."""

from __future__ import annotations

import datetime as dt

import sqlalchemy as sa

from store.memory.codec import to_us, token_from_row, token_row
from store.memory.model import NEEDS, Token, refusal
from store.memory.schema import tokens as tokens_t

__all__ = ["NEEDS", "add", "listed", "refusal", "revoke"]


def listed(conn: sa.Connection, project: str | None) -> list[Token]:
    """Tokens (of one project, or all), oldest first."""
    q = sa.select(tokens_t).order_by(tokens_t.c.created_at, tokens_t.c.id)
    if project is not None:
        q = q.where(tokens_t.c.project == project)
    return [token_from_row(r._mapping) for r in conn.execute(q)]


def revoke(conn: sa.Connection, token_id: str, at: dt.datetime) -> bool:
    """Revoke a token in ``conn``'s transaction (the first revocation time is kept);
    False when there is none."""
    t = tokens_t.c
    found = conn.execute(sa.select(t.id).where(t.id == token_id)).one_or_none()
    conn.execute(
        tokens_t.update()
        .where(t.id == token_id, t.revoked_at.is_(None))
        .values(revoked_at=to_us(at))
    )
    return found is not None


def add(conn: sa.Connection, token: Token, token_hash: str) -> None:
    """Insert a token's row by its hash in ``conn``'s transaction (a duplicate id or hash
    raises the database's IntegrityError when the statement or the commit runs)."""
    conn.execute(tokens_t.insert().values(token_row(token, token_hash)))
