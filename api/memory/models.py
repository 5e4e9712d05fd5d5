"""Pydantic I/O of the memory primitives (field names as memory-create.txt spells them).

Limits are part of the schema (``max_length``, ``ge``/``le``), so clients can check
a call before sending it; the service checks what a schema cannot (sizes of JSON
values, a place that must resolve, evidence that must verify).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field

from api.models.common import INPUT_CONFIG, Signed
from store.memory.model import APPLICABILITY, ASSERTED_BY, RELATION_KINDS, STATUSES, TYPES

__all__ = [
    "MAX_DETAILS_CHARS",
    "MAX_EVIDENCE",
    "MAX_ID_CHARS",
    "MAX_METADATA_BYTES",
    "MAX_RELATED",
    "MAX_SEQ",
    "MAX_STATEMENT_CHARS",
    "MAX_TAGS",
    "MAX_TAG_CHARS",
    "MAX_TITLE_CHARS",
    "MemoryAnswer",
    "MemoryBody",
    "MemoryCreateIn",
    "MemoryDeleteIn",
    "MemoryGetIn",
    "MemoryHistoryIn",
    "MemoryListIn",
    "MemoryRelateIn",
    "MemoryUpdateIn",
    "MemoryVerifyIn",
    "PlaceIn",
]

MAX_TITLE_CHARS = 200
"""Longest title."""
MAX_STATEMENT_CHARS = 4000
"""Longest statement."""
MAX_DETAILS_CHARS = 20_000
"""Longest details text."""
MAX_TAGS = 32
"""Most tags per item."""
MAX_TAG_CHARS = 64
"""Longest tag."""
MAX_EVIDENCE = 32
"""Most evidence entries per item."""
MAX_RELATED = 32
"""Most related ids per item."""
MAX_METADATA_BYTES = 16_384
"""Largest metadata object (its compact JSON)."""
MAX_ID_CHARS = 128
"""Longest id (item ids, operation ids, request ids, sessions, actors)."""
MAX_SEQ = (1 << 62) - 1
"""Largest history seq or item version accepted (the databases store 64-bit integers)."""

MemoryType = Literal[
    "decision",
    "invariant",
    "gotcha",
    "rejected_idea",
    "assumption",
    "open_question",
    "ambiguity",
    "contract",
    "constraint",
    "hypothesis",
    "observation",
    "bug",
    "architecture",
    "implementation",
]
AssertedBy = Literal["user", "test", "source", "git", "doc", "runtime", "agent"]
Applicability = Literal["current", "legacy", "deprecated", "planned"]
RelationKind = Literal["contradicts", "derived_from", "refines", "depends_on", "related"]
Status = Literal["active", "superseded", "potentially_stale", "deleted"]
assert set(MemoryType.__args__) == set(TYPES)  # type: ignore[attr-defined]
assert set(AssertedBy.__args__) < set(ASSERTED_BY)  # type: ignore[attr-defined]
assert set(Applicability.__args__) == set(APPLICABILITY)  # type: ignore[attr-defined]
assert set(RelationKind.__args__) < set(RELATION_KINDS)  # type: ignore[attr-defined]
assert set(Status.__args__) == set(STATUSES)  # type: ignore[attr-defined]

_ID = Field(None, max_length=MAX_ID_CHARS)
_LISTED_STATUSES: tuple[Status, ...] = ("active", "potentially_stale")


class PlaceIn(BaseModel):
    """Where an item is: exactly one of cell, lat+lng, bbox, geometry or place (a name)."""

    model_config = INPUT_CONFIG

    cell: str | None = Field(None, max_length=64, description="A cell64.")
    lat: float | None = Field(None, ge=-90, le=90, description="Latitude (with lng).")
    lng: float | None = Field(None, ge=-180, le=180, description="Longitude (with lat).")
    bbox: dict[str, float] | list[float] | None = Field(
        None, description="{min_lat, min_lng, max_lat, max_lng} (area_over_time's caps)."
    )
    geometry: dict[str, Any] | None = Field(
        None, description="GeoJSON Polygon or MultiPolygon (area_over_time's caps)."
    )
    place: str | None = Field(
        None,
        max_length=200,
        description="A place name resolved with where_is; the resolution is stored with the item.",
    )


class MemoryCreateIn(BaseModel):
    """Arguments of memory_create."""

    model_config = INPUT_CONFIG

    type: MemoryType = Field(description="One of the fourteen memory types.")
    title: str = Field(min_length=1, max_length=MAX_TITLE_CHARS, description="Short title.")
    statement: str = Field(
        min_length=1, max_length=MAX_STATEMENT_CHARS, description="The factual claim being stored."
    )
    tags: list[str] = Field(
        min_length=1, max_length=MAX_TAGS, description="At least one tag for categorisation."
    )
    details: str | None = Field(None, max_length=MAX_DETAILS_CHARS, description="Details.")
    confidence: float | None = Field(
        None,
        ge=0,
        le=1,
        description="0..1; derived from asserted_by when omitted (user 1.0, test 0.95, "
        "source/git/doc 0.9, runtime 0.7, agent 0.6); hypotheses are capped at 0.4.",
    )
    importance: float = Field(0.5, ge=0, le=1, description="0..1, default 0.5.")
    evidence: list[dict[str, Any]] = Field(
        default_factory=list,
        max_length=MAX_EVIDENCE,
        description="Evidence: {kind: fact, fact_id, cell, band, tslot, snapshot_id?} | "
        "{kind: scene, item_id} | {kind: answer, answer} (a signed earthmem answer) | "
        "{kind: url, url, contentHash} | {kind: file, path, startLine?, endLine?, contentHash}. "
        "contentHash is 'blake3:<hex>' or 'sha256:<hex>'. Unverifiable evidence is refused.",
    )
    related_memory_ids: list[str] = Field(
        default_factory=list, max_length=MAX_RELATED, description="Ids of related items."
    )
    metadata: dict[str, Any] = Field(
        default_factory=dict,
        description="Extra metadata. Decisions: rationale (recommended). Invariants: "
        "verificationMethod and condition (required; condition is a claim).",
    )
    asserted_by: AssertedBy = Field("agent", description="Who established the claim.")
    applicability: Applicability = Field("current", description="Orthogonal to status.")
    scope: str | dict[str, Any] | None = Field(
        None,
        description="user, project, path, task, team — or {kind, value}; default project. "
        "Isolation is the token's project; scope is a label inside it.",
    )
    supersedes_id: str | None = Field(
        None, max_length=MAX_ID_CHARS, description="Id of an item this one replaces."
    )
    project: str | None = Field(
        None,
        max_length=MAX_ID_CHARS,
        description="Must be the token's project when given (the token decides the project).",
    )
    actor: str | None = _ID
    session: str | None = _ID
    request_id: str | None = _ID
    operation_id: str | None = Field(
        None,
        max_length=MAX_ID_CHARS,
        description="Idempotency key: a repeated call returns the stored result; the same key "
        "with different content is a conflict and stores nothing.",
    )
    where: PlaceIn | None = Field(
        None,
        description="The place the item is about. Required except for decision, contract, "
        "constraint, architecture and implementation.",
    )
    valid_at: str | None = Field(None, max_length=64, description="Valid time: an instant.")
    valid_from: str | None = Field(None, max_length=64, description="Valid time: start.")
    valid_to: str | None = Field(None, max_length=64, description="Valid time: end.")
    claim: dict[str, Any] | None = Field(
        None,
        description="{band, op, value, tslot | window | date | start_date+end_date, agg}: "
        "checked against the cube at the item's place now (corroborated / contradicted / "
        "unknown, with the facts); a date means the clear overpasses within +-7 days.",
    )


class MemoryGetIn(BaseModel):
    """Arguments of memory_get."""

    model_config = INPUT_CONFIG

    id: str = Field(max_length=MAX_ID_CHARS, description="The item's id.")
    include_history: bool = Field(False, description="Add the item's history.")


class MemoryListIn(BaseModel):
    """Arguments of memory_list (all filters AND-ed; newest first; paged)."""

    model_config = INPUT_CONFIG

    types: list[MemoryType] = Field(default_factory=list, max_length=14)
    tags: list[str] = Field(default_factory=list, max_length=MAX_TAGS)
    statuses: list[Status] = Field(default_factory=lambda: list(_LISTED_STATUSES), max_length=4)
    where: PlaceIn | None = Field(None, description="Items whose place meets this place.")
    valid_at: str | None = Field(None, max_length=64)
    limit: int = Field(20, ge=1, le=200, strict=True)
    cursor: str | None = Field(None, max_length=512)


class MemoryUpdateIn(MemoryCreateIn):
    """Arguments of memory_update: a new item that supersedes ``id`` at ``expected_version``."""

    id: str = Field(max_length=MAX_ID_CHARS, description="The item to supersede.")
    expected_version: int = Field(
        ge=1, le=MAX_SEQ, strict=True, description="The version you read."
    )


class MemoryRelateIn(BaseModel):
    """Arguments of memory_relate."""

    model_config = INPUT_CONFIG

    src_id: str = Field(max_length=MAX_ID_CHARS)
    dst_id: str = Field(max_length=MAX_ID_CHARS)
    kind: RelationKind
    operation_id: str | None = _ID
    request_id: str | None = _ID


class MemoryHistoryIn(BaseModel):
    """Arguments of memory_history (an item's, or the project's)."""

    model_config = INPUT_CONFIG

    id: str | None = Field(None, max_length=MAX_ID_CHARS)
    after_seq: int = Field(0, ge=0, le=MAX_SEQ, strict=True)
    limit: int = Field(100, ge=1, le=1000, strict=True)


class MemoryDeleteIn(BaseModel):
    """Arguments of memory_delete (soft: the item and its history stay)."""

    model_config = INPUT_CONFIG

    id: str = Field(max_length=MAX_ID_CHARS)
    expected_version: int = Field(ge=1, le=MAX_SEQ, strict=True)
    reason: str = Field(min_length=1, max_length=1000)
    operation_id: str | None = _ID
    request_id: str | None = _ID


class MemoryVerifyIn(BaseModel):
    """Arguments of memory_verify: re-check an item's claim and evidence against the cube now."""

    model_config = INPUT_CONFIG

    id: str = Field(max_length=MAX_ID_CHARS)
    request_id: str | None = _ID


class MemoryBody(BaseModel):
    """What a memory primitive answers (without its receipt)."""

    result: dict[str, Any] = Field(
        description="item / items / history / relations, plus warnings, the defaults and caps "
        "applied, whether an operation was replayed, and the project's history head."
    )


class MemoryAnswer(Signed, MemoryBody):
    """A memory primitive's answer with its receipt (binding the item digest and the head)."""
