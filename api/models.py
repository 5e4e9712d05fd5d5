"""Pydantic input and output models of the query primitives.

Inputs are deliberately lenient in *type* (the service functions check meaning
and raise typed :mod:`api.errors` with stable codes: ``invalid_cell``,
``invalid_window``, ...); the JSON schema still documents the expected shapes.

Every answer model is ``<Name>Body`` (what is signed) plus ``receipt``. The
service builds the body, dumps it with ``model_dump(mode="json")``, signs that
dict and validates the signed dict into the answer model, so
``answer.model_dump(mode="json")`` is exactly the signed document and
:func:`api.receipts.verify_answer` accepts it after a JSON round trip.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

__all__ = [
    "AnomalyOut",
    "AreaIn",
    "AreaOverTimeAnswer",
    "AreaOverTimeBody",
    "AreaOverTimeIn",
    "AreaSeriesOut",
    "ChangeEnd",
    "Claim",
    "ConfirmAnswer",
    "ConfirmBody",
    "ConfirmIn",
    "DidChangeAnswer",
    "DidChangeBody",
    "DidChangeIn",
    "ExcludedScene",
    "Fact",
    "FilterStats",
    "FindSimilarAnswer",
    "FindSimilarBody",
    "FindSimilarIn",
    "IsLikeAnswer",
    "IsLikeBody",
    "IsLikeIn",
    "Neighbour",
    "Receipt",
    "SceneStats",
    "Significance",
    "TrajectoryAnswer",
    "TrajectoryBody",
    "TrajectoryIn",
    "TrajectoryPoint",
    "TrendOut",
    "VintageSimilarity",
]

_IN = ConfigDict(extra="forbid", populate_by_name=True)
_OUT = ConfigDict(extra="forbid")


# --------------------------------------------------------------------------- shared


class Receipt(BaseModel):
    """Signed receipt (layout: :mod:`api.receipts`)."""

    model_config = _OUT

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

    model_config = _OUT

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

    model_config = _IN

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


# --------------------------------------------------------------------------- did_change / trajectory


class DidChangeIn(BaseModel):
    """Arguments of did_change."""

    model_config = _IN

    cell: str = Field(description="cell64 of the cell.")
    band: str = Field(description="Scalar band, e.g. 'indices.ndvi', 's1.vh' (or 'ndvi', 'vh').")
    window: list[int] = Field(
        description="Exactly two increasing tslots [t0, t1] (day slots: floor(unix_s/86400)). "
        "Get valid tslots from trajectory.",
        json_schema_extra={"minItems": 2, "maxItems": 2},
    )


class ChangeEnd(BaseModel):
    """One end of the window."""

    model_config = _OUT

    tslot: int = Field(description="The tslot.")
    date: str = Field(description="ISO date of the tslot.")
    value: float = Field(description="The band's value at the cell.")
    clear: bool = Field(
        description="Whether the observation was clear (s2.clear == 2 / s1.valid == 1)."
    )


class Significance(BaseModel):
    """How the delta compares to the cell's own variability."""

    model_config = _OUT

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

    model_config = _OUT

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


class DidChangeAnswer(DidChangeBody):
    """did_change answer."""

    receipt: Receipt = Field(description="Signed receipt.")


class TrajectoryIn(BaseModel):
    """Arguments of trajectory."""

    model_config = _IN

    cell: str = Field(description="cell64 of the cell.")
    band: str = Field(description="Scalar band, e.g. 'indices.ndvi' (or 'ndvi').")
    window: list[int] | None = Field(
        None,
        description="Optional [t0, t1] (inclusive, increasing day slots).",
        json_schema_extra={"minItems": 2, "maxItems": 2},
    )


class TrajectoryPoint(BaseModel):
    """One observation of the cell."""

    model_config = _OUT

    tslot: int = Field(description="Day slot.")
    date: str = Field(description="ISO date.")
    value: float | None = Field(description="Value, null when the observation was masked (cloud).")
    clear: bool = Field(description="Clear (usable) observation.")


class TrajectoryBody(BaseModel):
    """trajectory answer without its receipt."""

    model_config = _OUT

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


class TrajectoryAnswer(TrajectoryBody):
    """trajectory answer."""

    receipt: Receipt = Field(description="Signed receipt.")


# --------------------------------------------------------------------------- confirm


class ConfirmIn(BaseModel):
    """Arguments of confirm."""

    model_config = _IN

    claim: Claim = Field(description="The claim to test.")
    cell: str = Field(description="cell64 where the claim is tested.")


class ConfirmBody(BaseModel):
    """confirm answer without its receipt."""

    model_config = _OUT

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


class ConfirmAnswer(ConfirmBody):
    """confirm answer."""

    receipt: Receipt = Field(description="Signed receipt.")


# --------------------------------------------------------------------------- area_over_time


