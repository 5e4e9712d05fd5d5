"""Models of the lattice primitives: locate (a point's cell) and cells_in (an area's cells)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

from api.models.common import INPUT_CONFIG, OUTPUT_CONFIG, BBox, Signed

__all__ = [
    "CELLS_PAGE_SIZE",
    "BoundsOut",
    "CellsInAnswer",
    "CellsInBody",
    "CellsInIn",
    "LocateAnswer",
    "LocateBody",
    "LocateIn",
    "NeighbourOut",
]

CELLS_PAGE_SIZE = 1000
"""Cells per cells_in page (the page cap)."""


class LocateIn(BaseModel):
    """Arguments of locate."""

    model_config = INPUT_CONFIG

    lat: float = Field(description="Latitude, degrees (-90..90).")
    lng: float = Field(description="Longitude, degrees (-180..180).")


class BoundsOut(BaseModel):
    """A cell's bounds."""

    model_config = OUTPUT_CONFIG

    min_lat: float = Field(description="South edge.")
    min_lng: float = Field(description="West edge.")
    max_lat: float = Field(description="North edge.")
    max_lng: float = Field(description="East edge.")


class NeighbourOut(BaseModel):
    """One of the eight surrounding cells."""

    model_config = OUTPUT_CONFIG

    direction: str = Field(description="NW N NE W E SW S SE.")
    cell: str = Field(description="cell64.")


class LocateBody(BaseModel):
    """locate answer without its receipt."""

    model_config = OUTPUT_CONFIG

    cell: str = Field(description="cell64 of the cell holding the point.")
    lat: float = Field(description="Cell centre latitude.")
    lng: float = Field(description="Cell centre longitude.")
    lat_q: int = Field(description="Lattice row.")
    lng_q: int = Field(description="Lattice column.")
    bounds: BoundsOut = Field(description="The cell's bounds.")
    neighbours: list[NeighbourOut] = Field(
        description="The eight surrounding cells (longitude wraps at the date line; at a pole "
        "the cells beyond it are left out)."
    )
    snapshot_id: str = Field(description="'lattice:cell64' (pure arithmetic, no store read).")


class LocateAnswer(Signed, LocateBody):
    """locate answer."""


class CellsInIn(BaseModel):
    """Arguments of cells_in."""

    model_config = INPUT_CONFIG

    geometry: dict[str, Any] | None = Field(None, description="GeoJSON Polygon or MultiPolygon.")
    bbox: BBox = Field(
        None,
        description="{min_lat, min_lng, max_lat, max_lng} or [min_lat, min_lng, max_lat, max_lng].",
    )
    page: int = Field(
        0,
        description=f"Page number from 0; {CELLS_PAGE_SIZE} cells per page, row-major from the "
        "south-west. A page beyond the last is page_out_of_range.",
        json_schema_extra={"minimum": 0},
    )


class CellsInBody(BaseModel):
    """cells_in answer without its receipt."""

    model_config = OUTPUT_CONFIG

    n_cells: int = Field(description="Cells whose centre lies inside the area.")
    area_km2: float = Field(description="Geodesic area.")
    page: int = Field(description="This page.")
    page_size: int = Field(description=f"Cells per page ({CELLS_PAGE_SIZE}).")
    n_pages: int = Field(description="Pages in all.")
    next_page: int | None = Field(description="The next page, null on the last.")
    cells: list[str] = Field(description="This page's cell64s.")
    snapshot_id: str = Field(description="'lattice:cell64' (pure arithmetic, no store read).")


class CellsInAnswer(Signed, CellsInBody):
    """cells_in answer."""
