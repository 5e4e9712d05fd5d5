"""Rows to model objects and back, times as microseconds, and page cursors.

One place for the conversions both backends share, so that an item read back
equals the item written (floats, tuples, times and the embedding exactly).
"""

from __future__ import annotations

import base64
import binascii
import datetime as dt
import json
import struct
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from store.errors import CanonicalFormError, InvalidCursor
from store.facts import canonical_cbor, digest
from store.memory.digest import anchor_from_dict, anchor_to_dict, require_aware, rfc3339
from store.memory.model import (
    HistoryEntry,
    ItemFilter,
    ItemVectors,
    MemoryItem,
    NewItem,
    Relation,
    Token,
    built,
)

__all__ = [
    "JsonText",
    "decode_cursor",
    "encode_cursor",
    "entry_from_row",
    "filter_key",
    "from_us",
    "item_from_row",
    "item_row",
    "item_vectors_from_rows",
    "json_pair",
    "jsonable",
    "pack_vector",
    "relation_from_row",
    "to_us",
    "token_from_row",
    "token_row",
    "unpack_vector",
]

_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
_DELTA = dt.timedelta


def to_us(t: dt.datetime) -> int:
    """Microseconds since the epoch of an aware datetime.

    Raises:
        InvalidDate: a naive datetime.
    """
    delta = require_aware(t) - _EPOCH
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


def from_us(us: int) -> dt.datetime:
    """Inverse of :func:`to_us` (aware UTC)."""
    # positional (days, seconds, microseconds): half the cost of the keyword form, and
    # reads convert three times per row
    return _EPOCH + _DELTA(0, 0, int(us))


def _opt_us(t: dt.datetime | None) -> int | None:
    return None if t is None else to_us(t)


def _opt_dt(us: int | None) -> dt.datetime | None:
    return None if us is None else from_us(us)


def pack_vector(vec: tuple[float, ...] | None) -> bytes | None:
    """An embedding as little-endian float64 bytes (exact; None stays None)."""
    return None if vec is None else struct.pack(f"<{len(vec)}d", *vec)


def unpack_vector(blob: bytes | None) -> tuple[float, ...] | None:
    """Inverse of :func:`pack_vector`."""
    if blob is None:
        return None
    return struct.unpack(f"<{len(blob) // 8}d", bytes(blob))


