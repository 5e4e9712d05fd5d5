"""Models every query family shares: the receipt, facts, claims, and signed answers.

Every answer model is ``<Name>Body`` (what is signed) plus ``receipt``, made
one way: ``class <Name>Answer(Signed, <Name>Body)``. The service builds the
body, dumps it with ``model_dump(mode="json")``, signs that dict and validates
the signed dict into the answer model, so ``answer.model_dump(mode="json")``
is exactly the signed document and :func:`api.receipts.verify_answer` accepts
it after a JSON round trip.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

__all__ = [
    "INPUT_CONFIG",
    "OUTPUT_CONFIG",
    "Claim",
    "Fact",
    "Receipt",
    "Signed",
]

INPUT_CONFIG = ConfigDict(extra="forbid", populate_by_name=True)
"""Config of argument models: unknown fields refused, aliases and names both accepted."""

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
    tslot: int | None = Field(None, description="Evaluate at this tslot only.")
    window: list[int] | None = Field(
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
