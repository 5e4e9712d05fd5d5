"""compare_same_doy: a value against the same ±15 days of other years (change, not season).

The value is the clear observation nearest the day asked for within
:data:`~api.models.season.SEASON_HALF_DAYS` of it (a cell), or the weighted median of
the clear cells of the overpass nearest it (an area; overpasses whose clear fraction
is under :data:`MIN_CLEAR_FRACTION` are skipped, as area_over_time's default). Each
other year contributes its points within the same calendar day ±15 days (29 February
is read as 28 February in other years). The baseline is the median of every other-year
point; the spread 1.4826 x their median absolute deviation.
"""

from __future__ import annotations

import datetime as dt
import math
from typing import Any

import numpy as np

from api.context import ServiceContext
from api.errors import InvalidArgument, NoObservation
from api.models.season import (
    MAX_YEARS,
    SEASON_HALF_DAYS,
    CompareSameDoyAnswer,
    CompareSameDoyBody,
    CompareSameDoyIn,
)
from api.queries._common import (
    canonical_scalar_band,
    finish,
    make_fact,
    parse_cell_arg,
    slot_date,
    store_errors,
)
from api.queries.area_cells import cell_scenes
from api.queries.area_geometry import parse_area
from api.queries.cell import read_cell
from api.queries.read_area import AREA_STATS_DERIVATION
from api.registry import primitive
from store import tslot as tslots
from store.cube import REGISTRY
from store.errors import InvalidDate

__all__ = ["MIN_CLEAR_FRACTION", "compare_same_doy"]

MIN_CLEAR_FRACTION = 0.4
"""An area's overpass counts only when at least this fraction of its cells is clear."""
_EPOCH = dt.date(1970, 1, 1)
_RULE = (
    "value: the clear observation (area: overpass median) nearest the day within +-{h} days; "
    "baseline: median of the other years' points within the same calendar day +-{h} days; "
    "z = (value - baseline) / (1.4826 x MAD of those points)"
)


def _same_day(day: dt.date, year: int) -> dt.date:
    try:
        return day.replace(year=year)
    except ValueError:  # 29 February in a common year
        return day.replace(year=year, day=28)


def _window(day: dt.date) -> tuple[int, int]:
    t = (day - _EPOCH).days
    return t - SEASON_HALF_DAYS, t + SEASON_HALF_DAYS


def _parse(args: CompareSameDoyIn) -> tuple[dt.date, list[int] | None]:
    try:
        day = tslots.slot_to_date(tslots.day_slot(args.date.strip()))
    except InvalidDate as exc:
        raise InvalidArgument(f"date: {exc}", code="invalid_date") from None
    years = args.years
    if years is not None:
        if len(years) > MAX_YEARS:
            raise InvalidArgument(
                f"{len(years)} years; at most {MAX_YEARS}", code="invalid_argument"
            )
        bad = [y for y in years if not 1970 <= y <= 2200]
        if bad:
            raise InvalidArgument(f"years out of range: {bad[:5]}", code="invalid_argument")
        years = sorted(set(years) - {day.year})
    return day, years


