"""Models of the embedding queries: find_similar (intent alias find_like), is_like."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

from api.models.common import (
    AS_OF_DOC,
    CELL_SCHEMA,
    INPUT_CONFIG,
    KEY_SCHEMA,
    OUTPUT_CONFIG,
    Claim,
    Fact,
    Signed,
    TSlot,
)

__all__ = [
    "DistinctPixels",
    "ExamplesOut",
    "FilterStats",
    "FindSimilarAnswer",
    "FindSimilarBody",
    "FindSimilarIn",
    "IsLikeAnswer",
    "IsLikeBody",
    "IsLikeIn",
    "Neighbour",
    "VintageSimilarity",
    "WithinOut",
]


class FindSimilarIn(BaseModel):
    """Arguments of find_similar (intent alias find_like)."""

    model_config = INPUT_CONFIG

    key: str | None = Field(
        None,
        json_schema_extra=KEY_SCHEMA,
        description="cell64, or 'inline:[x, y, ...]' (dimension of the band). Aliases: cell, cell64.",
    )
    cell: str | None = Field(None, description="Alias for key.", json_schema_extra=CELL_SCHEMA)
    cell64: str | None = Field(None, description="Alias for key.", json_schema_extra=CELL_SCHEMA)
    k: int = Field(
        10,
        description="Neighbours to return, 1..1000.",
        json_schema_extra={"minimum": 1, "maximum": 1000},
    )
    band: str = Field(
        "geotessera",
        description="geotessera (default, latest vintage), geotessera.multi_year, geotessera.bin128.",
    )
    mode: str | None = Field(
        None,
        description="cosine (exact; default), hamming (popcount over bin128), hamming_then_rerank "
        "(sign-bit candidates re-scored by exact cosine; on large tables from the k-means lists"
        " nearest the key, the answer's assumptions say which). Default hamming for band"
        " geotessera.bin128.",
    )
    filter: Claim | None = Field(
        None,
        description="Claim every returned cell must satisfy; cells with no fact for its band are dropped.",
    )
    distinct_pixels: bool = Field(
        True,
        description="Drop candidates that share the key cell's source Tessera pixel (a 10 m pixel "
        "covers up to 2 x 2 cells: byte-identical copies of the key, not other places). false "
        "keeps them.",
    )
    positives: list[str] | None = Field(
        None,
        description="More example cell64s like the key (search from examples; the key is the "
        "first positive, 16 positives at most). Scored by the centroid of the unit vectors.",
        json_schema_extra={"maxItems": 15},
    )
    negatives: list[str] | None = Field(
        None,
        description="Example cell64s unlike what is sought (16 at most): the query moves away "
        "from their mean (q = mean(positives) - 0.5 * mean(negatives), unit vectors).",
        json_schema_extra={"maxItems": 16},
    )
    within: dict[str, Any] | list[float] | None = Field(
        None,
        description="Only candidates whose cell centre lies inside this bbox "
        "({min_lat, min_lng, max_lat, max_lng} or its 4-list) or GeoJSON Polygon/MultiPolygon "
        "(area_over_time's caps, 100 km^2).",
    )
    as_of_tslot: TSlot | None = Field(
        None,
        description="Use the latest vintage at or before this year slot (year - 1970; day slots accepted).",
    )
    as_of_signed_at: str | None = Field(
        None, description="RFC 3339: read the store snapshot committed at or before this time."
    )
    scope: dict[str, Any] | None = Field(
        None,
        description="Tenant scope {user_id, agent_id, run_id, org_id}; recorded (data is single-tenant).",
    )


class Neighbour(BaseModel):
    """One neighbour."""

    model_config = OUTPUT_CONFIG

    cell64: str = Field(description="Neighbour cell.")
    score: float = Field(description="Cosine, or 1 - 2 d / 128 for hamming.")
    lat: float = Field(description="Cell centre latitude.")
    lng: float = Field(description="Cell centre longitude.")
    band: str = Field(description="Band scanned.")
    tslot: int = Field(description="Year slot of the vintage.")


class FilterStats(BaseModel):
    """What the filter did."""

    model_config = OUTPUT_CONFIG

    eligible: int = Field(description="Table rows satisfying the claim.")
    dropped_false: int = Field(description="Rows where the claim is false.")
    dropped_no_fact: int = Field(
        description="Rows without a fact for the claim's band (dropped, not false)."
    )


class DistinctPixels(BaseModel):
    """Candidates sharing the key's source pixel."""

    model_config = OUTPUT_CONFIG

    applied: bool = Field(description="Whether they were dropped (distinct_pixels).")
    dropped: int = Field(description="Candidates dropped for sharing the key's pixel.")
    same_pixel_cells: list[str] = Field(
        description="The key's surrounding cells found to share its pixel (dropped or not)."
    )
    rule: str = Field(description="How a shared pixel is recognised.")


