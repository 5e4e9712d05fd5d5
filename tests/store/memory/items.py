"""What the memory store's conformance suites write: items, write metadata, head signatures."""

from __future__ import annotations

import dataclasses
import datetime as dt
import hashlib
import hmac
from pathlib import Path
from typing import Any

from store.memory.interface import WriteMeta
from store.memory.model import Anchor, NewItem, ProjectHead

REPO = Path(__file__).resolve().parents[3]
T0 = dt.datetime(2024, 8, 10, 12, 0, tzinfo=dt.UTC)
SECRET = b"conformance-signing-key"


def sign(head: ProjectHead) -> str:
    """An HMAC over the head (what the server's key would do)."""
    msg = f"{head.project}|{head.seq}|{head.hash}".encode()
    return hmac.new(SECRET, msg, hashlib.sha256).hexdigest()


def verify(head: ProjectHead, signature: str) -> bool:
    return hmac.compare_digest(sign(head), signature)


def new_item(title: str = "fields under water", **kw: Any) -> NewItem:
    """A valid observation anchored to a small box near (24.0, 89.0)."""
    base: dict[str, Any] = {
        "type": "observation",
        "title": title,
        "statement": f"{title} beside the Jumar river",
        "tags": ("flood", "river"),
        "details": None,
        "confidence": 0.6,
        "importance": 0.5,
        "evidence": ({"kind": "scene", "id": "S2A_X"},),
        "related_memory_ids": (),
        "metadata": {"note": 1},
        "asserted_by": "agent",
        "applicability": "current",
        "scope": {"kind": "project", "value": None},
        "anchor": Anchor(
            "bbox", {"type": "Polygon", "coordinates": []}, (24.0, 89.0, 24.01, 89.01), "c1"
        ),
        "valid_from": None,
        "valid_to": None,
        "claim": None,
        "verdict": None,
        "verdict_facts": (),
        "actor": "agent-1",
        "session": "s1",
        "embedding": (0.25, -1.5, 3.0),
    }
    base.update(kw)
    return NewItem(**base)


def meta(
    op: str | None = None, digest: str | None = None, at: dt.datetime = T0, actor: str = "agent-1"
) -> WriteMeta:
    return WriteMeta(actor=actor, at=at, operation_id=op, request_digest=digest, request_id="r1")


def item_fields(x: NewItem) -> dict[str, Any]:
    return {f.name: getattr(x, f.name) for f in dataclasses.fields(NewItem)}
