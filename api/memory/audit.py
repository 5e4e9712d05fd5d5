"""Signed history heads, and the audit that checks a project's whole chain against them.

Every write signs the project's new head ``(project, seq, hash)`` with the data
directory's key (:mod:`store.keys`, the server's receipt key) and stores the signature
with the entry: the API's writes and the pipeline's re-checks alike
(:func:`store.memory.chain.head_signature`). Entries written without a signature
(by an older pipeline, or a store used directly) are covered by a later signed
head, since it signs a hash chained over them; unsigned entries after the last
signed head are reported as an unprotected tail (a warning: they are only hash-chained). The audit recomputes every
entry's hash from its content and the previous hash, and checks every stored head
signature: rewriting a past entry *and* every later hash is still detected,
because the rewritten hashes no longer match the signatures made when they were
written (forging those needs the signing key).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from nacl.exceptions import BadSignatureError
from nacl.signing import VerifyKey

from store.memory.chain import head_message, head_signature
from store.memory.interface import GENESIS_HASH, MemoryStore, entry_content, entry_hash
from store.memory.model import HistoryEntry, ProjectHead

__all__ = ["AuditReport", "audit_project", "head_signature"]


@dataclass(frozen=True)
class AuditReport:
    """What an audit of one project found."""

    project: str
    entries: int
    ok: bool
    problems: list[str] = field(default_factory=list)
    head: dict[str, Any] | None = None
    warnings: list[str] = field(default_factory=list)


def audit_project(
    store: MemoryStore, project: str, public_keys: Mapping[str, bytes]
) -> AuditReport:
    """Check a project's history chain and its signed heads.

    Args:
        store: The memory store.
        project: The project.
        public_keys: Trusted keys by key id (the server's receipt keys).
    """
    problems: list[str] = []
    unsigned_tail = 0
    prev = GENESIS_HASH
    n = 0
    after = 0
    while True:
        batch = store.history(project, after_seq=after, limit=1000)
        if not batch:
            break
        for e in batch:
            n += 1
            if e.seq != after + 1:
                problems.append(f"seq {e.seq} follows {after}: an entry is missing")
            if e.prev_hash != prev:
                problems.append(f"seq {e.seq}: prev_hash does not name entry {e.seq - 1}'s hash")
            if entry_hash(e.prev_hash, entry_content(e)) != e.hash:
                problems.append(f"seq {e.seq}: hash does not match the entry's content")
            if e.head_signature:
                problems.extend(_check_signature(e, public_keys))
                unsigned_tail = 0
            else:
                unsigned_tail += 1
            prev, after = e.hash, e.seq
    head = store.head(project)
    if head.seq != after or head.hash != prev:
        problems.append(f"the project head ({head.seq}) is not the last entry ({after})")
    warnings = (
        [f"the last {unsigned_tail} entries are unsigned: hash-chained only"]
        if unsigned_tail
        else []
    )
    return AuditReport(
        project, n, not problems, problems, {"seq": head.seq, "hash": head.hash}, warnings
    )


def _check_signature(e: HistoryEntry, public_keys: Mapping[str, bytes]) -> list[str]:
    key_id, _, sig = str(e.head_signature).partition(":")
    key = public_keys.get(key_id)
    if key is None:
        return [f"seq {e.seq}: signed by unknown key {key_id!r}"]
    try:
        VerifyKey(key).verify(
            head_message(ProjectHead(e.project, e.seq, e.hash)), bytes.fromhex(sig)
        )
    except (BadSignatureError, ValueError):
        return [
            f"seq {e.seq}: the head signature does not verify (the entry or a later one was rewritten)"
        ]
    return []
