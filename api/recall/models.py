"""Pydantic I/O of ``recall`` (field names as recall.txt spells them; ours in snake_case).

Caps are part of the schema (``max_length``, ``ge``/``le``) so a client can check a
call before sending it; the service checks what a schema cannot (a place that must
resolve, time anchors that exclude each other, a date phrase).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field

from api.models.common import INPUT_CONFIG, Signed

__all__ = [
    "DEFAULT_LIMIT",
    "MAX_ANCHOR_DEPTH",
    "MAX_KINDS",
    "MAX_LIMIT",
    "MAX_QUERY_CHARS",
    "MAX_RADIUS_M",
    "MAX_SOURCES",
    "SCOPES",
    "NearIn",
    "RecallAnswer",
    "RecallBody",
    "RecallIn",
]

DEFAULT_LIMIT = 10
"""Hits returned when ``limit`` is omitted."""
MAX_LIMIT = 100
"""Most hits one call returns."""
MAX_QUERY_CHARS = 2000
"""Longest query text."""
MAX_RADIUS_M = 50_000.0
"""Largest ``near.radius_m`` (50 km): recall is about a place, not a region."""
MAX_ANCHOR_DEPTH = 6
"""Deepest graph walk from ``anchor``."""
MAX_KINDS = 32
"""Most values in ``kinds``."""
MAX_SOURCES = 32
"""Most values in ``source``."""
SCOPES = ("project", "personal", "team")
"""Recall's scopes: project = items scoped to the project (or a path in it), personal =
items scoped ``user`` written by the caller's actor, team = items scoped team or task."""


class NearIn(BaseModel):
    """Keep items anchored within ``radius_m`` of a place, a cell or a point."""

    model_config = INPUT_CONFIG

    place: str | None = Field(
        None, max_length=200, description="A place name, resolved with where_is (reported)."
    )
    cell: str | None = Field(None, max_length=64, description="A cell64.")
    lat: float | None = Field(None, ge=-90, le=90, description="Latitude (with lng).")
    lng: float | None = Field(None, ge=-180, le=180, description="Longitude (with lat).")
    radius_m: float = Field(
        description=f"Radius in metres (> 0, at most {MAX_RADIUS_M:g}; over it: radius_too_large)."
    )


