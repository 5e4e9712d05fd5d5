"""The memory storage interface: one abstract store, two backends, one conformance suite.

Every write is one transaction: the item row(s), the relation rows, the history
entry (appended to the project's hash chain) and the operation record commit
together or not at all (a backend may commit several callers' writes in one
transaction, each in its own savepoint, answering none before the commit). A
write with an ``operation_id`` already applied in the
project returns the stored result (``replayed=True``; nothing written); the same
``operation_id`` with a different request digest raises
:class:`~store.errors.OperationConflict`. Updates name the version they expect
(optimistic concurrency): a stale version raises
:class:`~store.errors.VersionConflict`, so two agents cannot fork one item's
supersession chain.

The history chain: entry ``n`` has ``hash = blake3(prev_hash || canonical CBOR of
{project, seq, item_id, action, actor, at, change, request_id, operation_id})``
(:func:`entry_hash`), and ``prev_hash`` is entry ``n - 1``'s hash (64 zeros for the
first). The caller may pass ``sign_head`` to sign each new head; the signature is
stored with the entry, so rewriting an entry *and* every later hash is detected by
checking the signatures (``earthmem memory audit``).

Projects never see each other's rows: every method takes the project and every
query is filtered by it.
"""

from __future__ import annotations

import contextlib
import datetime as dt
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from store.facts import canonical_cbor, digest
from store.memory.model import (
    BriefPage,
    HistoryEntry,
    ItemBrief,
    ItemFilter,
    ItemVectors,
    MemoryItem,
    NewItem,
    Page,
    ProjectHead,
    Relation,
    Token,
    WriteResult,
)

if TYPE_CHECKING:  # the timeline's queries import SQLAlchemy: not at a server's start
    from store.memory.timeline import StateAsOf

__all__ = [
    "GENESIS_HASH",
    "MemoryStore",
    "SignHead",
    "WriteMeta",
    "entry_content",
    "entry_hash",
]

GENESIS_HASH = "0" * 64
"""``prev_hash`` of a project's first history entry."""

SignHead = Callable[[ProjectHead], str]
"""Signs a new history head (returns the signature text stored with the entry)."""


@dataclass(frozen=True)
class WriteMeta:
    """Who writes, why, and how the write is made idempotent."""

    actor: str
    """The writer's identity (a token's actor, ``pipeline`` for re-checks)."""
    at: dt.datetime
    """Transaction time (aware UTC)."""
    operation_id: str | None = None
    """Idempotency key: applied at most once per project."""
    request_digest: str | None = None
    """Digest of the request's content (same operation id + other digest = conflict)."""
    request_id: str | None = None
    """The caller's request id (recorded in the history)."""
    token_hash: str | None = None
    """The writer's bearer token (its stored hash). When given, the write's own transaction
    reads the token first and stores nothing unless it belongs to the project, may write,
    and is neither revoked nor expired at ``at`` (:class:`~store.errors.TokenRefused`): a
    revocation committed before the write takes effect on it, whatever the caller cached."""


def entry_content(entry: HistoryEntry) -> dict[str, Any]:
    """The content an entry's hash covers (``at`` as RFC 3339 UTC ending in ``Z``)."""
    return {
        "project": entry.project,
        "seq": entry.seq,
        "item_id": entry.item_id,
        "action": entry.action,
        "actor": entry.actor,
        "at": entry.at.astimezone(dt.UTC).isoformat().replace("+00:00", "Z"),
        "change": dict(entry.change),
        "request_id": entry.request_id,
        "operation_id": entry.operation_id,
    }


def entry_hash(prev_hash: str, content: Mapping[str, Any]) -> str:
    """The chained hash of a history entry's content after ``prev_hash`` (hex).

    Args:
        prev_hash: Hex hash of the previous entry (:data:`GENESIS_HASH` for the first).
        content: ``{project, seq, item_id, action, actor, at, change, request_id,
            operation_id}`` with ``at`` as an RFC 3339 string.
    """
    return digest(bytes.fromhex(prev_hash) + canonical_cbor(dict(content))).hex()


