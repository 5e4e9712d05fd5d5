"""Memory items, relations and history entries as JSON answer parts."""

from __future__ import annotations

import datetime as dt
from typing import Any

from store.memory.model import Anchor, HistoryEntry, MemoryItem, ProjectHead, Relation

__all__ = ["anchor_out", "entry_out", "head_out", "item_out", "memory_state", "relation_out"]


def _time(value: dt.datetime | None) -> str | None:
    return None if value is None else value.astimezone(dt.UTC).isoformat().replace("+00:00", "Z")


def anchor_out(anchor: Anchor) -> dict[str, Any] | None:
    """The item's place (None for an item without one)."""
    if anchor.kind == "none":
        return None
    min_lat, min_lng, max_lat, max_lng = anchor.bbox or (None, None, None, None)
    return {
        "kind": anchor.kind,
        "cell": anchor.cell,
        "bbox": {"min_lat": min_lat, "min_lng": min_lng, "max_lat": max_lat, "max_lng": max_lng},
        "geometry": dict(anchor.geometry) if anchor.geometry is not None else None,
        "place": anchor.place,
        "resolution": dict(anchor.resolution) if anchor.resolution is not None else None,
    }


def item_out(item: MemoryItem) -> dict[str, Any]:
    """A stored item as the answers show it."""
    return {
        "id": item.id,
        "version": item.version,
        "status": item.status,
        "type": item.type,
        "title": item.title,
        "statement": item.statement,
        "details": item.details,
        "tags": list(item.tags),
        "confidence": item.confidence,
        "importance": item.importance,
        "evidence": [dict(e) for e in item.evidence],
        "related_memory_ids": list(item.related_memory_ids),
        "metadata": dict(item.metadata),
        "asserted_by": item.asserted_by,
        "applicability": item.applicability,
        "scope": dict(item.scope),
        "supersedes_id": item.supersedes_id,
        "superseded_by": item.superseded_by,
        "where": anchor_out(item.anchor),
        "valid_from": _time(item.valid_from),
        "valid_to": _time(item.valid_to),
        "claim": dict(item.claim) if item.claim is not None else None,
        "verdict": item.verdict,
        "verdict_facts": list(item.verdict_facts),
        "actor": item.actor,
        "session": item.session,
        "deleted_reason": item.deleted_reason,
        "created_at": _time(item.created_at),
        "updated_at": _time(item.updated_at),
        "content_digest": item.content_digest,
    }


def relation_out(rel: Relation) -> dict[str, Any]:
    """A relation as the answers show it."""
    return {
        "src_id": rel.src_id,
        "dst_id": rel.dst_id,
        "kind": rel.kind,
        "actor": rel.actor,
        "created_at": _time(rel.created_at),
    }


def entry_out(entry: HistoryEntry) -> dict[str, Any]:
    """A history entry as the answers show it."""
    return {
        "seq": entry.seq,
        "item_id": entry.item_id,
        "action": entry.action,
        "actor": entry.actor,
        "at": _time(entry.at),
        "change": dict(entry.change),
        "request_id": entry.request_id,
        "operation_id": entry.operation_id,
        "prev_hash": entry.prev_hash,
        "hash": entry.hash,
        "head_signature": entry.head_signature,
    }


def head_out(head: ProjectHead) -> dict[str, Any]:
    """The project's history head."""
    return {"seq": head.seq, "hash": head.hash}


def memory_state(head: ProjectHead) -> str:
    """What a memory answer's receipt names as the state it read or wrote (its ``snapshot_id``)."""
    return f"memory:{head.project}:{head.seq}:{head.hash}"
