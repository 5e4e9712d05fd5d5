"""Fact ids as text: the two layouts, their parts, and whether two ids name one fact.

The layouts are described in :mod:`store.facts` (which computes the ids and re-exports
everything here): ``"f2:" + hex + ":" + cell + ":" + band + ":" + tslot``, and the earlier
``"f1:" + hex`` (the same digest, no address).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from store.errors import InvalidFact

__all__ = [
    "FACT_ID_PREFIX",
    "LEGACY_FACT_ID_PREFIX",
    "MAX_FACT_ID_CHARS",
    "FactAddress",
    "content_digest",
    "parse_fact_id",
    "same_fact",
]

FACT_ID_PREFIX = "f2:"
"""Prefix naming the fact-id layout (blake3 over canonical CBOR, then the fact's address)."""
LEGACY_FACT_ID_PREFIX = "f1:"
"""Prefix of the first layout (the same digest, no address): still compared, not resolvable."""
MAX_FACT_ID_CHARS = 512
"""Longest fact id parsed (a digest, a cell or ``geom:<digest>``, a band and a tslot)."""

_HEX64 = re.compile(r"[0-9a-f]{64}")


@dataclass(frozen=True)
class FactAddress:
    """What a fact id says: its content digest and, in the ``f2`` layout, where the fact is."""

    digest: str
    """64 lowercase hex: blake3 of the fact's canonical content."""
    layout: str
    """``"f2"`` (digest and address) or ``"f1"`` (digest only)."""
    cell: str | None = None
    """cell64 text, or ``geom:<digest>`` for an area statistic (None for ``f1``)."""
    band: str | None = None
    """Band name (None for ``f1``)."""
    tslot: int | None = None
    """Slot (None for ``f1``)."""


def parse_fact_id(text: object) -> FactAddress:
    """Read a fact id of either layout.

    Raises:
        InvalidFact: not a fact id (wrong prefix, digest or address).
    """
    if not isinstance(text, str) or len(text) > MAX_FACT_ID_CHARS:
        raise InvalidFact(f"not a fact id: {str(text)[:80]!r}")
    if text.startswith(LEGACY_FACT_ID_PREFIX) and _HEX64.fullmatch(text[3:]):
        return FactAddress(text[3:], "f1")
    if not text.startswith(FACT_ID_PREFIX) or not _HEX64.fullmatch(text[3:67]):
        raise InvalidFact(f"not a fact id: {text[:80]!r} (f2:<64 hex>:<cell>:<band>:<tslot>)")
    parts = text[68:].rsplit(":", 2) if text[67:68] == ":" else []
    if len(parts) != 3 or not all(parts) or not parts[2].isdigit() or len(parts[2]) > 12:
        raise InvalidFact(f"fact id {text[:80]!r} has no cell:band:tslot address")
    return FactAddress(text[3:67], "f2", parts[0], parts[1], int(parts[2]))


def content_digest(fact_id_text: str) -> str | None:
    """The content digest of a fact id of either layout (None: not a fact id)."""
    try:
        return parse_fact_id(fact_id_text).digest
    except InvalidFact:
        return None


def same_fact(a: str, b: str) -> bool:
    """Whether two fact ids name the same fact (equal digests; ``f1`` and ``f2`` alike)."""
    if a == b:
        return True
    da = content_digest(a)
    return da is not None and da == content_digest(b)
