"""The memory item and its parts, as the store holds them (frozen, validated at the API's edge).

A memory item is a typed, place-anchored note an agent (or a person, a test, the
pipeline) wrote about the Earth's surface: a statement with tags, confidence and
evidence, anchored to a place (a cell, a point, a bbox or polygon, or a named
place resolved through the gazetteer) and optionally to a valid time. Items are
isolated by project (the tenant a token belongs to); inside a project, ``scope``
is a label. Every change is an entry of the project's append-only, hash-chained
history.

This module is pure: no I/O. :mod:`store.memory.interface` is the storage
interface, :mod:`store.memory.sql` its SQL implementation, and
:mod:`store.memory.sqlite` / :mod:`store.memory.postgres` the two backends.
"""

from __future__ import annotations

import datetime as dt
import functools
import json
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any, Literal, TypeVar

__all__ = [
    "ACTIONS",
    "APPLICABILITY",
    "ASSERTED_BY",
    "NEEDS",
    "PLACELESS_TYPES",
    "RELATION_KINDS",
    "STATUSES",
    "TYPES",
    "VERDICTS",
    "Anchor",
    "BriefPage",
    "HistoryEntry",
    "ItemBrief",
    "ItemFilter",
    "ItemVectors",
    "MemoryItem",
    "NewItem",
    "Page",
    "ProjectHead",
    "Relation",
    "Token",
    "WriteResult",
    "anchor_from_dict",
    "built",
    "changed",
    "refusal",
]

_T = TypeVar("_T")

TYPES = (
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
)
"""The fourteen memory types of the reference writer (memory-create.txt)."""

PLACELESS_TYPES = ("decision", "contract", "constraint", "architecture", "implementation")
"""Types that may be written without a place (the others are Earth memories: anchored)."""

ASSERTED_BY = ("user", "test", "source", "git", "doc", "runtime", "agent", "pipeline")
"""Who established a claim (``pipeline``: earthmem's own re-checks)."""

APPLICABILITY = ("current", "legacy", "deprecated", "planned")
"""Whether an item applies now (orthogonal to its status)."""

STATUSES = ("active", "superseded", "potentially_stale", "deleted")
"""Lifecycle states."""

VERDICTS = ("corroborated", "contradicted", "unknown")
"""What the satellite record says of an item's claim (None: the item carries no claim)."""

RELATION_KINDS = ("supersedes", "contradicts", "derived_from", "refines", "depends_on", "related")
"""Typed relations between items (``supersedes`` is written by an update)."""

ACTIONS = ("create", "update", "supersede", "relate", "delete", "verify", "stale")
"""History entry actions."""

AnchorKind = Literal["cell", "point", "bbox", "polygon", "place", "none"]


@dataclass(frozen=True)
class Anchor:
    """Where an item is: a place, with the box the spatial index uses."""

    kind: AnchorKind
    """How the place was given."""
    geometry: Mapping[str, Any] | None
    """GeoJSON geometry of the place (Point for a cell or a point); None for ``none``."""
    bbox: tuple[float, float, float, float] | None
    """``(min_lat, min_lng, max_lat, max_lng)``; None for ``none``."""
    cell: str | None = None
    """The cell64 of the anchor's centre."""
    place: str | None = None
    """The name given, for ``place`` anchors (and the resolved feature's name)."""
    resolution: Mapping[str, Any] | None = None
    """How a place name was resolved (gazetteer match, confidence, alternatives)."""


@dataclass(frozen=True)
class NewItem:
    """The content of an item to write (the API has validated and completed it)."""

    type: str
    title: str
    statement: str
    tags: tuple[str, ...]
    details: str | None
    confidence: float
    importance: float
    evidence: tuple[Mapping[str, Any], ...]
    related_memory_ids: tuple[str, ...]
    metadata: Mapping[str, Any]
    asserted_by: str
    applicability: str
    scope: Mapping[str, Any]
    """``{"kind": ..., "value": ...}`` (a bare label becomes ``{"kind": label, "value": None}``)."""
    anchor: Anchor
    valid_from: dt.datetime | None
    valid_to: dt.datetime | None
    claim: Mapping[str, Any] | None
    verdict: str | None
    verdict_facts: tuple[str, ...]
    actor: str
    session: str | None
    embedding: tuple[float, ...] | None = None
    """A text embedding of the item (recall's vector lane), when an embedder is configured."""