class MemoryStore(ABC):
    """Typed, place-anchored memories of many projects, in one database."""

    backend: str = ""
    """``"sqlite"`` or ``"postgresql"``."""

    # ------------------------------------------------------------------ lifecycle

    @abstractmethod
    def migrate(self) -> str:
        """Upgrade the schema to the newest revision; return the revision now applied."""

    @abstractmethod
    def revision(self) -> str | None:
        """The schema revision applied (None: an empty database)."""

    @abstractmethod
    def close(self) -> None:
        """Release connections."""

    @contextlib.contextmanager
    def reading(self) -> Iterator[None]:
        """Reads of this thread inside the block share one read transaction: one snapshot of
        the database (so a recall's lanes see the state its receipt names) and one connection.
        Writes inside the block are not seen by its reads. A backend without transactions may
        leave this a no-op."""
        yield

    # ------------------------------------------------------------------ writes

    @abstractmethod
    def create(
        self,
        project: str,
        item: NewItem,
        meta: WriteMeta,
        *,
        supersedes: tuple[str, int] | None = None,
        sign_head: SignHead | None = None,
    ) -> WriteResult:
        """Store a new item (one transaction).

        Args:
            project: The tenant.
            item: The content.
            meta: Actor, time, idempotency.
            supersedes: ``(old id, expected version)``: the old item becomes
                ``superseded`` (hidden by default, history kept) and a ``supersedes``
                relation is written, in the same transaction.
            sign_head: Signs the new history head.

        Raises:
            MemoryNotFound: ``supersedes`` or a related id names no item of the project.
            VersionConflict: the superseded item is not at the expected version.
            InvalidTransition: the superseded item is deleted or already superseded.
            OperationConflict: ``meta.operation_id`` was used with another request.
        """

    @abstractmethod
    def change(
        self,
        project: str,
        item_id: str,
        expected_version: int | None,
        changes: Mapping[str, Any],
        action: str,
        meta: WriteMeta,
        *,
        sign_head: SignHead | None = None,
    ) -> WriteResult:
        """Change fields of an item in place: ``status``, ``verdict``, ``verdict_facts``,
        ``deleted_reason``, ``metadata`` (one transaction, version + 1).

        ``action`` names the history entry (``delete``, ``verify``, ``stale``).
        ``expected_version`` None skips the version check (the pipeline's re-checks).

        Raises:
            MemoryNotFound, VersionConflict, InvalidTransition, OperationConflict.
        """

    @abstractmethod
    def relate(
        self,
        project: str,
        src_id: str,
        dst_id: str,
        kind: str,
        meta: WriteMeta,
        *,
        sign_head: SignHead | None = None,
    ) -> WriteResult:
        """Add a typed relation between two items (idempotent on ``(src, dst, kind)``).

        Raises:
            MemoryNotFound: either id names no item of the project.
            OperationConflict.
        """

    # ------------------------------------------------------------------ reads

    @abstractmethod
    def get(self, project: str, item_id: str) -> MemoryItem | None:
        """The item (any status), or None when the project has no such item."""

    @abstractmethod
    def get_many(self, project: str, item_ids: Sequence[str]) -> list[MemoryItem]:
        """The project's items among ``item_ids`` (missing ones left out), in the given order."""

    @abstractmethod
    def list_items(
        self, project: str, where: ItemFilter, *, limit: int, cursor: str | None = None
    ) -> Page:
        """Items matching ``where``, newest first, paged (``cursor`` from the previous page).

        Raises:
            InvalidCursor: a cursor this store did not issue.
        """

    @abstractmethod
    def get_briefs(self, project: str, item_ids: Sequence[str]) -> list[ItemBrief]:
        """:meth:`get_many` as briefs (no body decoded: what ranking and filtering read)."""

    @abstractmethod
    def list_briefs(
        self, project: str, where: ItemFilter, *, limit: int, cursor: str | None = None
    ) -> BriefPage:
        """:meth:`list_items` as briefs (the same order and cursors)."""

    @abstractmethod
    def relations(self, project: str, item_id: str) -> list[Relation]:
        """Every relation from or to an item."""

    @abstractmethod
    def history(
        self,
        project: str,
        *,
        item_id: str | None = None,
        after_seq: int = 0,
        limit: int = 1000,
    ) -> list[HistoryEntry]:
        """History entries in order (of one item, or of the whole project)."""

    @abstractmethod
    def head(self, project: str) -> ProjectHead:
        """The project's history head (seq 0 and the genesis hash when empty)."""

    @abstractmethod
    def search_text(
        self, project: str, query: str, *, limit: int, where: ItemFilter | None = None
    ) -> list[tuple[str, float]]:
        """Full-text ranking over title, statement, details and tags (the database's own).

        Returns:
            ``[(item id, score)]``, best first; scores are higher-is-better.
        """

    @abstractmethod
    def states_as_of(
        self, project: str, item_ids: Sequence[str], as_of: dt.datetime
    ) -> Mapping[str, StateAsOf]:
        """Each item's status (and successor) as of a transaction time, from the history.

        Items with no history entry at or before ``as_of`` (written later) are left out.
        """

    @abstractmethod
    def relations_of(
        self,
        project: str,
        item_ids: Sequence[str],
        kinds: Sequence[str],
        *,
        written_before: dt.datetime | None = None,
    ) -> list[Relation]:
        """Every relation of ``kinds`` from or to any of ``item_ids`` (written by then)."""

    @abstractmethod
    def nearest_valid(
        self, project: str, at: dt.datetime, *, limit: int, where: ItemFilter | None = None
    ) -> list[tuple[str, int]]:
        """Items with a valid time, nearest ``at`` first: ``[(id, distance in µs)]`` (0: covers).

        Raises:
            InvalidMemoryQuery: ``limit`` below 1.
        """

    @abstractmethod
    def unembedded(self, project: str, *, after: str | None, limit: int) -> list[MemoryItem]:
        """Up to ``limit`` of the project's items (any status) with no embedding, in id
        order after ``after`` (None: from the start): what ``memory reembed`` fills in."""

    @abstractmethod
    def set_embeddings(self, project: str, vectors: Mapping[str, Sequence[float]]) -> int:
        """Store embeddings of items that have none (an item that has one keeps it); the
        number stored. Not a write of the item: no history entry, no version, no digest
        change (the embedding is derived from the text, not part of what the item says)."""

    @abstractmethod
    def item_vectors(self, project: str, where: ItemFilter) -> ItemVectors:
        """Every matching item's id, anchor centre and embedding, as arrays (recall's
        vector and geo-embedding lanes score them in bulk; one read, no paging)."""

    @abstractmethod
    def projects(self) -> list[str]:
        """Every project with at least one history entry or token."""

    # ------------------------------------------------------------------ tokens

    @abstractmethod
    def add_token(self, token: Token, token_hash: str) -> None:
        """Store a token (by its hash; the secret itself is never stored)."""

    @abstractmethod
    def token_by_hash(self, token_hash: str) -> Token | None:
        """The token with this hash (revoked and expired ones included), or None."""

    @abstractmethod
    def list_tokens(self, project: str | None = None) -> list[Token]:
        """Tokens (of one project, or all)."""

    @abstractmethod
    def revoke_token(self, token_id: str, at: dt.datetime) -> bool:
        """Revoke a token; False when there is no such token."""

    # ------------------------------------------------------------------ archive

    @abstractmethod
    def export_project(self, project: str) -> Iterator[dict[str, Any]]:
        """Every row of a project as plain records (``{"table": ..., "row": {...}}``), in an
        order :meth:`import_records` can replay."""

    @abstractmethod
    def import_records(
        self, records: Sequence[Mapping[str, Any]], *, dry_run: bool = False
    ) -> dict[str, int]:
        """Load exported records (one transaction); with ``dry_run`` check and count only.

        Raises:
            ImportConflict: a record collides with a different row already stored.
        """
