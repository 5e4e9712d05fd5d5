"""Bearer tokens: who may read and write which project's memories.

A token is ``em_<id>_<secret>``: the id names the row, the secret is 32 random
bytes (base32). Only ``blake3(token)`` is stored, so a stolen database holds no
usable token. A token belongs to one project and carries ``read`` or
``read,write``; it can expire and be revoked (rotation = a new token, then revoke
the old). Another project's items are invisible to it: they are absent, never
"forbidden".

Writes are rate limited per token (:class:`api.limiter.RateLimiter`).
"""

from __future__ import annotations

import base64
import datetime as dt
import re
import secrets
from collections.abc import Callable
from dataclasses import dataclass

import blake3

from api.errors import ApiError
from store.memory.interface import MemoryStore
from store.memory.model import Token

__all__ = [
    "Caller",
    "authenticate",
    "hash_token",
    "issue_token",
    "parse_expiry",
]

_TOKEN = re.compile(r"^em_([0-9a-z]{12})_([A-Z2-7]{52})$")
_PROJECT = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")


@dataclass(frozen=True)
class Caller:
    """An authenticated caller."""

    project: str
    """The tenant whose memories the caller reads and writes."""
    actor: str
    """Who the caller is (the token's actor, recorded in the history)."""
    can: tuple[str, ...]
    """``("read",)`` or ``("read", "write")``."""
    token_id: str
    """The token's id (never its secret)."""


def hash_token(token: str) -> str:
    """The stored hash of a token (hex blake3)."""
    return blake3.blake3(token.encode("utf-8")).hexdigest()


def issue_token(
    store: MemoryStore,
    project: str,
    can: tuple[str, ...],
    *,
    actor: str | None = None,
    label: str | None = None,
    expires_at: dt.datetime | None = None,
) -> tuple[str, Token]:
    """Create a token; returns ``(the token text, shown once; its record)``.

    Raises:
        ApiError: ``invalid_argument`` for a malformed project or permission list.
    """
    if not _PROJECT.fullmatch(project):
        raise ApiError(
            "invalid_argument",
            f"project must be 1..64 letters, digits, '.', '_' or '-', got {project!r}"[:200],
            422,
        )
    if not can or any(c not in ("read", "write") for c in can):
        raise ApiError("invalid_argument", f"can must be read or read,write, got {can!r}", 422)
    perms = ("read", "write") if "write" in can else ("read",)
    token_id = secrets.token_hex(6)
    secret = base64.b32encode(secrets.token_bytes(32)).decode("ascii").rstrip("=")
    text = f"em_{token_id}_{secret}"
    record = Token(
        id=token_id,
        project=project,
        can=perms,
        actor=actor or f"token:{token_id}",
        label=label,
        created_at=dt.datetime.now(dt.UTC),
        expires_at=expires_at,
    )
    store.add_token(record, hash_token(text))
    return text, record


def parse_expiry(text: str | None, now: dt.datetime | None = None) -> dt.datetime | None:
    """``"90d"``, ``"12h"`` or ``"never"`` as an expiry instant (None: never).

    Raises:
        ApiError: ``invalid_argument`` for anything else.
    """
    if text is None or text == "never":
        return None
    m = re.fullmatch(r"(\d{1,5})([dh])", text.strip())
    if m is None:
        raise ApiError("invalid_argument", f"expiry must be like 90d or 12h, got {text!r}", 422)
    n, unit = int(m.group(1)), m.group(2)
    delta = dt.timedelta(days=n) if unit == "d" else dt.timedelta(hours=n)
    return (now or dt.datetime.now(dt.UTC)) + delta


def authenticate(
    store: MemoryStore | Callable[[], MemoryStore],
    token: str | None,
    need: str,
    now: dt.datetime | None = None,
) -> Caller:
    """The caller a bearer token stands for, checked for ``need`` (``read`` or ``write``).

    Raises:
        ApiError: 401 ``token_missing`` / ``token_invalid`` / ``token_revoked`` /
            ``token_expired``; 403 ``insufficient_permission`` (a read-only token writing).
    """
    if not token:
        raise ApiError(
            "token_missing",
            "memory primitives need a bearer token (Authorization: Bearer ..., or "
            "EARTHMEM_TOKEN for earthmem mcp / earthmem memory)",
            401,
        )
    if not _TOKEN.fullmatch(token):
        raise ApiError("token_invalid", "the token is not an earthmem token", 401)
    if callable(store):  # opened only for a well-formed token: no database for anonymous calls
        store = store()
    record = store.token_by_hash(hash_token(token))
    if record is None:
        raise ApiError("token_invalid", "unknown token", 401)
    when = now or dt.datetime.now(dt.UTC)
    if record.revoked_at is not None:
        raise ApiError("token_revoked", f"token {record.id} was revoked", 401)
    if record.expires_at is not None and record.expires_at <= when:
        raise ApiError("token_expired", f"token {record.id} expired", 401)
    if need not in record.can:
        raise ApiError(
            "insufficient_permission",
            f"token {record.id} may {', '.join(record.can)}, not {need}",
            403,
        )
    return Caller(record.project, record.actor, record.can, record.id)