@dataclass(frozen=True)
class MemoryItem(NewItem):
    """A stored item."""

    id: str = ""
    project: str = ""
    version: int = 1
    """Incremented by every change; updates name the version they expect."""
    status: str = "active"
    supersedes_id: str | None = None
    superseded_by: str | None = None
    deleted_reason: str | None = None
    created_at: dt.datetime | None = None
    updated_at: dt.datetime | None = None
    content_digest: str = ""
    """blake3 of the item's canonical content (what receipts bind)."""


@dataclass(frozen=True)
class Relation:
    """A typed edge between two items of one project."""

    src_id: str
    dst_id: str
    kind: str
    actor: str
    created_at: dt.datetime | None = None


@dataclass(frozen=True)
class HistoryEntry:
    """One entry of a project's append-only, hash-chained history."""

    project: str
    seq: int
    """1, 2, ... per project."""
    item_id: str | None
    action: str
    actor: str
    at: dt.datetime
    change: Mapping[str, Any]
    """What changed (the new content, the fields that changed, the verdict)."""
    request_id: str | None
    operation_id: str | None
    prev_hash: str
    """Hex hash of the previous entry (64 zeros for the first)."""
    hash: str
    """blake3(prev_hash || canonical CBOR of the entry's content), hex."""
    head_signature: str | None = None
    """The server's signature over ``(project, seq, hash)`` (verifies the head offline)."""


@dataclass(frozen=True)
class ProjectHead:
    """The head of a project's history."""

    project: str
    seq: int
    hash: str


@dataclass(frozen=True)
class WriteResult:
    """What one write did."""

    item: MemoryItem | None
    entry: HistoryEntry
    replayed: bool = False
    """True: the operation id was applied before; this is the stored result (nothing written)."""


@dataclass(frozen=True)
class ItemFilter:
    """Which items :meth:`MemoryStore.list_items` returns (all conditions AND-ed)."""

    types: tuple[str, ...] = ()
    tags: tuple[str, ...] = ()
    statuses: tuple[str, ...] = ("active", "potentially_stale")
    bbox: tuple[float, float, float, float] | None = None
    """Items whose anchor box intersects this ``(min_lat, min_lng, max_lat, max_lng)``."""
    valid_at: dt.datetime | None = None
    """Items whose valid time covers this instant (items without a valid time are kept)."""
    written_before: dt.datetime | None = None
    """Transaction time: only items created at or before this instant (``asOf``)."""
    scope_kinds: tuple[str, ...] = ()
    actor: str | None = None


@dataclass(frozen=True)
class Page:
    """One page of items."""

    items: tuple[MemoryItem, ...]
    next_cursor: str | None
    """Opaque cursor of the next page; None at the end."""


@dataclass(frozen=True)
class ItemBrief:
    """What ranking and filtering read of an item: everything but its body (statement,
    details, tags, evidence, metadata, claim, verdict, embedding), so a read decodes at
    most one JSON column (the anchor) instead of eight, and only when :attr:`anchor` is
    asked for (most candidates a ranking reads are dropped without their place being
    looked at). Attribute names are :class:`MemoryItem`'s."""

    id: str
    project: str
    type: str
    title: str
    status: str
    scope_kind: str
    """The item's ``scope["kind"]``."""
    actor: str
    asserted_by: str
    confidence: float
    importance: float
    anchor_doc: Any
    """The stored anchor: its JSON text (SQLite) or the decoded mapping (PostgreSQL)."""
    valid_from: dt.datetime | None
    valid_to: dt.datetime | None
    superseded_by: str | None
    created_at: dt.datetime

    @functools.cached_property
    def anchor(self) -> Anchor:
        """The item's anchor, decoded on first use (and kept)."""
        doc = self.anchor_doc
        return anchor_from_dict(json.loads(doc) if isinstance(doc, str | bytes) else doc)


@dataclass(frozen=True)
class BriefPage:
    """One page of item briefs (a listing's cursor, as :class:`Page`'s)."""

    items: tuple[ItemBrief, ...]
    next_cursor: str | None


