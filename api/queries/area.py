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

Caps (all tested): :data:`MAX_AREAS`, :data:`MAX_CANDIDATES` and the per-call
budget :data:`MAX_CELL_SCENES` (cells inside x candidate overpasses, typed
``over_budget``) here;
:data:`~api.queries.area_geometry.MAX_VERTICES`,
:data:`~api.queries.area_geometry.MAX_AREA_KM2` and
:data:`~api.queries.area_geometry.MAX_BOX_CELLS` per area.

The areas are checked and put on the lattice by :mod:`api.queries.area_geometry`;
the statistics and trend tests are :mod:`api.queries.area_stats`.
"""

from __future__ import annotations

import base64
import datetime as dt
from typing import Any

import numpy as np

from api.charts import ChartSeries, render_area_chart
from api.context import ServiceContext
from api.errors import InvalidArgument
from api.models import AreaOverTimeAnswer, AreaOverTimeBody, AreaOverTimeIn
from api.queries import area_summary
from api.queries._common import clear_info, finish, make_fact, slot_date, store_errors
from api.queries.area_cells import tile_bytes
from api.queries.area_geometry import MAX_AREA_KM2, MAX_VERTICES, Area, parse_area
from api.queries.area_stats import mann_kendall, pick_even, theil_sen
from api.registry import primitive
from store import tslot
from store.cube import REGISTRY, CubeReader
from store.cube.bands import INDEX_NAMES
from store.errors import InvalidDate

__all__ = [
    "BASELINE_DAYS",
    "MAX_AREAS",
    "MAX_CANDIDATES",
    "MAX_CELL_SCENES",
    "MIN_TREND_SCENES",
    "area_over_time",
]

MAX_AREAS = 6
"""Most areas in one call."""
MAX_CANDIDATES = 400
"""Most overpasses whose clear fraction is measured per call (evenly thinned beyond)."""
MAX_BASELINE = 48
"""Most baseline overpasses read for the anomaly."""
BASELINE_DAYS = 30
"""Same-season window: +- this many days of year."""
MIN_TREND_SCENES = 6
"""Overpasses needed for the trend."""
GOOD_CLEAR_FRACTION = 0.8
"""Clear fraction from which an overpass is of quality 'good' (else 'fair')."""
MAX_CELL_SCENES = 200_000_000
"""Budget of one call: cells inside the areas x candidate overpasses, summed over the areas."""


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


def _candidate_slots(cand: list[tuple[int, list[str]]]) -> list[int]:
    """The overpasses whose clear fraction is measured (evenly thinned to MAX_CANDIDATES)."""
    slots = [t for t, _ in cand]
    return pick_even(slots, MAX_CANDIDATES) if len(slots) > MAX_CANDIDATES else slots


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

    per_area = [a.n_cells * len(_candidate_slots(c)) for a, c in zip(areas, cands, strict=True)]
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
        tcs = {t // step for t in _candidate_slots(c)}
        chunks.update((b.cy, b.cx, tc) for b in a.blocks(side) for tc in tcs)
    return len(chunks) * tile_bytes(flag_band, side) <= ctx.cache_bytes // 4


# --------------------------------------------------------------------------- series, anomaly, trend


def _doy_distance(a: int, b: int) -> int:
    d = abs(tslot.day_of_year(a) - tslot.day_of_year(b))
    return min(d, 365 - d)


def _series(
    ctx: ServiceContext,
    reader: CubeReader,
    band: str,
    area: Area,
    cand: list[tuple[int, list[str]]],
    max_scenes: int,
    threshold: float,
    keep: bool,
    use_summaries: bool = True,
) -> tuple[dict[str, Any], list[dict[str, Any]], ChartSeries]:
    sources = dict(cand)
    slots = _candidate_slots(cand)
    excluded = []
    above: list[int] = []
    usage: list[area_summary.Usage] = []
    if area.n_cells and slots:
        fractions, how = area_summary.clear_fractions(
            ctx, reader, band, area, slots, keep, use_summaries
        )
        usage.append(how)
        for t, f in zip(slots, fractions.tolist(), strict=True):
            if f < threshold:
                excluded.append(
                    {
                        "date": slot_date(t),
                        "tslot": t,
                        "clear_fraction": f,
                        "reason": f"clear fraction {f:.2f} below the threshold {threshold:.2f}",
                    }
                )
            else:
                above.append(t)
    kept = pick_even(above, max_scenes)
    thinned = [t for t in above if t not in set(kept)]
    scenes: list[dict[str, Any]] = []
    facts: list[dict[str, Any]] = []
    if kept:
        all_stats, how = area_summary.scenes(ctx, reader, band, area, kept, keep, use_summaries)
        usage.append(how)
        for t, st in zip(kept, all_stats, strict=True):
            if st is None:
                excluded.append(
                    {
                        "date": slot_date(t),
                        "tslot": t,
                        "clear_fraction": 0.0,
                        "reason": "no clear value inside the area",
                    }
                )
                continue
            quality = "good" if st["clear_fraction"] >= GOOD_CLEAR_FRACTION else "fair"
            bounds = st.pop("quantile_bounds", None)
            scenes.append(
                {
                    "date": slot_date(t),
                    "tslot": t,
                    **st,
                    "quality": quality,
                    "quantile_bounds": bounds,
                }
            )
            facts.append(
                make_fact(
                    ctx,
                    reader,
                    f"geom:{area.digest}",
                    band,
                    t,
                    dict(st) if bounds is None else {**st, "quantile_bounds": bounds},
                    sources=sources.get(t, []),
                    derivation="earthmem.area_stats.coslat.v1"
                    if bounds is None
                    else "earthmem.area_stats.coslat.block_summaries.v1",
                )
            )
    excluded.sort(key=lambda e: e["tslot"])
    anomaly = _anomaly(ctx, reader, band, area, scenes, threshold, keep, use_summaries)
    trend = _trend(scenes)
    out = {
        "id": area.id,
        "geometry_digest": area.digest,
        "area_km2": area.km2,
        "n_cells": area.n_cells,
        "scenes": scenes,
        "excluded": excluded,
        "thinned": thinned,
        "anomaly": anomaly,
        "trend": trend,
        **_method(usage),
    }
    chart = ChartSeries(
        area.id,
        [s["date"] for s in scenes],
        [s["median"] for s in scenes],
        [s["p25"] for s in scenes],
        [s["p75"] for s in scenes],
    )
    return out, facts, chart


def _method(usage: list[area_summary.Usage]) -> dict[str, Any]:
    """The answer's account of how an area's statistics were computed.

    The statistics pass (the kept overpasses) when there was one, else the clear-fraction pass.
    """
    if not usage:
        return {
            "method": area_summary.CELLS,
            "summary_blocks": 0,
            "cells_read": 0,
            "method_note": None,
        }
    u = usage[-1]
    return {
        "method": u.method,
        "summary_blocks": u.summary_blocks,
        "cells_read": u.cells_read,
        "method_note": u.note,
    }


def _anomaly(
    ctx: ServiceContext,
    reader: CubeReader,
    band: str,
    area: Area,
    scenes: list[dict[str, Any]],
    threshold: float,
    keep: bool,
    use_summaries: bool,
) -> dict[str, Any]:
    empty: dict[str, Any] = {
        "latest_tslot": None,
        "latest_median": None,
        "baseline_median": None,
        "baseline_tslots": [],
        "difference": None,
        "z": None,
        "z_basis": None,
    }
    if not scenes:
        return {**empty, "reason": "no overpass kept"}
    latest = scenes[-1]
    t_latest = int(latest["tslot"])
    year_start = tslot.day_slot(dt.date(tslot.slot_to_date(t_latest).year, 1, 1))
    base = {**empty, "latest_tslot": t_latest, "latest_median": latest["median"]}
    cand = [
        t
        for t, _ in ctx.overpasses(reader, REGISTRY[band].family, area.box, None, year_start - 1)
        if _doy_distance(t, t_latest) <= BASELINE_DAYS
    ][-MAX_BASELINE:]
    if not cand:
        return {
            **base,
            "reason": f"no overpass in earlier years within +-{BASELINE_DAYS} days of year",
        }
    fractions, _ = area_summary.clear_fractions(ctx, reader, band, area, cand, keep, use_summaries)
    use = [i for i, f in enumerate(fractions.tolist()) if f >= threshold]
    if not use:
        return {
            **base,
            "reason": "earlier years' same-season overpasses are all under the clear-fraction threshold",
        }
    stats = []
    tslots = []
    used, _ = area_summary.scenes(
        ctx, reader, band, area, [cand[i] for i in use], keep, use_summaries
    )
    for i, st in zip(use, used, strict=True):
        if st is not None:
            stats.append(st)
            tslots.append(cand[i])
    if not stats:
        return {**base, "reason": "no clear baseline value inside the area"}
    medians = np.array([s["median"] for s in stats])
    baseline = float(np.median(medians))
    diff = float(latest["median"]) - baseline
    z = None
    basis = None
    reason = None
    # A std of two or three baseline medians can be ~0 by chance (z in the
    # hundreds of thousands); the within-area spread of the baseline overpasses
    # is a floor, so z is never sharper than the area's own heterogeneity.
    between = float(np.std(medians, ddof=1)) if medians.size >= 2 else 0.0
    spatial = float(np.mean([(s["p75"] - s["p25"]) / 1.349 for s in stats]))
    sd = max(between, spatial)
    if sd > 0:
        if between >= spatial:
            basis = f"std of the {medians.size} baseline medians"
        else:
            basis = (
                f"robust spatial spread (IQR/1.349) of the {medians.size} baseline overpass(es), "
                f"larger than the std of their medians ({between:.4g})"
            )
        z = diff / sd
    if z is None:
        reason = "baseline spread is zero: z undefined"
    return {
        **base,
        "baseline_median": baseline,
        "baseline_tslots": tslots,
        "difference": diff,
        "z": z,
        "z_basis": basis,
        "reason": reason,
    }


def _trend(scenes: list[dict[str, Any]]) -> dict[str, Any]:
    n = len(scenes)
    if n < MIN_TREND_SCENES:
        return {
            "slope_per_year": None,
            "intercept": None,
            "mann_kendall_p": None,
            "mann_kendall_s": None,
            "n": n,
            "reason": f"{n} overpasses kept; the trend needs at least {MIN_TREND_SCENES}",
        }
    x = np.array([s["tslot"] for s in scenes], dtype=np.float64) / 365.25
    y = np.array([s["median"] for s in scenes], dtype=np.float64)
    slope, intercept = theil_sen(y, x)
    s, p = mann_kendall(y)
    return {
        "slope_per_year": slope,
        "intercept": intercept,
        "mann_kendall_p": p,
        "mann_kendall_s": s,
        "n": n,
        "reason": None,
    }


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
        areas = [parse_area(i, g, b) for i, g, b in specs]
    with store_errors():
        reader = ctx.reader_as_of(args.as_of)
        family = REGISTRY[band].family
        cands = [ctx.overpasses(reader, family, area.box, t0, t1) for area in areas]
        keep = _check_budget(ctx, reader, band, areas, cands)
        outs, facts, charts = [], [], []
        for area, cand in zip(areas, cands, strict=True):
            out, f, ch = _series(
                ctx,
                reader,
                band,
                area,
                cand,
                args.max_scenes,
                args.clear_fraction,
                keep,
                args.use_summaries,
            )
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