class RecallIn(BaseModel):
    """Arguments of recall."""

    model_config = INPUT_CONFIG

    query: str = Field(
        max_length=MAX_QUERY_CHARS,
        description="Natural-language question or keyword phrase (any text: words are "
        f"searched, punctuation and operators are not syntax; at most {MAX_QUERY_CHARS} chars).",
    )
    limit: int = Field(
        DEFAULT_LIMIT, ge=1, le=MAX_LIMIT, description=f"Hits to return (1..{MAX_LIMIT})."
    )
    kinds: list[str] | None = Field(
        None,
        max_length=MAX_KINDS,
        description="Memory types to keep (set semantics), e.g. observation, decision; "
        "unknown ones are rejected (unknown_kind), naming them.",
    )
    scopes: list[str] | None = Field(
        None,
        max_length=3,
        description="project, personal, team (default project + personal). Unknown values are "
        "rejected (unknown_scope).",
    )
    source: list[str] | None = Field(
        None,
        max_length=MAX_SOURCES,
        description="Keep hits written by these (set semantics, OR): an asserted_by value "
        "(user, agent, pipeline, ...) or a writer's actor. Filtered AFTER ranking, so survivors "
        "keep their order; an unknown source yields no hits (not an error).",
    )
    minConfidence: float = Field(
        0.0, ge=0, le=1, description="Drop hits whose writer confidence is below this."
    )
    hasPrimarySource: bool = Field(
        False,
        description="Keep only hits whose evidence includes a primary source: a cube fact, a "
        "scene or a verified signed answer. Filtered AFTER ranking.",
    )
    near: NearIn | None = Field(
        None, description="Keep items anchored within radius_m of a place, a cell or lat+lng."
    )
    at: str | None = Field(
        None,
        max_length=40,
        description="Valid-time anchor (RFC 3339 or YYYY-MM-DD): items whose valid time covers "
        "it rank first, the nearest next (items without a valid time are kept).",
    )
    asOf: str | None = Field(
        None,
        max_length=40,
        description="Transaction-time anchor: hide everything written after it, including "
        "later supersessions and deletions ('what did we know on X?').",
    )
    asOfEventUID: str | int | None = Field(
        None,
        description="A history entry: its seq (an integer, or its decimal text) or an item id "
        "(that item's creation). Resolves to that entry's time and uses it as asOf. Excludes "
        "asOf and at (conflicting_time_anchors).",
    )
    currentDate: str | None = Field(
        None,
        max_length=40,
        description="The caller's now (RFC 3339 or YYYY-MM-DD) for relative phrases such as "
        "'two weeks ago', 'last month', 'in March', 'yesterday'. Used with rewriteQuery; fills "
        "`at` only when `at` is unset.",
    )
    rewriteQuery: bool = Field(
        False,
        description="Resolve a relative date phrase in the query against currentDate (a "
        "deterministic date parser, no language model); the phrase is taken out of the text "
        "searched and the rewrite is reported.",
    )
    anchor: str | None = Field(
        None,
        max_length=128,
        description="An item id: candidates within anchorDepth hops of it over relations "
        "(supersedes, contradicts, derived_from, refines, depends_on, related; both "
        "directions) rank higher.",
    )
    anchorDepth: int = Field(
        1,
        ge=1,
        le=MAX_ANCHOR_DEPTH,
        description=f"Hop radius around anchor (1..{MAX_ANCHOR_DEPTH}).",
    )
    noGraph: bool = Field(False, description="Skip the graph lane.")
    compact: bool = Field(
        False,
        description="Per hit only {name, kind, snippet, fusedScore, entities} (id and place "
        "kept for citing): no item body, no per-lane components.",
    )
    maxTokens: int | None = Field(
        None,
        ge=1,
        le=1_000_000,
        description="Soft cap on the hits' estimated tokens (~4 bytes per token): hits are "
        "dropped lowest fusedScore first; the top hit is always kept.",
    )
    explain: bool = Field(
        False, description="Attach per-lane candidate counts and wall time under _meta."
    )
    fusion: Literal["weighted", "rrf"] = Field(
        "weighted",
        description="weighted (default): each lane's scores min-max normalised to [0, 1] and "
        "combined with fixed weights; rrf: reciprocal rank fusion (k = 60).",
    )
    embedDeadlineMs: int | None = Field(
        None,
        ge=1,
        le=60_000,
        description="Deadline of the query-embedding step; missed: the call answers without "
        "the vector lane (degraded).",
    )
    include_superseded: bool = Field(
        False,
        description="Also recall superseded and deleted items (as of asOf when given); "
        "they are hidden by default.",
    )


class RecallBody(BaseModel):
    """What recall answers (without its receipt)."""

    hits: list[dict[str, Any]] = Field(
        description="Ranked hits, best first. Verbose: {id, name, kind, item, fusedScore, "
        "components, verdict, fact_ids, place, snippet, entities}; compact: {id, name, kind, "
        "snippet, fusedScore, entities, place}."
    )
    lanes: list[str] = Field(description="The lanes that contributed candidates.")
    degraded: bool = Field(
        description="True when the vector lane could not run (no embedder, deadline missed): "
        "semantic matching did not run."
    )
    fusion: Literal["weighted", "rrf"] = Field(description="How lane scores were combined.")
    weak_match: bool = Field(
        description="True when nothing matches well (the subject is probably not in memory): "
        "the hits are the best candidates, not answers."
    )
    resolved: dict[str, Any] = Field(
        description="What the call resolved: the near place (gazetteer resolution), at, asOf "
        "(and the entry asOfEventUID named), the query rewrite, kinds and scopes applied."
    )
    notes: list[str] = Field(description="What was ignored, dropped or assumed.")
    head: dict[str, Any] = Field(description="The project's history head read ({seq, hash}).")
    meta: dict[str, Any] | None = Field(
        None,
        alias="_meta",
        serialization_alias="_meta",
        description="explain: per-lane candidate counts and wall ms, total wall ms.",
    )

    model_config = {"populate_by_name": True, "serialize_by_alias": True}


class RecallAnswer(Signed, RecallBody):
    """recall's answer with its receipt (naming the memory state it read)."""