class AreaIn(BaseModel):
    """One area of an area_over_time call."""

    model_config = _IN

    id: str = Field(description="Caller's label for the area (shown on the chart).")
    geometry: dict[str, Any] | None = Field(
        None, description="GeoJSON Polygon or MultiPolygon (lng, lat)."
    )
    bbox: Any = Field(
        None,
        description="{min_lat, min_lng, max_lat, max_lng} or [min_lat, min_lng, max_lat, max_lng].",
    )


class AreaOverTimeIn(BaseModel):
    """Arguments of area_over_time (one of geometry, bbox or areas)."""

    model_config = _IN

    geometry: dict[str, Any] | None = Field(None, description="GeoJSON Polygon or MultiPolygon.")
    bbox: Any = Field(None, description="{min_lat, min_lng, max_lat, max_lng} or a 4-list.")
    areas: list[AreaIn] | None = Field(None, description="Up to 6 areas on one chart.")
    start_date: str = Field(description="YYYY-MM-DD (inclusive).")
    end_date: str = Field(description="YYYY-MM-DD (inclusive).")
    index: str = Field("ndvi", description="ndvi ndwi ndmi lswi evi vv vh vh_vv.")
    max_scenes: int = Field(
        16,
        description="3..24 overpasses kept, chosen evenly in time keeping both ends.",
        json_schema_extra={"minimum": 3, "maximum": 24},
    )
    clear_fraction: float = Field(
        0.4, description="Overpasses whose clear fraction over the area is below this are excluded."
    )
    chart: bool = Field(
        True, description="Render the PNG chart (base64 in the answer, and by chart_id)."
    )


class SceneStats(BaseModel):
    """Statistics of one overpass over one area (cells weighted by cos(latitude))."""

    model_config = _OUT

    date: str = Field(description="ISO date of the overpass.")
    tslot: int = Field(description="Day slot.")
    mean: float = Field(description="Weighted mean.")
    std: float = Field(description="Weighted standard deviation (population).")
    median: float = Field(description="Weighted median.")
    p10: float = Field(description="Weighted 10th percentile.")
    p25: float = Field(description="Weighted 25th percentile.")
    p75: float = Field(description="Weighted 75th percentile.")
    p90: float = Field(description="Weighted 90th percentile.")
    n_clear: int = Field(description="Cells with a clear value.")
    n_total: int = Field(description="Cells in the area.")
    clear_fraction: float = Field(description="n_clear / n_total.")
    quality: Literal["good", "fair"] = Field(
        description="good: clear_fraction >= 0.8; fair: above the threshold."
    )


class ExcludedScene(BaseModel):
    """An overpass left out, with why."""

    model_config = _OUT

    date: str = Field(description="ISO date.")
    tslot: int = Field(description="Day slot.")
    clear_fraction: float = Field(description="Clear fraction over the area.")
    reason: str = Field(description="Why it was excluded.")


class AnomalyOut(BaseModel):
    """Latest median against the same-season baseline of earlier years."""

    model_config = _OUT

    latest_tslot: int | None = Field(description="tslot of the latest kept overpass.")
    latest_median: float | None = Field(description="Its median.")
    baseline_median: float | None = Field(description="Median of the baseline overpasses' medians.")
    baseline_tslots: list[int] = Field(
        description="Baseline overpasses (earlier years, +-30 days of year)."
    )
    difference: float | None = Field(description="latest_median - baseline_median.")
    z: float | None = Field(description="difference / baseline spread (see z_basis).")
    z_basis: str | None = Field(description="Which spread the z-score divides by.")
    reason: str | None = Field(description="Why difference or z is null.")


class TrendOut(BaseModel):
    """Monotonic trend of the kept medians."""

    model_config = _OUT

    slope_per_year: float | None = Field(description="Theil-Sen slope of the medians, per year.")
    intercept: float | None = Field(description="Theil-Sen intercept (at tslot 0 years).")
    mann_kendall_p: float | None = Field(
        description="Two-sided Mann-Kendall p-value (tie-corrected)."
    )
    mann_kendall_s: int | None = Field(description="Mann-Kendall S statistic.")
    n: int = Field(description="Overpasses used.")
    reason: str | None = Field(description="Why the trend is null (fewer than 6 overpasses).")


class AreaSeriesOut(BaseModel):
    """The series of one area."""

    model_config = _OUT

    id: str = Field(description="Area id.")
    geometry_digest: str = Field(
        description="blake3 of the area's canonical geometry (fact cell 'geom:<digest>')."
    )
    area_km2: float = Field(description="Area (km^2, spherical approximation).")
    n_cells: int = Field(description="Cells whose centre lies inside the area.")
    scenes: list[SceneStats] = Field(description="Kept overpasses, oldest first.")
    excluded: list[ExcludedScene] = Field(
        description="Overpasses under the clear-fraction threshold."
    )
    thinned: list[int] = Field(
        description="Overpasses above the threshold dropped to honour max_scenes."
    )
    anomaly: AnomalyOut = Field(description="Latest vs same-season baseline.")
    trend: TrendOut = Field(description="Theil-Sen slope and Mann-Kendall p-value.")


