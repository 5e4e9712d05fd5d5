"""Models of area_over_time."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field

from api.models.common import AS_OF_DOC, INPUT_CONFIG, OUTPUT_CONFIG, BBox, Fact, Signed

__all__ = [
    "AnomalyOut",
    "AreaIn",
    "AreaOverTimeAnswer",
    "AreaOverTimeBody",
    "AreaOverTimeIn",
    "AreaSeriesOut",
    "ExcludedScene",
    "SceneStats",
    "TrendOut",
]


class AreaIn(BaseModel):
    """One area of an area_over_time call."""

    model_config = INPUT_CONFIG

    id: str = Field(description="Caller's label for the area (shown on the chart).")
    geometry: dict[str, Any] | None = Field(
        None, description="GeoJSON Polygon or MultiPolygon (lng, lat)."
    )
    bbox: BBox = Field(
        None,
        description="{min_lat, min_lng, max_lat, max_lng} or [min_lat, min_lng, max_lat, max_lng].",
    )


class AreaOverTimeIn(BaseModel):
    """Arguments of area_over_time (one of geometry, bbox or areas)."""

    model_config = INPUT_CONFIG

    geometry: dict[str, Any] | None = Field(None, description="GeoJSON Polygon or MultiPolygon.")
    bbox: BBox = Field(
        None,
        description="{min_lat, min_lng, max_lat, max_lng} or [min_lat, min_lng, max_lat, max_lng].",
    )
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
    as_of: str | None = Field(None, description=AS_OF_DOC)
    chart: bool = Field(
        True, description="Render the PNG chart (base64 in the answer, and by chart_id)."
    )
    use_summaries: bool = Field(
        True,
        description="Answer blocks wholly inside an area from the pipeline's block summaries "
        "(quantiles then come with quantile_bounds); false reads every cell (exact quantiles).",
    )


class SceneStats(BaseModel):
    """Statistics of one overpass over one area (cells weighted by cos(latitude))."""

    model_config = OUTPUT_CONFIG

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
    quantile_bounds: dict[str, list[float]] | None = Field(
        None,
        description="Block-summary answers only: per quantile (p10 p25 median p75 p90) the "
        "interval [lo, hi] guaranteed to hold the exact (every-cell) value; the quantile itself "
        "is an estimate inside it. None: quantiles computed from every cell (exact).",
    )


class ExcludedScene(BaseModel):
    """An overpass left out, with why."""

    model_config = OUTPUT_CONFIG

    date: str = Field(description="ISO date.")
    tslot: int = Field(description="Day slot.")
    clear_fraction: float = Field(description="Clear fraction over the area.")
    reason: str = Field(description="Why it was excluded.")


class AnomalyOut(BaseModel):
    """Latest median against the same-season baseline of earlier years."""

    model_config = OUTPUT_CONFIG

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

    model_config = OUTPUT_CONFIG

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

    model_config = OUTPUT_CONFIG

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
    method: Literal["cells", "block_summaries+edge_cells"] = Field(
        description="cells: every cell read (exact); block_summaries+edge_cells: storage blocks "
        "wholly inside answered from their stored summaries, the other cells read."
    )
    summary_blocks: int = Field(
        description="Summary blocks (32 x 32 cells) answered from their summaries, per kept overpass."
    )
    cells_read: int = Field(description="Cells read from the chunks per kept overpass.")
    method_note: str | None = Field(
        description="Why every cell was read (no block wholly inside, a snapshot without "
        "summaries, use_summaries false), or null."
    )


class AreaOverTimeBody(BaseModel):
    """area_over_time answer without its receipt."""

    model_config = OUTPUT_CONFIG

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


class AreaOverTimeAnswer(Signed, AreaOverTimeBody):
    """area_over_time answer."""
