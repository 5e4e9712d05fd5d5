"""Models of the per-cell queries: did_change, trajectory, confirm."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from api.models.common import (
    AS_OF_DOC,
    CELL_SCHEMA,
    INPUT_CONFIG,
    OUTPUT_CONFIG,
    Claim,
    Fact,
    Signed,
    TSlot,
)

__all__ = [
    "ChangeEnd",
    "ConfirmAnswer",
    "ConfirmBody",
    "ConfirmIn",
    "DidChangeAnswer",
    "DidChangeBody",
    "DidChangeIn",
    "Significance",
    "TrajectoryAnswer",
    "TrajectoryBody",
    "TrajectoryIn",
    "TrajectoryPoint",
]


# --------------------------------------------------------------------------- did_change / trajectory


class DidChangeIn(BaseModel):
    """Arguments of did_change."""

    model_config = INPUT_CONFIG

    cell: str = Field(description="cell64 of the cell.", json_schema_extra=CELL_SCHEMA)
    band: str = Field(description="Scalar band, e.g. 'indices.ndvi', 's1.vh' (or 'ndvi', 'vh').")
    window: list[TSlot] = Field(
        description="Exactly two increasing tslots [t0, t1] (day slots: floor(unix_s/86400)). "
        "Get valid tslots from trajectory.",
        json_schema_extra={"minItems": 2, "maxItems": 2},
    )
    as_of: str | None = Field(None, description=AS_OF_DOC)


class ChangeEnd(BaseModel):
    """One end of the window."""

    model_config = OUTPUT_CONFIG

    tslot: int = Field(description="The tslot.")
    date: str = Field(description="ISO date of the tslot.")
    value: float = Field(description="The band's value at the cell.")
    clear: bool = Field(
        description="Whether the observation was clear (s2.clear == 2 / s1.valid == 1)."
    )


class Significance(BaseModel):
    """How the delta compares to the cell's own variability."""

    model_config = OUTPUT_CONFIG

    sigma: float = Field(description="Noise scale used (see rule).")
    sigma_floor: float = Field(description="Floor applied to sigma for this band.")
    z: float = Field(description="delta / sigma.")
    n_observations: int = Field(description="Clear observations of the cell used for sigma.")
    threshold: float = Field(description="|z| needed to call the change significant.")
    neighbour_delta_median: float | None = Field(
        description="Median delta of the 8 surrounding cells over the same window (context), null if none."
    )
    neighbour_count: int = Field(description="Neighbours with a value at both ends.")
    rule: str = Field(description="The decision rule, in words.")


class DidChangeBody(BaseModel):
    """did_change answer without its receipt."""

    model_config = OUTPUT_CONFIG

    cell: str = Field(description="cell64 asked about.")
    lat: float = Field(description="Cell centre latitude.")
    lng: float = Field(description="Cell centre longitude.")
    band: str = Field(description="Band (canonical name).")
    start: ChangeEnd = Field(description="Value at t0.")
    end: ChangeEnd = Field(description="Value at t1.")
    delta: float = Field(description="end.value - start.value.")
    changed: bool = Field(description="Same as significant (kept for intent callers).")
    significant: bool = Field(description="Whether the change passes the stated rule.")
    significance: Significance = Field(description="Numbers behind `significant`.")
    snapshot_id: str = Field(description="Store snapshot read.")
    facts: list[Fact] = Field(
        description="The two values (and the clear flags) the answer rests on."
    )


class DidChangeAnswer(Signed, DidChangeBody):
    """did_change answer."""


class TrajectoryIn(BaseModel):
    """Arguments of trajectory."""

    model_config = INPUT_CONFIG

    cell: str = Field(description="cell64 of the cell.", json_schema_extra=CELL_SCHEMA)
    band: str = Field(description="Scalar band, e.g. 'indices.ndvi' (or 'ndvi').")
    window: list[TSlot] | None = Field(
        None,
        description="Optional [t0, t1] (inclusive, increasing day slots).",
        json_schema_extra={"minItems": 2, "maxItems": 2},
    )
    as_of: str | None = Field(None, description=AS_OF_DOC)


class TrajectoryPoint(BaseModel):
    """One observation of the cell."""

    model_config = OUTPUT_CONFIG

    tslot: int = Field(description="Day slot.")
    date: str = Field(description="ISO date.")
    value: float | None = Field(description="Value, null when the observation was masked (cloud).")
    clear: bool = Field(description="Clear (usable) observation.")


class TrajectoryBody(BaseModel):
    """trajectory answer without its receipt."""

    model_config = OUTPUT_CONFIG

    cell: str = Field(description="cell64.")
    lat: float = Field(description="Cell centre latitude.")
    lng: float = Field(description="Cell centre longitude.")
    band: str = Field(description="Band (canonical name).")
    window: list[int] | None = Field(description="Window applied, if any.")
    points: list[TrajectoryPoint] = Field(
        description="Observations, oldest first (masked ones included)."
    )
    n_clear: int = Field(description="Points with a clear value.")
    valid_tslots: list[int] = Field(description="tslots usable in did_change's window.")
    snapshot_id: str = Field(description="Store snapshot read.")
    facts: list[Fact] = Field(description="One fact per clear value.")


class TrajectoryAnswer(Signed, TrajectoryBody):
    """trajectory answer."""


# --------------------------------------------------------------------------- confirm


class ConfirmIn(BaseModel):
    """Arguments of confirm."""

    model_config = INPUT_CONFIG

    claim: Claim = Field(description="The claim to test.")
    cell: str = Field(
        description="cell64 where the claim is tested.", json_schema_extra=CELL_SCHEMA
    )
    as_of: str | None = Field(None, description=AS_OF_DOC)


class ConfirmBody(BaseModel):
    """confirm answer without its receipt."""

    model_config = OUTPUT_CONFIG

    cell: str = Field(description="cell64.")
    claim: Claim = Field(description="The claim as evaluated (band canonicalised).")
    verdict: Literal["true", "false", "unknown"] = Field(
        description="true / false, or unknown when the cell has no fact the claim can rest on."
    )
    reason: str = Field(description="Why, in words.")
    aggregate: float | None = Field(
        description="The aggregated value compared (mean/min/max), if any."
    )
    snapshot_id: str = Field(description="Store snapshot read.")
    facts: list[Fact] = Field(description="The facts the verdict rests on.")


class ConfirmAnswer(Signed, ConfirmBody):
    """confirm answer."""
