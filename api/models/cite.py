"""Models of citing and checking: verify_receipt (a saved answer's receipt) and fact (a fact id)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

from api.models.common import INPUT_CONFIG, OUTPUT_CONFIG, Fact, Signed

__all__ = [
    "FactAnswer",
    "FactBody",
    "FactIn",
    "VerifyReceiptAnswer",
    "VerifyReceiptBody",
    "VerifyReceiptIn",
]


class VerifyReceiptIn(BaseModel):
    """Arguments of verify_receipt."""

    model_config = INPUT_CONFIG

    answer: dict[str, Any] = Field(
        description="A saved answer with its receipt (an intent answer's `result` is taken)."
    )
    public_key: str | None = Field(
        None,
        description="Trusted ed25519 public key, 64 hex; default: the key embedded in the "
        "receipt (integrity, not provenance).",
    )


class VerifyReceiptBody(BaseModel):
    """verify_receipt answer without its receipt."""

    model_config = OUTPUT_CONFIG

    valid: bool = Field(description="Whether every check of the receipt passed.")
    reason: str = Field(description="'ok', or the first check that failed.")
    key_id: str | None = Field(description="Key id the checked receipt names, when readable.")
    key_trusted: bool = Field(description="Checked against the given public_key.")
    signed_by_this_server: bool = Field(
        description="Whether the checked receipt's key is this server's signing key."
    )
    primitive: str | None = Field(description="Primitive the checked answer came from.")
    checked_snapshot_id: str | None = Field(description="Snapshot the checked answer names.")


class VerifyReceiptAnswer(Signed, VerifyReceiptBody):
    """verify_receipt answer."""


class FactIn(BaseModel):
    """Arguments of fact."""

    model_config = INPUT_CONFIG

    fact_id: str = Field(description="A fact id from any answer's facts (f2:...).")


class FactBody(BaseModel):
    """fact answer without its receipt."""

    model_config = OUTPUT_CONFIG

    fact: Fact = Field(description="The fact the id names (cell, band, tslot, value, sources).")
    found_in_snapshot: str = Field(description="The newest snapshot holding this fact.")
    current_snapshot: str = Field(description="The snapshot read now (the tip).")
    current_holds: bool = Field(description="Whether the current snapshot holds the same fact.")
    current_fact: Fact | None = Field(
        description="When it does not: the fact now at the same cell, band and tslot."
    )
    snapshots_searched: int = Field(description="Snapshots read, newest first.")
    snapshot_id: str = Field(description="Same as current_snapshot.")
    facts: list[Fact] = Field(description="The fact (and the current one when it differs).")


class FactAnswer(Signed, FactBody):
    """fact answer."""
