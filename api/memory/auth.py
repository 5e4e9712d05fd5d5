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
import dataclasses
import datetime as dt
import re
import secrets
import threading
import time
import weakref
from collections.abc import Callable
from dataclasses import dataclass

import blake3

from api.errors import ApiError
from store.memory.interface import MemoryStore
from store.memory.model import Token, refusal

__all__ = [
    "TOKEN_REFUSALS",
    "Caller",
    "authenticate",
    "forget",
    "hash_token",
    "issue_token",
    "parse_expiry",
    "verified",
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
    token_hash: str | None = None
    """The token's stored hash: writes carry it, and their transaction checks the token
    again (:attr:`store.memory.interface.WriteMeta.token_hash`)."""
    remembered: bool = False
    """The token was taken from this process's memo, not read from the database now: only
    a write's own transaction has checked it (see :func:`authenticate`)."""


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


TOKEN_REFUSALS = frozenset(
    {"token_missing", "token_invalid", "token_revoked", "token_expired", "insufficient_permission"}
)
"""The codes of a refused token."""

_MEMO_SECONDS = 30.0
"""How long a token read from the database stands for write calls without being read again."""
_MEMO_MAX = 4096

_memo: weakref.WeakKeyDictionary[MemoryStore, dict[str, tuple[float, Token]]] = (
    weakref.WeakKeyDictionary()
)
_memo_lock = threading.Lock()


def _remembered(store: MemoryStore, token_hash: str) -> Token | None:
    with _memo_lock:
        got = _memo.get(store, {}).get(token_hash)
    if got is None or time.monotonic() - got[0] > _MEMO_SECONDS:
        return None
    return got[1]


def _remember(store: MemoryStore, token_hash: str, record: Token) -> None:
    with _memo_lock:
        held = _memo.setdefault(store, {})
        if len(held) >= _MEMO_MAX:
            held.clear()
        held[token_hash] = (time.monotonic(), record)


def forget(store: MemoryStore, caller: Caller) -> None:
    """Drop the caller's token from the memo (a write's transaction refused it)."""
    if caller.token_hash is not None:
        with _memo_lock:
            _memo.get(store, {}).pop(caller.token_hash, None)


def _refuse(record: Token | None, need: str, when: dt.datetime) -> None:
    refused = refusal(record, need, when)
    if refused is not None:
        code, message = refused
        raise ApiError(code, message, 403 if code == "insufficient_permission" else 401)


def authenticate(
    store: MemoryStore | Callable[[], MemoryStore],
    token: str | None,
    need: str,
    now: dt.datetime | None = None,
    *,
    memo: bool = False,
) -> Caller:
    """The caller a bearer token stands for, checked for ``need`` (``read`` or ``write``).

    ``memo`` (write primitives only): a token read from the database in the last
    :data:`_MEMO_SECONDS` is taken from this process's memo instead of being read
    again. That is safe only because every write carries the token's hash and its
    transaction checks the token itself (:attr:`~store.memory.interface.WriteMeta.token_hash`),
    so a revoked, expired or rotated-away token stores nothing, at once, and reads a
    write primitive makes first call :func:`verified`. Reads never use the memo.

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
    token_hash = hash_token(token)
    when = now or dt.datetime.now(dt.UTC)
    record = _remembered(store, token_hash) if memo else None
    remembered = record is not None
    if record is None:
        record = store.token_by_hash(token_hash)
    _refuse(record, need, when)
    assert record is not None
    if memo and not remembered:
        _remember(store, token_hash, record)
    return Caller(record.project, record.actor, record.can, record.id, token_hash, remembered)


def verified(store: MemoryStore, caller: Caller, need: str) -> Caller:
    """``caller`` with its token read from the database now when it came from the memo
    (before a write primitive reads anything of the project for the caller).

    Raises:
        ApiError: as :func:`authenticate`.
    """
    if not caller.remembered or caller.token_hash is None:
        return caller
    record = store.token_by_hash(caller.token_hash)
    if record is not None and record.project != caller.project:
        record = None
    try:
        _refuse(record, need, dt.datetime.now(dt.UTC))
    except ApiError:
        forget(store, caller)
        raise
    return dataclasses.replace(caller, remembered=False)
