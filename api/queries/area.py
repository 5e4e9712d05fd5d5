"""area_over_time: an index over one to six areas, per overpass, with anomaly, trend and chart.

Definitions
-----------
* Cells of an area: cells whose centre lies inside the polygon, or inside the
  bbox (:mod:`api.queries.area_geometry`; found over the tiles the geometry
  touches). Reads fetch only the chunks of the blocks those cells fall in, and
  buffers hold the cells inside (a group of scenes at a time), never the
  bounding box.
* Weights: each cell weighs ``cos(latitude of its centre)``, proportional to
  its true area on the sphere (lattice cells span equal angles). Mean and std
  are weighted (std = population form); quantiles are weighted by linear
  interpolation over the cumulative weights at cell mid-points
  (``(cumsum(w) - w / 2) / sum(w)``).
* Clear fraction of an overpass = clear cells with a value / cells of the
  area (an overpass covering part of the area counts the rest as not clear).
* Kept overpasses: clear fraction >= the threshold, then thinned to
  ``max_scenes`` chosen evenly in time keeping both ends.
* Anomaly: latest kept median minus the median of the medians of earlier
  years' overpasses within +-30 days of year (same threshold applied); z =
  difference / max(std of those medians, mean robust spatial spread
  (IQR / 1.349) of those overpasses), so a handful of near-equal baseline
  medians cannot make z explode; null with a reason when both are zero.
* Trend: Theil-Sen slope (per year) of the kept medians and a two-sided
  Mann-Kendall p-value (tie-corrected variance, continuity correction), when
  at least :data:`MIN_TREND_SCENES` overpasses are kept.

Caps (all tested): :data:`MAX_AREAS` and the per-call budget
:data:`MAX_CELL_SCENES` (cells inside x candidate overpasses, typed
``over_budget``) here; :data:`~api.queries.area_series.MAX_CANDIDATES` per area;
:data:`~api.queries.area_geometry.MAX_VERTICES`,
:data:`~api.queries.area_geometry.MAX_AREA_KM2` and
:data:`~api.queries.area_geometry.MAX_BOX_CELLS` per area.

The areas are checked and put on the lattice by :mod:`api.queries.area_geometry`;
their series, anomaly and trend computed (all areas of a call read together) by
:mod:`api.queries.area_series`; the statistics and trend tests are
:mod:`api.queries.area_stats`.
"""

from __future__ import annotations

import base64
import datetime as dt
from typing import TYPE_CHECKING, Any

from api.charts import render_area_chart
from api.context import ServiceContext
from api.errors import InvalidArgument
from api.models import AreaOverTimeAnswer, AreaOverTimeBody, AreaOverTimeIn
from api.queries._common import clear_info, finish, store_errors
from api.queries.area_cells import tile_bytes
from api.queries.area_geometry import MAX_AREA_KM2, MAX_VERTICES, Area, parse_area
from api.queries.area_series import (
    BASELINE_DAYS,
    MAX_CANDIDATES,
    MIN_TREND_SCENES,
    candidate_slots,
    series,
)
from api.registry import primitive
from store import tslot
from store.cube import REGISTRY
from store.cube.bands import INDEX_NAMES
from store.errors import InvalidDate

if TYPE_CHECKING:
    from store.cube.read import CubeReader

__all__ = [
    "AREA_MEMO_CELLS",
    "BASELINE_DAYS",
    "MAX_AREAS",
    "MAX_CANDIDATES",
    "MAX_CELL_SCENES",
    "MIN_TREND_SCENES",
    "area_over_time",
]

MAX_AREAS = 6
"""Most areas in one call."""
MAX_CELL_SCENES = 200_000_000
"""Budget of one call: cells inside the areas x candidate overpasses, summed over the areas."""
AREA_MEMO_CELLS = 16_384
"""Areas of at most this many cells (~1.3 km^2 at 45 degrees) are remembered by the context
(:attr:`api.context.ServiceContext.areas`): parsing one and grouping its cells by block is
~2 ms of a ~20 ms warm call, the same work for every call on the same area."""


