"""Whether a stored token may be used: the one rule the API's authentication and the
write transaction's own check (:attr:`store.memory.interface.WriteMeta.token_hash`) share."""

from __future__ import annotations

import datetime as dt

from store.memory.model import Token

__all__ = ["NEEDS", "refusal"]

NEEDS = ("read", "write")
"""What a caller may need of a token."""


def refusal(record: Token | None, need: str, at: dt.datetime) -> tuple[str, str] | None:
    """None when ``record`` may ``need`` at ``at``; else ``(code, message)``: ``token_invalid``
    (no such token), ``token_revoked``, ``token_expired`` or ``insufficient_permission``."""
    if record is None:
        return "token_invalid", "unknown token"
    if record.revoked_at is not None:
        return "token_revoked", f"token {record.id} was revoked"
    if record.expires_at is not None and record.expires_at <= at:
        return "token_expired", f"token {record.id} expired"
    if need not in record.can:
        return (
            "insufficient_permission",
            f"token {record.id} may {', '.join(record.can)}, not {need}",
        )
    return None