def item_vectors_from_rows(rows: Any) -> ItemVectors:
    """:class:`ItemVectors` of ``(id, embedding, min_lat, min_lng, max_lat, max_lng)`` rows.

    Embeddings are packed float64 (:func:`pack_vector`); they are kept at float32
    (what cosine ranking needs). Rows of a dimension other than the most common
    one are counted in ``other_dim``, not returned.
    """
    n = len(rows)
    ids = tuple(str(r[0]) for r in rows)
    box = np.array(
        [[np.nan if v is None else v for v in r[2:6]] for r in rows], dtype=np.float64
    ).reshape(n, 4)
    lat = (box[:, 0] + box[:, 2]) / 2
    lng = (box[:, 1] + box[:, 3]) / 2
    blobs = [bytes(r[1]) if r[1] is not None else None for r in rows]
    sizes = [len(b) // 8 if b else 0 for b in blobs]
    counts: dict[int, int] = {}
    for size in sizes:
        if size:
            counts[size] = counts.get(size, 0) + 1
    d = max(counts, key=lambda k: (counts[k], k)) if counts else 0
    embedded = np.full(n, -1, dtype=np.int64)
    keep = [i for i, size in enumerate(sizes) if size == d and d]
    matrix = np.zeros((len(keep), d), dtype=np.float32)
    for j, i in enumerate(keep):
        matrix[j] = np.frombuffer(blobs[i], dtype="<f8")  # type: ignore[arg-type]
        embedded[i] = j
    missing = sum(1 for size in sizes if not size)
    return ItemVectors(
        ids=ids,
        lat=lat,
        lng=lng,
        embedded=embedded,
        embeddings=matrix,
        missing=missing,
        other_dim=n - missing - len(keep),
    )


def jsonable(value: Any) -> Any:
    """A JSON round trip of ``value`` (mappings/tuples as dicts/lists; what JSON columns store).

    Raises:
        CanonicalFormError: a value JSON cannot hold (NaN, infinity, an unsupported type).
    """
    try:
        return json.loads(json.dumps(value, allow_nan=False))
    except (TypeError, ValueError) as exc:
        raise CanonicalFormError(f"value cannot be stored as JSON: {exc}") from exc


@dataclass(frozen=True, slots=True)
class JsonText:
    """A JSON column's value already serialised: the write path sends ``text`` as the
    parameter instead of dumping the value a second time (:mod:`store.memory.prepared`)."""

    text: str


def json_pair(value: Any) -> tuple[Any, JsonText]:
    """:func:`jsonable` of ``value`` and the JSON text it was read back from (one dump).

    Raises:
        CanonicalFormError: as :func:`jsonable`.
    """
    try:
        text = json.dumps(value, allow_nan=False)
        return json.loads(text), JsonText(text)
    except (TypeError, ValueError) as exc:
        raise CanonicalFormError(f"value cannot be stored as JSON: {exc}") from exc


def item_row(
    item: NewItem,
    *,
    item_id: str,
    project: str,
    at: dt.datetime,
    digest_hex: str,
    supersedes_id: str | None,
    texts: dict[str, JsonText] | None = None,
) -> dict[str, Any]:
    """The ``items`` row of a new item (version 1, active).

    ``texts``, when given, receives the JSON text of each JSON column the row holds a
    round-tripped value of (the statement's parameters: no second dump).
    """
    bbox = item.anchor.bbox
    at_us = to_us(at)
    sink: dict[str, JsonText] = texts if texts is not None else {}

    def js(column: str, value: Any) -> Any:
        plain, sink[column] = json_pair(value)
        return plain

    return {
        "id": item_id,
        "project": project,
        "type": item.type,
        "title": item.title,
        "statement": item.statement,
        "tags": list(item.tags),
        "tags_text": " ".join(item.tags),
        "details": item.details,
        "confidence": float(item.confidence),
        "importance": float(item.importance),
        "evidence": js("evidence", list(item.evidence)),
        "related_memory_ids": list(item.related_memory_ids),
        "metadata": js("metadata", dict(item.metadata)),
        "asserted_by": item.asserted_by,
        "applicability": item.applicability,
        "scope": js("scope", dict(item.scope)),
        "scope_kind": str(item.scope.get("kind") or ""),
        "anchor": js("anchor", anchor_to_dict(item.anchor)),
        "min_lat": bbox[0] if bbox else None,
        "min_lng": bbox[1] if bbox else None,
        "max_lat": bbox[2] if bbox else None,
        "max_lng": bbox[3] if bbox else None,
        "valid_from": _opt_us(item.valid_from),
        "valid_to": _opt_us(item.valid_to),
        "claim": js("claim", dict(item.claim)) if item.claim is not None else None,
        "verdict": item.verdict,
        "verdict_facts": list(item.verdict_facts),
        "actor": item.actor,
        "session": item.session,
        "embedding": pack_vector(item.embedding),
        "version": 1,
        "status": "active",
        "supersedes_id": supersedes_id,
        "superseded_by": None,
        "deleted_reason": None,
        "created_at": at_us,
        "updated_at": at_us,
        "content_digest": digest_hex,
    }


def item_from_row(r: Mapping[Any, Any]) -> MemoryItem:
    """A stored item from its ``items`` row."""
    return built(
        MemoryItem,
        {
            "type": r["type"],
            "title": r["title"],
            "statement": r["statement"],
            "tags": tuple(r["tags"]),
            "details": r["details"],
            "confidence": r["confidence"],
            "importance": r["importance"],
            "evidence": tuple(r["evidence"]),
            "related_memory_ids": tuple(r["related_memory_ids"]),
            "metadata": r["metadata"],
            "asserted_by": r["asserted_by"],
            "applicability": r["applicability"],
            "scope": r["scope"],
            "anchor": anchor_from_dict(r["anchor"]),
            "valid_from": _opt_dt(r["valid_from"]),
            "valid_to": _opt_dt(r["valid_to"]),
            "claim": r["claim"],
            "verdict": r["verdict"],
            "verdict_facts": tuple(r["verdict_facts"]),
            "actor": r["actor"],
            "session": r["session"],
            "embedding": unpack_vector(r["embedding"]),
            "id": r["id"],
            "project": r["project"],
            "version": r["version"],
            "status": r["status"],
            "supersedes_id": r["supersedes_id"],
            "superseded_by": r["superseded_by"],
            "deleted_reason": r["deleted_reason"],
            "created_at": from_us(r["created_at"]),
            "updated_at": from_us(r["updated_at"]),
            "content_digest": r["content_digest"],
        },
    )


def entry_from_row(r: Mapping[Any, Any]) -> HistoryEntry:
    """A history entry from its ``history`` row."""
    return HistoryEntry(
        project=r["project"],
        seq=r["seq"],
        item_id=r["item_id"],
        action=r["action"],
        actor=r["actor"],
        at=from_us(r["at"]),
        change=r["change"],
        request_id=r["request_id"],
        operation_id=r["operation_id"],
        prev_hash=r["prev_hash"],
        hash=r["hash"],
        head_signature=r["head_signature"],
    )


def relation_from_row(r: Mapping[Any, Any]) -> Relation:
    """A relation from its ``relations`` row."""
    return Relation(
        src_id=r["src_id"],
        dst_id=r["dst_id"],
        kind=r["kind"],
        actor=r["actor"],
        created_at=from_us(r["created_at"]),
    )


def token_row(token: Token, token_hash: str) -> dict[str, Any]:
    """The ``tokens`` row of a token."""
    return {
        "id": token.id,
        "project": token.project,
        "token_hash": token_hash,
        "can": list(token.can),
        "actor": token.actor,
        "label": token.label,
        "created_at": to_us(token.created_at),
        "expires_at": _opt_us(token.expires_at),
        "revoked_at": _opt_us(token.revoked_at),
        "extra": jsonable(dict(token.extra)),
    }


def token_from_row(r: Mapping[Any, Any]) -> Token:
    """A token from its ``tokens`` row."""
    return Token(
        id=r["id"],
        project=r["project"],
        can=tuple(r["can"]),
        actor=r["actor"],
        label=r["label"],
        created_at=from_us(r["created_at"]),
        expires_at=_opt_dt(r["expires_at"]),
        revoked_at=_opt_dt(r["revoked_at"]),
        extra=r["extra"],
    )


# --------------------------------------------------------------------------- cursors


def filter_key(project: str, where: ItemFilter) -> str:
    """A short digest of a listing's project and filter (binds a cursor to its query)."""
    body = {
        "project": project,
        "types": list(where.types),
        "tags": list(where.tags),
        "statuses": list(where.statuses),
        "bbox": list(where.bbox) if where.bbox else None,
        "valid_at": rfc3339(where.valid_at) if where.valid_at else None,
        "written_before": rfc3339(where.written_before) if where.written_before else None,
        "scope_kinds": list(where.scope_kinds),
        "actor": where.actor,
    }
    return digest(canonical_cbor(body)).hex()[:16]


def encode_cursor(created_at_us: int, item_id: str, key: str) -> str:
    """The opaque cursor after the item ``(created_at, id)`` of the listing ``key``."""
    raw = json.dumps([created_at_us, item_id, key], separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_cursor(cursor: str, key: str) -> tuple[int, str]:
    """``(created_at µs, id)`` of a cursor :func:`encode_cursor` issued for the same listing.

    Raises:
        InvalidCursor: not such a cursor, or one issued for another project or filter.
    """
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        created, item_id, got = json.loads(raw)
    except (binascii.Error, ValueError, TypeError, UnicodeDecodeError) as exc:
        raise InvalidCursor("not a cursor this store issued") from exc
    if not isinstance(created, int) or not isinstance(item_id, str) or got != key:
        raise InvalidCursor("a cursor of another listing (project or filter differ)")
    return created, item_id