def _date(text: Any, name: str) -> tuple[dt.date, int]:
    """A ``YYYY-MM-DD`` argument and its day slot (in the cubes' day-slot range)."""
    if not isinstance(text, str):
        raise InvalidArgument(f"{name} must be YYYY-MM-DD", code="invalid_date")
    try:
        d = dt.date.fromisoformat(text.strip())
    except ValueError:
        raise InvalidArgument(
            f"{name} {text[:40]!r} is not a valid YYYY-MM-DD date", code="invalid_date"
        ) from None
    try:
        return d, tslot.day_slot(d)
    except InvalidDate:
        last = tslot.slot_to_date(tslot.MAX_DAY_SLOT)
        raise InvalidArgument(
            f"{name} {d} outside {tslot.EPOCH}..{last}", code="invalid_date"
        ) from None


def _area(ctx: ServiceContext, area_id: str, geometry: Any, bbox: Any) -> Area:
    """:func:`parse_area`, remembered by the context for small areas.

    An area is a pure function of its id, geometry and bbox (keyed by their
    ``repr``: equal arguments written alike), so a remembered one, with the
    block groupings its earlier calls computed (:meth:`Area.blocks`), is the one
    a new parse would give. Errors are not remembered.
    """
    return ctx.areas.get(
        ("area", area_id, repr(geometry), repr(bbox)),
        lambda: parse_area(area_id, geometry, bbox),
        remember=lambda a: a.n_cells <= AREA_MEMO_CELLS,
    )