@primitive(
    "compare_same_doy",
    CompareSameDoyIn,
    CompareSameDoyAnswer,
    "A value at a date against the same +-15 days of other years: change, or just the season?",
    "One of cell, geometry, bbox (an area: the weighted median of its clear cells per overpass, "
    "overpasses at least 40% clear); band; date; years (default: every other year with data). "
    "The value is the clear one nearest the date within +-15 days (no_observation otherwise). "
    "Each other year: its points within the same calendar day +-15 days. Baseline median, min, "
    "max, the difference and a robust z (MAD) say whether the value is outside the season.",
    cost="heavy",
)
def compare_same_doy(ctx: ServiceContext, args: CompareSameDoyIn) -> CompareSameDoyAnswer:
    """compare_same_doy {cell | geometry | bbox, band, date, years?, as_of?}."""
    given = [n for n in ("cell", "geometry", "bbox") if getattr(args, n) is not None]
    if len(given) != 1:
        raise InvalidArgument(
            "compare_same_doy needs exactly one of cell, geometry or bbox", code="invalid_argument"
        )
    band = canonical_scalar_band(args.band)
    day, years = _parse(args)
    cell = parse_cell_arg(args.cell) if args.cell is not None else None
    with store_errors():
        area = parse_area("area", args.geometry, args.bbox) if cell is None else None
        reader = ctx.reader_as_of(args.as_of)
        # every point of the record: (tslot, value, fact)
        points: dict[int, tuple[float, dict[str, Any]]] = {}
        if cell is not None:
            s = read_cell(ctx, reader, band, cell.lat_q, cell.lng_q)
            record = [int(t) for t in s.tslots.tolist()]
            values = {
                int(t): float(v)
                for t, v, c in zip(
                    s.tslots.tolist(), s.values.tolist(), s.clear.tolist(), strict=True
                )
                if c and math.isfinite(v)
            }
        else:
            assert area is not None
            overs = ctx.overpasses(reader, REGISTRY[band].family, area.box)
            record = [t for t, _ in overs]
            sources = dict(overs)
        have_years = sorted({(_EPOCH + dt.timedelta(days=t)).year for t in record} - {day.year})
        compare = years if years is not None else have_years
        windows = {y: _window(_same_day(day, y)) for y in compare}
        windows[day.year] = _window(day)
        wanted = [t for t in record if any(a <= t <= b for a, b in windows.values())]
        if cell is not None:
            for t in wanted:
                if t in values:
                    f = make_fact(
                        ctx,
                        reader,
                        cell.cell,
                        band,
                        t,
                        values[t],
                        lat_q=cell.lat_q,
                        lng_q=cell.lng_q,
                    )
                    points[t] = (values[t], f)
        else:
            assert area is not None
            for t, st in zip(
                wanted, cell_scenes(ctx, reader, band, area, wanted, False), strict=True
            ):
                if st is None or st["clear_fraction"] < MIN_CLEAR_FRACTION:
                    continue
                f = make_fact(
                    ctx,
                    reader,
                    f"geom:{area.digest}",
                    band,
                    t,
                    dict(st),
                    sources=sources[t],
                    derivation=AREA_STATS_DERIVATION,
                )
                points[t] = (float(st["median"]), f)

    def point(t: int) -> dict[str, Any]:
        v, f = points[t]
        return {"tslot": t, "date": slot_date(t), "value": v, "fact_id": f["fact_id"]}

    a, b = windows[day.year]
    target = (day - _EPOCH).days
    here = sorted((t for t in points if a <= t <= b), key=lambda t: (abs(t - target), t))
    if not here:
        clear = sorted(points)
        raise NoObservation(
            f"no clear {band} value within {SEASON_HALF_DAYS} days of {day.isoformat()}",
            details={
                "date": day.isoformat(),
                "nearest_before": max((t for t in clear if t < a), default=None),
                "nearest_after": min((t for t in clear if t > b), default=None),
            },
        )
    value_t = here[0]
    others: list[dict[str, Any]] = []
    pooled: list[float] = []
    missing: list[int] = []
    used = {value_t}
    for y in compare:
        lo, hi = windows[y]
        ts = [t for t in sorted(points) if lo <= t <= hi]
        vs = [points[t][0] for t in ts]
        pooled.extend(vs)
        used.update(ts)
        if not ts:
            missing.append(y)
        others.append(
            {
                "year": y,
                "start_date": slot_date(lo),
                "end_date": slot_date(hi),
                "points": [point(t) for t in ts],
                "median": float(np.median(vs)) if vs else None,
            }
        )
    value = points[value_t][0]
    base = float(np.median(pooled)) if pooled else None
    diff = value - base if base is not None else None
    z = None
    if base is not None and len(pooled) >= 3:
        mad = float(np.median(np.abs(np.asarray(pooled) - base)))
        z = diff / (1.4826 * mad) if mad > 0 and diff is not None else None
    answer = {
        "kind": "cell" if cell is not None else "area",
        "cell": cell.cell if cell is not None else None,
        "area_km2": area.km2 if area is not None else None,
        "band": band,
        "date": day.isoformat(),
        "value": point(value_t),
        "offset_days": value_t - target,
        "other_years": others,
        "years_without_data": missing,
        "baseline_median": base,
        "baseline_min": min(pooled) if pooled else None,
        "baseline_max": max(pooled) if pooled else None,
        "difference": diff,
        "z": z,
        "within_season_range": (min(pooled) <= value <= max(pooled)) if pooled else None,
        "rule": _RULE.format(h=SEASON_HALF_DAYS),
        "snapshot_id": reader.snapshot_id,
        "facts": [points[t][1] for t in sorted(used)],
    }
    return finish(
        ctx,
        "compare_same_doy",
        args,
        CompareSameDoyBody,
        CompareSameDoyAnswer,
        answer,
        [cell.cell] if cell is not None else [],
        reader.snapshot_id,
    )
