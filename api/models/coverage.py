"""Models of coverage: what the store holds at a cell or over an area, before asking."""

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
    "MAX_LISTED_TSLOTS",
    "CoverageAnswer",
    "CoverageBody",
    "CoverageIn",
    "FamilyCoverage",
    "MonthCount",
]

MAX_LISTED_TSLOTS = 1000
"""Most tslots listed per family (the counts always cover every one)."""


class CoverageIn(BaseModel):
    """Arguments of coverage (one of cell, bbox, geometry)."""

    model_config = INPUT_CONFIG

    cell: str | None = Field(None, description="cell64 of one cell.", json_schema_extra=CELL_SCHEMA)
    bbox: BBox = Field(
        None,
        description="{min_lat, min_lng, max_lat, max_lng} or [min_lat, min_lng, max_lat, max_lng].",
    )
    geometry: dict[str, Any] | None = Field(
        None, description="GeoJSON Polygon or MultiPolygon (area_over_time's caps)."
    )
    band: str | None = Field(
        None,
        description="Only this band's family (e.g. 'ndvi' -> the Sentinel-2 bands); default: "
        "every family.",
    )
    start_date: str | None = Field(None, description="YYYY-MM-DD, inclusive (default: all).")
    end_date: str | None = Field(None, description="YYYY-MM-DD, inclusive (default: all).")
    map: bool = Field(
        True,
        description="Areas: render a small PNG map of clear observations per cell (base64, and "
        "by chart_id).",
    )
    as_of: str | None = Field(None, description=AS_OF_DOC)


class MonthCount(BaseModel):
    """One month of one family."""

    model_config = OUTPUT_CONFIG

    month: str = Field(description="YYYY-MM.")
    overpasses: int = Field(description="Overpasses (a cell: observations) in the month.")
    clear: int = Field(
        description="Clear observations: a cell, overpasses it was clear; an area, clear cells "
        "summed over the month's overpasses."
    )
    clear_fraction: float = Field(description="clear / (overpasses x cells).")


class FamilyCoverage(BaseModel):
    """What one scene family (its bands share one clear flag) holds there."""

    model_config = OUTPUT_CONFIG

    family: str = Field(description="s2 (Sentinel-2) or s1 (Sentinel-1).")
    bands: list[str] = Field(description="The family's scalar bands (they share the flag).")
    flag_band: str = Field(description="The flag whose value says clear / valid.")
    has_data: bool = Field(description="Whether any observation lies there in the window.")
    n_overpasses: int = Field(description="Overpasses (a cell: observations) in the window.")
    n_clear: int = Field(description="Clear observations (cell-overpasses for an area).")
    first_date: str | None = Field(description="First overpass date.")
    last_date: str | None = Field(description="Last overpass date.")
    tslots: list[int] = Field(description="Overpass day slots, oldest first (capped).")
    dates: list[str] = Field(description="Their ISO dates.")
    listed_truncated: bool = Field(description="Whether tslots stop at the cap (1000).")
    months: list[MonthCount] = Field(description="Counts per month, oldest first.")


class CoverageBody(BaseModel):
    """coverage answer without its receipt."""

    model_config = OUTPUT_CONFIG

    kind: str = Field(description="'cell' or 'area'.")
    cell: str | None = Field(description="The cell (kind cell).")
    area_km2: float | None = Field(description="Geodesic area (kind area).")
    n_cells: int = Field(description="Cells covered (1 for a cell).")
    start_date: str | None = Field(description="Window start as asked.")
    end_date: str | None = Field(description="Window end as asked.")
    families: list[FamilyCoverage] = Field(description="One entry per scene family.")
    bands_with_data: list[str] = Field(description="Scalar bands with data there in the window.")
    tessera_vintages: list[int] = Field(
        description="Tessera vintages with a vector there (an area: at any cell inside)."
    )
    map_family: str | None = Field(description="Family the map counts (areas).")
    map_max: int | None = Field(description="Most clear observations of one cell (the scale top).")
    chart_id: str | None = Field(description="Id of the PNG map (REST: /v1/charts/{chart_id}.png).")
    map_png_base64: str | None = Field(description="The PNG map, base64.")
    note: str = Field(description="How the counts were made.")
    snapshot_id: str = Field(description="Store snapshot read.")
    facts: list[Fact] = Field(description="None: coverage states counts, not values.")


class CoverageAnswer(Signed, CoverageBody):
    """coverage answer."""
