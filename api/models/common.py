"""Models every query family shares: the receipt, facts, claims, and signed answers.

Every answer model is ``<Name>Body`` (what is signed) plus ``receipt``, made
one way: ``class <Name>Answer(Signed, <Name>Body)``. The service builds the
body, dumps it with ``model_dump(mode="json")``, signs that dict and validates
the signed dict into the answer model, so ``answer.model_dump(mode="json")``
is exactly the signed document and :func:`api.receipts.verify_answer` accepts
it after a JSON round trip.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, WithJsonSchema

from store.address import CELL64_PATTERN
from store.tslot import MAX_DAY_SLOT

__all__ = [
    "AS_OF_DOC",
    "BBOX_SCHEMA",
    "CELL_SCHEMA",
    "INPUT_CONFIG",
    "KEY_SCHEMA",
    "OUTPUT_CONFIG",
    "BBox",
    "Claim",
    "Fact",
    "Receipt",
    "Signed",
    "TSlot",
]

AS_OF_DOC = (
    "Read the snapshot committed at or before this RFC 3339 time, or the snapshot with this id "
    "(default: the newest); the answer's snapshot_id names the snapshot read."
)
"""Description of every cube primitive's ``as_of`` argument (parsed by
:meth:`api.context.ServiceContext.reader_as_of`)."""

INPUT_CONFIG = ConfigDict(extra="forbid", populate_by_name=True, strict=True)
"""Config of argument models: unknown fields refused, aliases and names both accepted, no
coercion (``"10"`` is not an int, ``1`` not a bool; an int is accepted for a float)."""

CELL_SCHEMA: dict[str, Any] = {"pattern": CELL64_PATTERN}
"""JSON-schema keywords of a cell64 argument (checked in full by ``store.address``, whose
``invalid_cell`` answers a text that fits the pattern but names no geo cell)."""

KEY_SCHEMA: dict[str, Any] = {"pattern": "^(?:" + CELL64_PATTERN[1:-1] + "|inline:.*)$"}
"""JSON-schema keywords of a find_similar key: a cell64 or ``inline:[x, ...]``."""

TSlot = Annotated[int, Field(ge=0, le=MAX_DAY_SLOT)]
"""A tslot argument: one range for every tslot sent (day slots ``0..MAX_DAY_SLOT``; year slots
are the small ones in it)."""

_LAT = {"type": "number", "minimum": -90, "maximum": 90}
_LNG = {"type": "number", "minimum": -180, "maximum": 180}
BBOX_SCHEMA: dict[str, Any] = {
    "anyOf": [
        {
            "type": "object",
            "properties": {"min_lat": _LAT, "min_lng": _LNG, "max_lat": _LAT, "max_lng": _LNG},
            "required": ["min_lat", "min_lng", "max_lat", "max_lng"],
            "additionalProperties": False,
        },
        {
            "type": "array",
            "prefixItems": [_LAT, _LNG, _LAT, _LNG],
            "items": False,
            "minItems": 4,
            "maxItems": 4,
            "description": "[min_lat, min_lng, max_lat, max_lng]",
        },
        {"type": "null"},
    ]
}
"""The published shape of a bbox argument (the area code validates it; the schema lets a
client check before sending). A box may cross the antimeridian (min_lng > max_lng)."""

BBox = Annotated[Any, WithJsonSchema(BBOX_SCHEMA)]
"""A bbox argument: validated by the area code, published as :data:`BBOX_SCHEMA`."""

OUTPUT_CONFIG = ConfigDict(extra="forbid")
"""Config of answer models and their parts: unknown fields refused."""


class Receipt(BaseModel):
    """Signed receipt (layout: :mod:`api.receipts`)."""

    model_config = OUTPUT_CONFIG

    version: int = Field(description="Receipt layout version (1).")
    request_id: str = Field(description="Id of this request.")
    served_at: str = Field(description="RFC 3339 UTC time the answer was signed.")
    primitive: str = Field(description="Query name.")
    query: dict[str, Any] = Field(description="The query arguments, normalised (nulls dropped).")
    query_digest: str = Field(description="blake3 of the canonical CBOR of {primitive, args}, hex.")
    cells: list[str] = Field(description="cell64s the answer read (sorted, unique).")
    fact_ids: list[str] = Field(description="Ids of the facts the answer rests on (sorted).")
    snapshot_id: str = Field(description="Store snapshot the answer read.")
    answer_digest: str = Field(description="blake3 of the canonical CBOR of the answer body, hex.")
    key_id: str = Field(description="Signing key id (first 16 hex of blake3(public key)).")
    public_key: str = Field(description="ed25519 public key, hex.")
    signature: str = Field(description="ed25519 signature over blake3(preimage), hex.")


class Fact(BaseModel):
    """One value read from the store, with its content id."""

    model_config = OUTPUT_CONFIG

    fact_id: str = Field(
        description="blake3 content id of {cell, band, tslot, value, sources, derivation}."
    )
    cell: str = Field(description="cell64 (or 'geom:<digest>' for an area statistic).")
    band: str = Field(description="Band the value belongs to.")
    tslot: int = Field(description="Time slot (day slot, or year slot for Tessera).")
    date: str = Field(description="ISO date of the tslot (a year's 1 January for year slots).")
    value: Any = Field(description="The value (number, embedding object, or statistics object).")
    sources: list[str] = Field(description="Source item ids (STAC / Tessera tiles), sorted.")
    derivation: str = Field(description="Name and version of the computation that produced it.")


class Claim(BaseModel):
    """A claim about one band at a cell: ``{band, op, value, tslot? | window?, agg?}``."""

    model_config = INPUT_CONFIG

    band: str = Field(
        description="Band, e.g. 'indices.ndvi' (short index names like 'ndvi' accepted)."
    )
    op: str = Field(description="eq ne lt le gt ge in ni exists absent.")
    value: Any = Field(
        None, description="Comparison value (a list for in/ni; unused by exists/absent)."
    )
    tslot: TSlot | None = Field(None, description="Evaluate at this tslot only.")
    window: list[TSlot] | None = Field(
        None, description="Evaluate over the facts with t0 <= tslot <= t1 (two increasing ints)."
    )
    agg: str | None = Field(
        None,
        description="How several facts combine: any (default), all, mean, min, max. "
        "Without tslot/window the cell's latest fact is used.",
    )


class Signed(BaseModel):
    """Base that turns an answer body into the signed answer: the body's fields, then ``receipt``.

    List it before the body (``class DidChangeAnswer(Signed, DidChangeBody)``):
    pydantic collects fields from the last base to the first, so the body's
    fields come first and ``receipt`` last, in the order of the signed document.
    """

    model_config = OUTPUT_CONFIG

    receipt: Receipt = Field(description="Signed receipt.")
