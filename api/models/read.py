"""Models of the band reads: read_cell, read_cells (the protocol's recall / recall_many) and read_area."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field

from api.models.common import (
    AS_OF_DOC,
    CELL_SCHEMA,
    INPUT_CONFIG,
    OUTPUT_CONFIG,
    BBox,
    Fact,
    Signed,
    TSlot,
)

__all__ = [
    "MAX_READ_CELLS",
    "AreaCellValue",
    "BandValue",
    "CellValues",
    "ReadAreaAnswer",
    "ReadAreaBody",
    "ReadAreaIn",
    "ReadCellAnswer",
    "ReadCellBody",
    "ReadCellIn",
    "ReadCellsAnswer",
    "ReadCellsBody",
    "ReadCellsIn",
]

MAX_READ_CELLS = 256
"""Most cells one read_cells call reads."""


class ReadCellIn(BaseModel):
    """Arguments of read_cell."""

    model_config = INPUT_CONFIG

    cell: str = Field(description="cell64 of the cell.", json_schema_extra=CELL_SCHEMA)
    bands: list[str] | None = Field(
        None,
        description="Scalar or flag bands ('indices.ndvi', 'ndvi', 's1.vh', 's2.clear'); "
        "default: every scalar band.",
        json_schema_extra={"maxItems": 32},
    )
    tslot: TSlot | None = Field(None, description="Read this day slot (not with date).")
    date: str | None = Field(None, description="Read this day, YYYY-MM-DD (not with tslot).")
    as_of: str | None = Field(None, description=AS_OF_DOC)


class BandValue(BaseModel):
    """One band's value at a cell."""

    model_config = OUTPUT_CONFIG

    band: str = Field(description="Band (canonical name).")
    status: Literal["ok", "masked", "no_observation"] = Field(
        description="ok: a value; masked: observed but not clear (cloud, shadow, invalid), "
        "value null; no_observation: no overpass at the tslot, or (no time given) no clear "
        "value at all."
    )
    tslot: int | None = Field(description="Day slot of the value (null: none).")
    date: str | None = Field(description="ISO date of the tslot.")
    value: float | int | None = Field(description="The value (flag bands: their integer code).")
    clear: bool = Field(description="Whether the observation was clear (the family's flag).")
    sources: list[str] = Field(description="Source scene ids of the value (the inventory's).")
    fact_id: str | None = Field(description="Id of the fact in `facts` (null without a value).")
    nearest_before: int | None = Field(
        None, description="With a time given and no value: nearest tslot before with a value."
    )
    nearest_after: int | None = Field(
        None, description="With a time given and no value: nearest tslot after with a value."
    )


class ReadCellBody(BaseModel):
    """read_cell answer without its receipt."""

    model_config = OUTPUT_CONFIG

    cell: str = Field(description="cell64.")
    lat: float = Field(description="Cell centre latitude.")
    lng: float = Field(description="Cell centre longitude.")
    time: str = Field(description="'latest_clear' or the tslot asked for, e.g. 'tslot 19800'.")
    values: list[BandValue] = Field(description="One entry per band, in the order asked.")
    snapshot_id: str = Field(description="Store snapshot read.")
    facts: list[Fact] = Field(description="One fact per value.")


class ReadCellAnswer(Signed, ReadCellBody):
    """read_cell answer."""


class ReadCellsIn(BaseModel):
    """Arguments of read_cells."""

    model_config = INPUT_CONFIG

    cells: list[str] = Field(
        description=f"cell64s (1..{MAX_READ_CELLS}, duplicates read once).",
        json_schema_extra={"minItems": 1, "maxItems": MAX_READ_CELLS},
    )
    bands: list[str] = Field(
        description="Scalar or flag bands.", json_schema_extra={"minItems": 1, "maxItems": 32}
    )
    tslot: TSlot | None = Field(None, description="Read this day slot (default: latest clear).")
    as_of: str | None = Field(None, description=AS_OF_DOC)


class CellValues(BaseModel):
    """One cell's values in read_cells."""

    model_config = OUTPUT_CONFIG

    cell: str = Field(description="cell64.")
    lat: float = Field(description="Cell centre latitude.")
    lng: float = Field(description="Cell centre longitude.")
    values: list[BandValue] = Field(description="One entry per band.")


class ReadCellsBody(BaseModel):
    """read_cells answer without its receipt."""

    model_config = OUTPUT_CONFIG

    time: str = Field(description="'latest_clear' or the tslot asked for.")
    cells: list[CellValues] = Field(description="One entry per distinct cell, in the order asked.")
    n_values: int = Field(description="Values found (status ok).")
    snapshot_id: str = Field(description="Store snapshot read.")
    facts: list[Fact] = Field(description="One fact per value.")


class ReadCellsAnswer(Signed, ReadCellsBody):
    """read_cells answer."""


# --------------------------------------------------------------------------- read_area


class ReadAreaIn(BaseModel):
    """Arguments of read_area."""

    model_config = INPUT_CONFIG

    geometry: dict[str, Any] | None = Field(None, description="GeoJSON Polygon or MultiPolygon.")
    bbox: BBox = Field(
        None,
        description="{min_lat, min_lng, max_lat, max_lng} or [min_lat, min_lng, max_lat, max_lng].",
    )
    band: str = Field(description="Scalar band, e.g. 'indices.ndvi' (or 'ndvi').")
    date: str | None = Field(None, description="The overpass day, YYYY-MM-DD (or tslot).")
    tslot: TSlot | None = Field(None, description="The overpass day slot (or date).")
    max_cells: int = Field(
        1000,
        description="Most cell values listed (1..5000); over it a deterministic even sample "
        "is listed (the statistics still use every cell).",
        json_schema_extra={"minimum": 1, "maximum": 5000},
    )
    as_of: str | None = Field(None, description=AS_OF_DOC)


class AreaCellValue(BaseModel):
    """One cell of the area at the overpass."""

    model_config = OUTPUT_CONFIG

    cell: str = Field(description="cell64.")
    value: float | None = Field(description="The value, null when not clear.")
    clear: bool = Field(description="Clear observation.")


class ReadAreaBody(BaseModel):
    """read_area answer without its receipt."""

    model_config = OUTPUT_CONFIG

    area_km2: float = Field(description="Geodesic area.")
    band: str = Field(description="Band (canonical name).")
    tslot: int = Field(description="Day slot read.")
    date: str = Field(description="ISO date read.")
    n_cells: int = Field(description="Cells inside the area.")
    n_clear: int = Field(description="Cells with a clear value.")
    clear_fraction: float = Field(description="n_clear / n_cells.")
    stats: dict[str, float] | None = Field(
        description="Weighted (cos latitude) mean, std, median, p10, p25, p75, p90 of the clear "
        "cells (area_over_time's per-overpass statistics); null when none is clear."
    )
    sampled: bool = Field(description="Whether `cells` is a sample (n_cells > max_cells).")
    sample_rule: str | None = Field(description="How the sample was drawn, when sampled.")
    cells: list[AreaCellValue] = Field(description="Cell values (all, or the sample).")
    sources: list[str] = Field(description="Source scenes of the overpass over the area.")
    snapshot_id: str = Field(description="Store snapshot read.")
    facts: list[Fact] = Field(description="The area statistic as one fact.")


class ReadAreaAnswer(Signed, ReadAreaBody):
    """read_area answer."""
