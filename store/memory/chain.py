"""Checking a project's hash-chained history: links, hashes and signed heads.

:func:`verify_chain` recomputes every entry's hash from its content and its
predecessor's hash and checks each head signature with the caller's verifier.
Rewriting an entry breaks its hash; rewriting it *and* recomputing every later
hash keeps the chain self-consistent but breaks the signatures (the forger has
no signing key) — that is what ``earthmem memory audit`` reports.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from store.facts import canonical_cbor, digest
from store.keys import Ed25519Key
from store.memory.digest import rfc3339
from store.memory.interface import GENESIS_HASH, entry_hash
from store.memory.model import HistoryEntry, ProjectHead

__all__ = [
    "ChainReport",
    "VerifyHead",
    "entry_content",
    "head_message",
    "head_signature",
    "verify_chain",
]

VerifyHead = Callable[[ProjectHead, str], bool]
"""True when a signature is the server's over the head."""


def head_message(head: ProjectHead) -> bytes:
    """The 32 bytes a head signature signs: blake3 of the canonical CBOR of the head."""
    return digest(canonical_cbor({"project": head.project, "seq": head.seq, "hash": head.hash}))


def head_signature(key: Ed25519Key, head: ProjectHead) -> str:
    """``<key id>:<hex ed25519 signature>`` over a history head.

    The API and the pipeline's re-checks both sign with the data directory's key
    (:mod:`store.keys`), so every head of a project is signed by one key.
    """
    return f"{key.key_id}:{key.sign(head_message(head)).hex()}"


@dataclass(frozen=True)
class ChainReport:
    """What :func:`verify_chain` found."""

    entries: int
    """Entries checked."""
    problems: tuple[str, ...]
    """One line per broken link, hash, missing or bad signature (empty: the chain verifies)."""
    unsigned: int
    """Entries without a signature (not a problem unless ``require_signatures``)."""

    @property
    def ok(self) -> bool:
        """No problems."""
        return not self.problems


def entry_content(e: HistoryEntry) -> dict[str, object]:
    """The content :func:`~store.memory.interface.entry_hash` covers."""
    return {
        "project": e.project,
        "seq": e.seq,
        "item_id": e.item_id,
        "action": e.action,
        "actor": e.actor,
        "at": rfc3339(e.at),
        "change": e.change,
        "request_id": e.request_id,
        "operation_id": e.operation_id,
    }


def verify_chain(
    entries: Sequence[HistoryEntry],
    *,
    verify_head: VerifyHead | None = None,
    require_signatures: bool = False,
    prev_hash: str = GENESIS_HASH,
) -> ChainReport:
    """Check a contiguous run of one project's history (from seq 1 unless ``prev_hash`` given).

    Args:
        entries: The entries, in seq order.
        verify_head: Checks a head signature; None skips signature checks.
        require_signatures: Report entries without a signature.
        prev_hash: The hash before the first entry (genesis for seq 1).
    """
    problems: list[str] = []
    unsigned = 0
    expect_seq = entries[0].seq if entries else 1
    for e in entries:
        where = f"{e.project} #{e.seq}"
        if e.seq != expect_seq:
            problems.append(f"{where}: expected seq {expect_seq}")
        if e.prev_hash != prev_hash:
            problems.append(f"{where}: prev_hash does not link to the previous entry")
        if entry_hash(e.prev_hash, entry_content(e)) != e.hash:
            problems.append(f"{where}: hash does not match the entry's content")
        if e.head_signature is None:
            unsigned += 1
            if require_signatures:
                problems.append(f"{where}: no head signature")
        elif verify_head is not None and not verify_head(
            ProjectHead(e.project, e.seq, e.hash), e.head_signature
        ):
            problems.append(f"{where}: head signature does not verify")
        prev_hash, expect_seq = e.hash, e.seq + 1
    return ChainReport(entries=len(entries), problems=tuple(problems), unsigned=unsigned)
