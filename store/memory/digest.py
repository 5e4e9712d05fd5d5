"""What an item *says*, its content digest, and new item ids.

The content digest binds what an item states, where and when, on what
evidence and by whom: the fields :data:`CONTENT_FIELDS` of
:class:`~store.memory.model.NewItem`, as plain JSON-shaped values (tuples as
lists, the anchor as a mapping, times as RFC 3339 strings), hashed as
``blake3(canonical CBOR)`` (:func:`store.facts.canonical_cbor`). Left out:
the lifecycle (status, version, supersession, timestamps: they change without
the statement changing), the satellite verdict (a re-check's output, recorded
in the history) and the embedding (derived from the text by whatever embedder
is configured). A change of ``metadata`` changes the digest.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from dataclasses import fields
from typing import Any

from ulid import ULID

from store.errors import InvalidDate
from store.facts import canonical_cbor, digest
from store.memory.model import Anchor, NewItem, anchor_from_dict

__all__ = [
    "CONTENT_FIELDS",
    "ITEM_ID_PREFIX",
    "anchor_from_dict",
    "anchor_to_dict",
    "content_digest",
    "content_of",
    "digest_of_content",
    "new_item_id",
    "require_aware",
    "rfc3339",
]

ITEM_ID_PREFIX = "mem_"
"""Item ids are ``mem_`` + a ULID (time-ordered, 26 Crockford base32 characters)."""

CONTENT_FIELDS = (
    "type",
    "title",
    "statement",
    "tags",
    "details",
    "confidence",
    "importance",
    "evidence",
    "related_memory_ids",
    "metadata",
    "asserted_by",
    "applicability",
    "scope",
    "anchor",
    "valid_from",
    "valid_to",
    "claim",
    "actor",
    "session",
)
"""The :class:`NewItem` fields the content digest covers (see the module docstring)."""


def new_item_id(at: dt.datetime | None = None) -> str:
    """A new item id: ``mem_`` + a ULID (its time part from ``at`` when given)."""
    ulid = ULID.from_datetime(at) if at is not None else ULID()
    return ITEM_ID_PREFIX + str(ulid)


def rfc3339(t: dt.datetime) -> str:
    """``YYYY-MM-DDTHH:MM:SS.ffffffZ`` of an aware datetime (UTC).

    Raises:
        InvalidDate: a naive datetime (the store never guesses a time zone).
    """
    u = require_aware(t).astimezone(dt.UTC)
    if u.year < 1000:  # strftime does not pad such years; digests already made keep them
        return u.strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    # the same text as that strftime, by the C isoformat (every write formats a few times)
    return u.isoformat(timespec="microseconds")[:-6] + "Z"


def require_aware(t: dt.datetime) -> dt.datetime:
    """``t`` when it is timezone-aware.

    Raises:
        InvalidDate: a naive datetime (the store never guesses a time zone).
    """
    if t.tzinfo is None or t.utcoffset() is None:
        raise InvalidDate(f"memory times must be timezone-aware (UTC), got naive {t.isoformat()}")
    return t


_ANCHOR_FIELDS = ("kind", "geometry", "bbox", "cell", "place", "resolution")
if tuple(f.name for f in fields(Anchor)) != _ANCHOR_FIELDS:  # anchor_to_dict names them all
    raise ImportError("Anchor's fields changed: update store.memory.digest.anchor_to_dict")


def anchor_to_dict(anchor: Anchor) -> dict[str, Any]:
    """The anchor as a JSON-shaped mapping (``bbox`` as a list of floats)."""
    return {  # the dataclass's fields in order (what ``asdict`` gave), without its deep copy
        "kind": anchor.kind,
        "geometry": _plain(anchor.geometry),
        "bbox": [float(x) for x in anchor.bbox] if anchor.bbox is not None else None,
        "cell": anchor.cell,
        "place": anchor.place,
        "resolution": _plain(anchor.resolution),
    }


_LEAVES = (str, int, float, bool, type(None))


def _plain(value: Any) -> Any:
    """Mappings and tuples as dicts and lists (what JSON columns and CBOR hold)."""
    if type(value) in _LEAVES:  # the common case, without the ABC check below
        return value
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value


def content_of(item: NewItem) -> dict[str, Any]:
    """The digested content of an item: :data:`CONTENT_FIELDS` as JSON-shaped values."""
    out: dict[str, Any] = {}
    for name in CONTENT_FIELDS:
        value = getattr(item, name)
        if name == "anchor":
            value = anchor_to_dict(value)
        elif name in ("confidence", "importance"):
            value = float(value)  # stored as floats: 1 and 1.0 must digest alike
        elif isinstance(value, dt.datetime):
            value = rfc3339(value)
        else:
            value = _plain(value)
        out[name] = value
    return out


def digest_of_content(content: Mapping[str, Any]) -> str:
    """Hex blake3 of the canonical CBOR of an item's :func:`content_of` (computed once per write)."""
    return digest(canonical_cbor(content)).hex()


def content_digest(item: NewItem) -> str:
    """Hex blake3 of the canonical CBOR of :func:`content_of` (what receipts bind)."""
    return digest_of_content(content_of(item))
