"""area_over_time: an index over one to six areas, per overpass, with anomaly, trend and chart.

Definitions
-----------
* Cells of an area: cells whose centre lies inside the polygon
  (``shapely.contains_xy`` over the centres of the area's bounding lattice
  box), or inside the bbox.
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

Caps (all tested): :data:`MAX_AREAS`, :data:`MAX_CANDIDATES` here;
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
import numpy.typing as npt

from api.charts import ChartSeries, render_area_chart
from api.context import ServiceContext
from api.errors import InvalidArgument
from api.models import AreaOverTimeAnswer, AreaOverTimeBody, AreaOverTimeIn
from api.queries._common import clear_info, finish, make_fact, slot_date, store_errors
from api.queries.area_geometry import MAX_AREA_KM2, MAX_VERTICES, Area, parse_area
from api.queries.area_stats import mann_kendall, pick_even, scenes_stats, theil_sen
from api.registry import primitive
from store import tslot
from store.cube import REGISTRY, CubeReader
from store.cube.bands import INDEX_NAMES
from store.errors import InvalidDate

__all__ = [
    "BASELINE_DAYS",
    "MAX_AREAS",
    "MAX_CANDIDATES",
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
_DIRECT_READ_COLUMNS = (
    16  # above this many chunk columns, read slots directly instead of caching columns
)


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


# --------------------------------------------------------------------------- reading


def _read(
    ctx: ServiceContext,
    reader: CubeReader,
    band: str,
    box: tuple[int, int, int, int],
    slots: list[int],
) -> npt.NDArray[Any]:
    """Values ``(len(slots), h, w)`` of a band over a lattice box (fill where absent).

    Small boxes read through the context's tile cache: only the time chunks
    holding ``slots``, of the blocks the box touches, all missing chunks of
    the call fetched together.
    """
    from store.cube import band_spec

    spec = band_spec(band)
    y0, y1, x0, x1 = box
    out = np.full((len(slots), y1 - y0, x1 - x0), spec.fill_value, dtype=spec.dtype)
    if not slots:
        return out
    side = 1 << reader.block_level
    cys = range(y0 // side, (y1 - 1) // side + 1)
    cxs = range(x0 // side, (x1 - 1) // side + 1)
    if len(cys) * len(cxs) > _DIRECT_READ_COLUMNS:
        arr = reader.array(band)
        return np.asarray(arr.oindex[(np.asarray(slots, np.int64), slice(y0, y1), slice(x0, x1))])
    step = spec.time_chunk
    tcs = sorted({t // step for t in slots})
    blocks = [(cy, cx) for cy in cys for cx in cxs]
    tiles = ctx.tiles(reader, band, [(cy, cx, tc) for cy, cx in blocks for tc in tcs])
    at = {tc: k for k, tc in enumerate(tcs)}
    for b, (cy, cx) in enumerate(blocks):
        by0, bx0 = cy * side, cx * side
        ya, yb = max(y0, by0), min(y1, by0 + side)
        xa, xb = max(x0, bx0), min(x1, bx0 + side)
        dst = out[:, ya - y0 : yb - y0, xa - x0 : xb - x0]
        row = tiles[b * len(tcs) : (b + 1) * len(tcs)]
        for i, t in enumerate(slots):
            tile = row[at[t // step]]
            if tile is not None:
                dst[i] = tile[t % step, ya - by0 : yb - by0, xa - bx0 : xb - bx0]
    return out


def _clear_fractions(
    ctx: ServiceContext, reader: CubeReader, band: str, area: Area, slots: list[int]
) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.bool_]]:
    flag_band, clear_value = clear_info(band)
    flags = _read(ctx, reader, flag_band, area.box, slots)
    ok = (flags == clear_value) & area.inside[None]
    n_total = max(1, area.n_cells)
    return np.count_nonzero(ok.reshape(len(slots), -1), axis=1) / n_total, ok


# --------------------------------------------------------------------------- series, anomaly, trend


def _doy_distance(a: int, b: int) -> int:
    d = abs(tslot.day_of_year(a) - tslot.day_of_year(b))
    return min(d, 365 - d)


def _series(
    ctx: ServiceContext,
    reader: CubeReader,
    band: str,
    area: Area,
    t0: int,
    t1: int,
    max_scenes: int,
    threshold: float,
) -> tuple[dict[str, Any], list[dict[str, Any]], ChartSeries]:
    family = REGISTRY[band].family
    cand = ctx.overpasses(reader, family, area.box, t0, t1)
    sources = dict(cand)
    slots = [t for t, _ in cand]
    if len(slots) > MAX_CANDIDATES:
        slots = pick_even(slots, MAX_CANDIDATES)
    excluded = []
    above: list[int] = []
    oks = np.zeros((0, *area.inside.shape), bool)
    if area.inside.any() and slots:
        fractions, oks = _clear_fractions(ctx, reader, band, area, slots)
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
        values = _read(ctx, reader, band, area.box, kept)
        row = {t: i for i, t in enumerate(slots)}
        all_stats = scenes_stats(values, oks[[row[t] for t in kept]], area.weights, area.n_cells)
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
            scenes.append({"date": slot_date(t), "tslot": t, **st, "quality": quality})
            facts.append(
                make_fact(
                    ctx,
                    reader,
                    f"geom:{area.digest}",
                    band,
                    t,
                    dict(st),
                    sources=sources.get(t, []),
                    derivation="earthmem.area_stats.coslat.v1",
                )
            )
    excluded.sort(key=lambda e: e["tslot"])
    anomaly = _anomaly(ctx, reader, band, area, scenes, threshold)
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
    }
    chart = ChartSeries(
        area.id,
        [s["date"] for s in scenes],
        [s["median"] for s in scenes],
        [s["p25"] for s in scenes],
        [s["p75"] for s in scenes],
    )
    return out, facts, chart


def _anomaly(
    ctx: ServiceContext,
    reader: CubeReader,
    band: str,
    area: Area,
    scenes: list[dict[str, Any]],
    threshold: float,
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
    fractions, oks = _clear_fractions(ctx, reader, band, area, cand)
    use = [i for i, f in enumerate(fractions.tolist()) if f >= threshold]
    if not use:
        return {
            **base,
            "reason": "earlier years' same-season overpasses are all under the clear-fraction threshold",
        }
    values = _read(ctx, reader, band, area.box, [cand[i] for i in use])
    stats = []
    tslots = []
    for i, st in zip(use, scenes_stats(values, oks[use], area.weights, area.n_cells), strict=True):
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
    f"{MAX_AREAS} areas, {MAX_VERTICES} vertices and {MAX_AREA_KM2:g} km^2 per area.",
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
        reader = ctx.reader()
        outs, facts, charts = [], [], []
        for area in areas:
            out, f, ch = _series(
                ctx, reader, band, area, t0, t1, args.max_scenes, args.clear_fraction
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