class AreaOverTimeBody(BaseModel):
    """area_over_time answer without its receipt."""

    model_config = _OUT

    index: str = Field(description="Index name.")
    band: str = Field(description="Cube band read.")
    start_date: str = Field(description="Start (inclusive).")
    end_date: str = Field(description="End (inclusive).")
    max_scenes: int = Field(description="Cap applied.")
    clear_fraction_threshold: float = Field(description="Threshold applied.")
    weighting: str = Field(description="How cells are weighted.")
    areas: list[AreaSeriesOut] = Field(description="One series per area.")
    chart_id: str | None = Field(
        description="Id of the PNG chart (REST: /v1/charts/{chart_id}.png)."
    )
    chart_png_base64: str | None = Field(description="The PNG chart, base64.")
    snapshot_id: str = Field(description="Store snapshot read.")
    facts: list[Fact] = Field(description="One statistics fact per area and kept overpass.")


class AreaOverTimeAnswer(AreaOverTimeBody):
    """area_over_time answer."""

    receipt: Receipt = Field(description="Signed receipt.")


# --------------------------------------------------------------------------- find_similar / is_like


class FindSimilarIn(BaseModel):
    """Arguments of find_similar (intent alias find_like)."""

    model_config = _IN

    key: str | None = Field(
        None,
        description="cell64, or 'inline:[x, y, ...]' (dimension of the band). Aliases: cell, cell64.",
    )
    cell: str | None = Field(None, description="Alias for key.")
    cell64: str | None = Field(None, description="Alias for key.")
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
        "(Hamming candidates re-scored by exact cosine). Default hamming for band geotessera.bin128.",
    )
    filter: Claim | None = Field(
        None,
        description="Claim every returned cell must satisfy; cells with no fact for its band are dropped.",
    )
    as_of_tslot: int | None = Field(
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

    model_config = _OUT

    cell64: str = Field(description="Neighbour cell.")
    score: float = Field(description="Cosine, or 1 - 2 d / 128 for hamming.")
    lat: float = Field(description="Cell centre latitude.")
    lng: float = Field(description="Cell centre longitude.")
    band: str = Field(description="Band scanned.")
    tslot: int = Field(description="Year slot of the vintage.")


class FilterStats(BaseModel):
    """What the filter did."""

    model_config = _OUT

    eligible: int = Field(description="Table rows satisfying the claim.")
    dropped_false: int = Field(description="Rows where the claim is false.")
    dropped_no_fact: int = Field(
        description="Rows without a fact for the claim's band (dropped, not false)."
    )


class FindSimilarBody(BaseModel):
    """find_similar answer without its receipt."""

    model_config = _OUT

    key: str = Field(description="The key searched from (cell64, or 'inline' for a vector).")
    band: str = Field(description="Band scanned.")
    vintage: int | None = Field(description="Vintage (year) of the table, null for multi_year.")
    tslot: int | None = Field(description="Year slot of the table.")
    mode: str = Field(description="Scoring mode used.")
    requested_k: int = Field(description="k asked.")
    returned_k: int = Field(description="Neighbours returned.")
    cells_scanned: int = Field(description="Rows scored by the primary scan.")
    reranked: int = Field(description="Candidates re-scored by cosine (hamming_then_rerank).")
    rerank_multiple: int | None = Field(description="Hamming candidates per neighbour (rerank).")
    neighbours: list[Neighbour] = Field(description="Nearest first; the query cell is excluded.")
    filter: FilterStats | None = Field(description="Filter statistics when a filter was given.")
    scope: dict[str, Any] | None = Field(description="Scope as received.")
    as_of_signed_at: str | None = Field(description="Transaction-time bound as received.")
    assumptions: list[str] = Field(
        description="What was assumed (vintage choice, scope, as-of semantics)."
    )
    note: str | None = Field(description="Explains an empty or short result.")
    snapshot_id: str = Field(description="Store snapshot read (the table's source snapshot).")
    facts: list[Fact] = Field(description="The query vector and the neighbours' vectors.")


class FindSimilarAnswer(FindSimilarBody):
    """find_similar answer."""

    receipt: Receipt = Field(description="Signed receipt.")


class IsLikeIn(BaseModel):
    """Arguments of is_like."""

    model_config = _IN

    a: str = Field(description="cell64 of the first place.")
    b: str = Field(description="cell64 of the second place.")


class VintageSimilarity(BaseModel):
    """Cosine of the two cells in one vintage."""

    model_config = _OUT

    vintage: int = Field(description="Year.")
    tslot: int = Field(description="Year slot.")
    cosine: float | None = Field(
        description="Cosine of the two embeddings, null when one is missing."
    )
    a_has_vector: bool = Field(description="a has a vector in this vintage.")
    b_has_vector: bool = Field(description="b has a vector in this vintage.")


class IsLikeBody(BaseModel):
    """is_like answer without its receipt."""

    model_config = _OUT

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


class IsLikeAnswer(IsLikeBody):
    """is_like answer."""

    receipt: Receipt = Field(description="Signed receipt.")