class ExamplesOut(BaseModel):
    """The examples a search from examples scored by."""

    model_config = OUTPUT_CONFIG

    positives: list[str] = Field(description="The key ('inline' for a vector) and the positives.")
    negatives: list[str] = Field(description="The negatives.")
    negative_weight: float = Field(description="Pull of the negatives' mean.")
    formula: str = Field(description="The scoring rule.")


class WithinOut(BaseModel):
    """The area candidates were restricted to."""

    model_config = OUTPUT_CONFIG

    area_km2: float = Field(description="Geodesic area.")
    n_cells: int = Field(description="Lattice cells inside.")
    eligible: int = Field(description="Table rows (vectors) inside, before the other filters.")


class FindSimilarBody(BaseModel):
    """find_similar answer without its receipt."""

    model_config = OUTPUT_CONFIG

    key: str = Field(description="The key searched from (cell64, or 'inline' for a vector).")
    band: str = Field(description="Band scanned.")
    vintage: int | None = Field(description="Vintage (year) of the table, null for multi_year.")
    tslot: int | None = Field(description="Year slot of the table.")
    mode: str = Field(description="Scoring mode used.")
    requested_k: int = Field(description="k asked.")
    returned_k: int = Field(description="Neighbours returned.")
    cells_scanned: int = Field(description="Rows scored by the primary scan.")
    reranked: int = Field(description="Candidates re-scored by cosine (hamming_then_rerank).")
    rerank_multiple: int | None = Field(
        description="Candidates per neighbour re-scored by cosine (rerank): the nearest by"
        " Hamming distance, or, on a table with inverted lists, by the sign-bit estimate within"
        " the probed lists (the assumptions say which)."
    )
    neighbours: list[Neighbour] = Field(description="Nearest first; the query cell is excluded.")
    filter: FilterStats | None = Field(description="Filter statistics when a filter was given.")
    distinct_pixels: DistinctPixels | None = Field(
        description="Same-pixel candidates of a cell key (null for an inline key)."
    )
    examples: ExamplesOut | None = Field(
        None, description="Positives and negatives scored by (null: the key alone)."
    )
    within: WithinOut | None = Field(None, description="The within area, when given.")
    scope: dict[str, Any] | None = Field(description="Scope as received.")
    as_of_signed_at: str | None = Field(description="Transaction-time bound as received.")
    assumptions: list[str] = Field(
        description="What was assumed (vintage choice, scope, as-of semantics)."
    )
    note: str | None = Field(description="Explains an empty or short result.")
    snapshot_id: str = Field(description="Store snapshot read (the table's source snapshot).")
    facts: list[Fact] = Field(description="The query vector and the neighbours' vectors.")


class FindSimilarAnswer(Signed, FindSimilarBody):
    """find_similar answer."""


class IsLikeIn(BaseModel):
    """Arguments of is_like."""

    model_config = INPUT_CONFIG

    a: str = Field(description="cell64 of the first place.", json_schema_extra=CELL_SCHEMA)
    b: str = Field(description="cell64 of the second place.", json_schema_extra=CELL_SCHEMA)
    as_of: str | None = Field(None, description=AS_OF_DOC)


class VintageSimilarity(BaseModel):
    """Cosine of the two cells in one vintage."""

    model_config = OUTPUT_CONFIG

    vintage: int = Field(description="Year.")
    tslot: int = Field(description="Year slot.")
    cosine: float | None = Field(
        description="Cosine of the two embeddings, null when one is missing."
    )
    a_has_vector: bool = Field(description="a has a vector in this vintage.")
    b_has_vector: bool = Field(description="b has a vector in this vintage.")


class IsLikeBody(BaseModel):
    """is_like answer without its receipt."""

    model_config = OUTPUT_CONFIG

    a: str = Field(description="First cell.")
    b: str = Field(description="Second cell.")
    band: str = Field(description="Band compared (geotessera).")
    per_vintage: list[VintageSimilarity] = Field(description="One entry per vintage held.")
    vintages_compared: list[int] = Field(description="Vintages where both cells have a vector.")
    cosine: float | None = Field(
        description="Overall: mean of the per-vintage cosines (= cosine of the concatenated unit vectors)."
    )
    note: str | None = Field(description="Explains a null overall cosine.")
    snapshot_id: str = Field(description="Store snapshot read.")
    facts: list[Fact] = Field(description="The vectors compared.")


class IsLikeAnswer(Signed, IsLikeBody):
    """is_like answer."""
