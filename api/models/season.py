"""Models of compare_same_doy: a value against the same season of other years."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

from api.models.common import (
    AS_OF_DOC,
    CELL_SCHEMA,
    INPUT_CONFIG,
    OUTPUT_CONFIG,
    BBox,
    Fact,
    Signed,
)

__all__ = [
    "MAX_YEARS",
    "SEASON_HALF_DAYS",
    "CompareSameDoyAnswer",
    "CompareSameDoyBody",
    "CompareSameDoyIn",
    "SeasonPoint",
    "YearSeason",
]

SEASON_HALF_DAYS = 15
"""Half-width of the season window (days either side of the same calendar day)."""
MAX_YEARS = 50
"""Most years one call compares against."""


class CompareSameDoyIn(BaseModel):
    """Arguments of compare_same_doy (one of cell, geometry, bbox)."""

    model_config = INPUT_CONFIG

    cell: str | None = Field(None, description="cell64 of one cell.", json_schema_extra=CELL_SCHEMA)
    geometry: dict[str, Any] | None = Field(
        None, description="GeoJSON Polygon or MultiPolygon: its weighted median per overpass."
    )
    bbox: BBox = Field(None, description="A bbox instead of a geometry.")
    band: str = Field(description="Scalar band, e.g. 'indices.ndvi' (or 'ndvi').")
    date: str = Field(description="YYYY-MM-DD: the value nearest this day within +-15 days.")
    years: list[int] | None = Field(
        None,
        description="Years to compare with (default: every other year with data; at most 50).",
        json_schema_extra={"maxItems": MAX_YEARS},
    )
    as_of: str | None = Field(None, description=AS_OF_DOC)


class SeasonPoint(BaseModel):
    """One clear observation (a cell) or one overpass median (an area)."""

    model_config = OUTPUT_CONFIG

    tslot: int = Field(description="Day slot.")
    date: str = Field(description="ISO date.")
    value: float = Field(description="The value (an area: weighted median of its clear cells).")
    fact_id: str = Field(description="Id of the fact in `facts`.")


class YearSeason(BaseModel):
    """The same season in one other year."""

    model_config = OUTPUT_CONFIG

    year: int = Field(description="Year.")
    start_date: str = Field(description="Window start (the same calendar day - 15 days).")
    end_date: str = Field(description="Window end (+ 15 days).")
    points: list[SeasonPoint] = Field(description="Clear values in the window, oldest first.")
    median: float | None = Field(description="Median of the points (null: none).")


class CompareSameDoyBody(BaseModel):
    """compare_same_doy answer without its receipt."""

    model_config = OUTPUT_CONFIG

    kind: str = Field(description="'cell' or 'area'.")
    cell: str | None = Field(description="The cell (kind cell).")
    area_km2: float | None = Field(description="Geodesic area (kind area).")
    band: str = Field(description="Band (canonical name).")
    date: str = Field(description="The day asked for.")
    value: SeasonPoint = Field(description="The clear value nearest the day (within +-15 days).")
    offset_days: int = Field(description="value's date minus the day asked for.")
    other_years: list[YearSeason] = Field(description="The same +-15 days of the other years.")
    years_without_data: list[int] = Field(description="Years asked for with no clear value.")
    baseline_median: float | None = Field(description="Median of every other-year point.")
    baseline_min: float | None = Field(description="Smallest other-year point.")
    baseline_max: float | None = Field(description="Largest other-year point.")
    difference: float | None = Field(description="value - baseline_median.")
    z: float | None = Field(
        description="difference / (1.4826 x MAD of the other-year points); null under 3 points "
        "or with no spread."
    )
    within_season_range: bool | None = Field(
        description="Whether the value lies within [baseline_min, baseline_max]."
    )
    rule: str = Field(description="How the comparison was made.")
    snapshot_id: str = Field(description="Store snapshot read.")
    facts: list[Fact] = Field(description="One fact per value used.")


class CompareSameDoyAnswer(Signed, CompareSameDoyBody):
    """compare_same_doy answer."""