@dataclass(frozen=True)
class Token:
    """An API token (only its hash is stored)."""

    id: str
    project: str
    can: tuple[str, ...]
    """``("read",)`` or ``("read", "write")``."""
    actor: str
    label: str | None
    created_at: dt.datetime
    expires_at: dt.datetime | None
    revoked_at: dt.datetime | None = None
    extra: Mapping[str, Any] = field(default_factory=dict)


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


@dataclass(frozen=True, eq=False)
class ItemVectors:
    """Per-item arrays recall's vector and geo-embedding lanes score in bulk
    (:meth:`~store.memory.interface.MemoryStore.item_vectors`).

    Row ``i`` of every array is item ``ids[i]``. ``embeddings`` holds the rows of
    the items embedded at the most common dimension; ``embedded[i]`` is that row's
    index in it, or -1 (no embedding, or one of another dimension).
    """

    ids: tuple[str, ...]
    lat: Any
    """float64 (n,): centre latitude of each item's anchor box (NaN: no place)."""
    lng: Any
    """float64 (n,): centre longitude (NaN: no place)."""
    embedded: Any
    """int64 (n,): row of the item in ``embeddings``, or -1."""
    embeddings: Any
    """float32 (m, d): the items' embeddings (``d`` 0 when none is stored)."""
    missing: int
    """Items without an embedding."""
    other_dim: int
    """Items embedded at another dimension than ``embeddings``' (an earlier embedder)."""

    @property
    def nbytes(self) -> int:
        """Bytes held by the arrays (cache accounting)."""
        return int(
            self.lat.nbytes + self.lng.nbytes + self.embedded.nbytes + self.embeddings.nbytes
        ) + 64 * len(self.ids)


_FIELDS: dict[type, frozenset[str]] = {}


def _field_names(cls: type) -> frozenset[str]:
    names = _FIELDS.get(cls)
    if names is None:
        names = _FIELDS[cls] = frozenset(f.name for f in fields(cls))
    return names


def built(cls: type[_T], values: dict[str, Any]) -> _T:
    """An instance of one of this module's frozen dataclasses from the value of every field,
    equal to ``cls(**values)`` but made without the generated ``__init__``: a frozen class's
    ``__init__`` sets each field through ``object.__setattr__``, about ten times the cost of
    filling the instance's ``__dict__``, and the store's reads build tens of briefs, anchors
    and items per recall. None of these classes has a ``__post_init__``.

    Raises:
        TypeError: ``values`` does not name exactly the class's fields.
    """
    names = _field_names(cls)
    if len(values) != len(names) or not names.issuperset(values):
        raise TypeError(f"{cls.__name__} takes the fields {sorted(names)}, got {sorted(values)}")
    obj = object.__new__(cls)
    obj.__dict__.update(values)
    return obj


def changed(obj: _T, **values: Any) -> _T:
    """``dataclasses.replace(obj, **values)`` for one of this module's frozen dataclasses,
    without the generated ``__init__`` (see :func:`built`), keeping what the object has
    already computed (an :class:`ItemBrief`'s decoded anchor): recall gives every candidate
    its status as of ``asOf`` this way.

    Raises:
        TypeError: a name that is not a field.
    """
    cls = type(obj)
    names = _field_names(cls)
    if not names.issuperset(values):
        raise TypeError(f"{cls.__name__} has no fields {sorted(set(values) - names)}")
    new = object.__new__(cls)
    new.__dict__.update(obj.__dict__)
    new.__dict__.update(values)
    return new


def anchor_from_dict(d: Mapping[str, Any]) -> Anchor:
    """An anchor from its JSON-shaped mapping (inverse of
    :func:`store.memory.digest.anchor_to_dict`)."""
    bbox = d.get("bbox")
    return built(
        Anchor,
        {
            "kind": d["kind"],
            "geometry": d.get("geometry"),
            "bbox": (float(bbox[0]), float(bbox[1]), float(bbox[2]), float(bbox[3]))
            if bbox
            else None,
            "cell": d.get("cell"),
            "place": d.get("place"),
            "resolution": d.get("resolution"),
        },
    )