def _check_budget(
    ctx: ServiceContext,
    reader: CubeReader,
    band: str,
    areas: list[Area],
    cands: list[list[tuple[int, list[str]]]],
) -> bool:
    """Refuse a call over :data:`MAX_CELL_SCENES`; whether its chunks may stay in the cache.

    The cost counted is the clear-fraction pass (each area's cells times its
    candidate overpasses), the part that grows with the dates; the statistics
    pass adds at most ``cells x (max_scenes + MAX_BASELINE)`` per area. A call
    whose chunks would take more than a quarter of the context's chunk cache
    reads them without keeping them, so one large call neither evicts every
    other entry nor leaves the server holding its chunks.

    Raises:
        InvalidArgument: ``over_budget`` (422) naming the budget, the cost and its parts.
    """
    from store.cube import band_spec

    per_area = [a.n_cells * len(candidate_slots(c)) for a, c in zip(areas, cands, strict=True)]
    cost = sum(per_area)
    if cost > MAX_CELL_SCENES:
        raise InvalidArgument(
            f"this call would read {cost:,} cell-overpasses (cells inside the areas x candidate "
            f"overpasses); the per-call budget is {MAX_CELL_SCENES:,}: narrow the dates, the "
            "areas or their number",
            code="over_budget",
            details={
                "budget": "cell_scenes",
                "limit": MAX_CELL_SCENES,
                "cost": cost,
                "per_area": [
                    {
                        "id": a.id,
                        "n_cells": a.n_cells,
                        "candidate_overpasses": n // max(1, a.n_cells),
                    }
                    for a, n in zip(areas, per_area, strict=True)
                ],
            },
        )
    side = 1 << reader.block_level
    flag_band, _ = clear_info(band)
    step = band_spec(flag_band).time_chunk
    chunks: set[tuple[int, int, int]] = set()  # distinct: areas may share blocks
    for a, c in zip(areas, cands, strict=True):
        tcs = {t // step for t in candidate_slots(c)}
        chunks.update((b.cy, b.cx, tc) for b in a.blocks(side) for tc in tcs)
    return len(chunks) * tile_bytes(flag_band, side) <= ctx.cache_bytes // 4


# --------------------------------------------------------------------------- the primitive


@primitive(
    "area_over_time",
    AreaOverTimeIn,
    AreaOverTimeAnswer,
    "An index over an area (or up to 6 areas) for each overpass, with spread, anomaly, trend and a chart.",
    "geometry (GeoJSON Polygon/MultiPolygon) | bbox | areas (<= 6, each {id, geometry|bbox}); "
    "start_date/end_date YYYY-MM-DD; index ndvi ndwi ndmi lswi evi vv vh vh_vv; max_scenes 3..24 "
    "(default 16). Per overpass: cos(lat)-weighted mean, std, median, p10..p90, clear counts; "
    "overpasses under the clear-fraction threshold (default 0.4) are listed as excluded. Caps: "
    f"{MAX_AREAS} areas, {MAX_VERTICES} vertices and {MAX_AREA_KM2:g} km^2 per area; per call at "
    f"most {MAX_CELL_SCENES:,} cells inside x candidate overpasses (over_budget otherwise). "
    "Blocks wholly inside an area are answered from the pipeline's block summaries (method "
    "block_summaries+edge_cells: counts, mean, std exact; quantiles from a fixed-grid histogram "
    "with guaranteed quantile_bounds); use_summaries=false reads every cell (exact quantiles).",
    cost="heavy",
)
def area_over_time(ctx: ServiceContext, args: AreaOverTimeIn) -> AreaOverTimeAnswer:
    """area_over_time {geometry | bbox | areas, start_date, end_date, index, max_scenes}."""
    given = [x is not None for x in (args.geometry, args.bbox, args.areas)]
    if sum(given) != 1:
        raise InvalidArgument(
            "give exactly one of geometry, bbox or areas", code="invalid_geometry"
        )
    if args.areas is not None:
        if not args.areas:
            raise InvalidArgument("areas is empty", code="invalid_geometry")
        if len(args.areas) > MAX_AREAS:
            raise InvalidArgument(
                f"{len(args.areas)} areas; at most {MAX_AREAS}",
                code="too_many_areas",
                details={"max_areas": MAX_AREAS},
            )
        ids = [a.id for a in args.areas]
        if len(set(ids)) != len(ids):
            raise InvalidArgument("area ids must be unique", code="invalid_geometry")
        specs = [(a.id, a.geometry, a.bbox) for a in args.areas]
    else:
        specs = [("area", args.geometry, args.bbox)]
    index = args.index.strip().lower() if isinstance(args.index, str) else args.index
    if index not in INDEX_NAMES:
        raise InvalidArgument(
            f"unknown index {args.index!r}; valid: {', '.join(INDEX_NAMES)}", code="unknown_index"
        )
    band = INDEX_NAMES[index]
    if isinstance(args.max_scenes, bool) or not 3 <= args.max_scenes <= 24:
        raise InvalidArgument(
            f"max_scenes must be in 3..24, got {args.max_scenes}", code="invalid_max_scenes"
        )
    if not 0.0 <= args.clear_fraction <= 1.0:
        raise InvalidArgument("clear_fraction must be in [0, 1]", code="invalid_argument")
    (start, t0), (end, t1) = _date(args.start_date, "start_date"), _date(args.end_date, "end_date")
    if start > end:
        raise InvalidArgument(f"start_date {start} is after end_date {end}", code="reversed_dates")
    with store_errors():  # coordinates off the globe: invalid_latitude / invalid_longitude
        areas = [_area(ctx, i, g, b) for i, g, b in specs]
    with store_errors():
        reader = ctx.reader_as_of(args.as_of)
        family = REGISTRY[band].family
        cands = [ctx.overpasses(reader, family, area.box, t0, t1) for area in areas]
        keep = _check_budget(ctx, reader, band, areas, cands)
        outs, facts, charts = [], [], []
        for out, f, ch in series(
            ctx,
            reader,
            band,
            areas,
            cands,
            args.max_scenes,
            args.clear_fraction,
            keep,
            args.use_summaries,
        ):
            outs.append(out)
            facts.extend(f)
            charts.append(ch)
    chart_id = png64 = None
    if args.chart:
        png = render_area_chart(
            charts, title=f"{index.upper()} {start} .. {end} (median, p25-p75)", ylabel=index
        )
        chart_id = ctx.charts.put(png)
        png64 = base64.b64encode(png).decode("ascii")
    answer = {
        "index": index,
        "band": band,
        "start_date": start.isoformat(),
        "end_date": end.isoformat(),
        "max_scenes": args.max_scenes,
        "clear_fraction_threshold": args.clear_fraction,
        "weighting": "cells weighted by cos(latitude) (true area); cells = centres inside the area; "
        "weighted quantiles by interpolation over cumulative mid-point weights",
        "areas": outs,
        "chart_id": chart_id,
        "chart_png_base64": png64,
        "snapshot_id": reader.snapshot_id,
        "facts": facts,
    }
    return finish(
        ctx,
        "area_over_time",
        args,
        AreaOverTimeBody,
        AreaOverTimeAnswer,
        answer,
        [],
        reader.snapshot_id,
    )
