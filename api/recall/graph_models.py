"""Pydantic I/O of memory_neighbors and memory_relations (the caps are part of the schema)."""

from __future__ import annotations

from pydantic import BaseModel, Field

from api.memory.models import MAX_ID_CHARS
from api.models.common import INPUT_CONFIG

__all__ = [
    "DEFAULT_NEIGHBOR_LIMIT",
    "DEFAULT_RADIUS_M",
    "MAX_DEPTH",
    "MAX_NEIGHBOR_LIMIT",
    "MAX_RADIUS_M",
    "MAX_RELATIONS_LIMIT",
    "MemoryNeighborsIn",
    "MemoryRelationsIn",
]

MAX_DEPTH = 6
"""Deepest walk of memory_neighbors (recall's ``anchorDepth`` cap)."""
DEFAULT_NEIGHBOR_LIMIT = 20
MAX_NEIGHBOR_LIMIT = 100
"""Most neighbours one call returns (the walk stops there and says so)."""
DEFAULT_RADIUS_M = 500.0
"""Default radius of the spatial-neighbour edge."""
MAX_RADIUS_M = 5000.0
"""Largest radius of the spatial-neighbour edge."""
MAX_RELATIONS_LIMIT = 500
"""Most links one memory_relations call returns."""


class MemoryNeighborsIn(BaseModel):
    """Arguments of memory_neighbors."""

    model_config = INPUT_CONFIG

    id: str = Field(
        max_length=MAX_ID_CHARS,
        description="An item id, or an entity id (feature:<slug> or place:<geonameid>).",
    )
    depth: int = Field(
        1,
        ge=1,
        le=MAX_DEPTH,
        strict=True,
        description=f"Hops to walk (1..{MAX_DEPTH}); 1 is the immediate neighbourhood.",
    )
    limit: int = Field(
        DEFAULT_NEIGHBOR_LIMIT,
        ge=1,
        le=MAX_NEIGHBOR_LIMIT,
        strict=True,
        description=f"Most neighbours returned (1..{MAX_NEIGHBOR_LIMIT}).",
    )
    radius_m: float = Field(
        DEFAULT_RADIUS_M,
        gt=0,
        le=MAX_RADIUS_M,
        description=f"Items and features within this many metres are neighbours "
        f"(at most {MAX_RADIUS_M:.0f}).",
    )
    include_inactive: bool = Field(
        False, description="Also walk superseded and deleted items (hidden by default)."
    )


class MemoryRelationsIn(BaseModel):
    """Arguments of memory_relations."""

    model_config = INPUT_CONFIG

    id: str = Field(
        max_length=MAX_ID_CHARS,
        description="An item id, or an entity id (feature:<slug> or place:<geonameid>).",
    )
    limit: int = Field(
        100,
        ge=1,
        le=MAX_RELATIONS_LIMIT,
        strict=True,
        description=f"Most links returned (1..{MAX_RELATIONS_LIMIT}).",
    )
    include_inactive: bool = Field(
        False, description="Also list superseded and deleted items anchored at an entity."
    )
