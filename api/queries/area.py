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

Caps (all tested): :data:`MAX_AREAS`, :data:`MAX_VERTICES`, :data:`MAX_AREA_KM2`,
:data:`MAX_BOX_CELLS`, :data:`MAX_CANDIDATES`.
"""

from __future__ import annotations

import base64
import datetime as dt
import math
from dataclasses import dataclass
from typing import Any

import blake3
import numpy as np
import numpy.typing as npt

from api.charts import ChartSeries, render_area_chart
from api.context import BAND_FAMILY, ServiceContext
from api.errors import InvalidArgument
from api.models import AreaOverTimeAnswer, AreaOverTimeBody, AreaOverTimeIn
from api.queries._common import INDEX_BANDS, clear_info, finish, make_fact, slot_date, store_errors
from api.receipts import canonical_cbor
from api.registry import primitive
from store import address
from store.cube import CubeReader

__all__ = [
    "BASELINE_DAYS",
    "MAX_AREAS",
    "MAX_AREA_KM2",
    "MAX_BOX_CELLS",
    "MAX_CANDIDATES",
    "MAX_VERTICES",
    "MIN_TREND_SCENES",
    "area_over_time",
    "mann_kendall",
    "pick_even",
    "weighted_stats",
]

MAX_AREAS = 6
"""Most areas in one call."""
MAX_VERTICES = 1000
"""Most vertices (all rings of a geometry together) per area."""
MAX_AREA_KM2 = 100.0
"""Largest area (km^2) per area."""
MAX_BOX_CELLS = 4_000_000
"""Most lattice cells in an area's bounding box (thin diagonal shapes)."""
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
_GEOD_KM2 = 1e-6


@dataclass(frozen=True, eq=False)
class _Area:
    id: str
    geom: Any
    digest: str
    km2: float
    box: tuple[int, int, int, int]
    inside: npt.NDArray[np.bool_]
    weights: npt.NDArray[np.float64]  # (h, w) cos(lat), zero outside


# --------------------------------------------------------------------------- pure statistics


def weighted_stats(x: npt.NDArray[np.float64], w: npt.NDArray[np.float64]) -> dict[str, float]:
    """Weighted mean, std (population) and quantiles p10 p25 median p75 p90.

    Args:
        x: Values (finite).
        w: Positive weights, same shape.
    """
    # Sort on float32 keys when that loses nothing (cube values are float32): ~2x
    # faster; equal values may come in any order, the interpolated quantile is the same.
    keys = x.astype(np.float32)
    order = np.argsort(keys if np.array_equal(keys, x) else x)
    xs, ws = x[order], w[order]
    total = float(ws.sum())
    # elementwise sums, not np.dot: a BLAS dot on ~10^4 values spins up OpenBLAS
    # threads, which cost ~8 ms per call when the other core is busy (measured)
    mean = float((xs * ws).sum() / total)
    std = float(math.sqrt(max(0.0, float((ws * (xs - mean) ** 2).sum()) / total)))
    cw = (np.cumsum(ws) - ws / 2.0) / total
    q = np.interp([0.10, 0.25, 0.50, 0.75, 0.90], cw, xs)
    return {
        "mean": mean,
        "std": std,
        "p10": float(q[0]),
        "p25": float(q[1]),
        "median": float(q[2]),
        "p75": float(q[3]),
        "p90": float(q[4]),
    }


def mann_kendall(y: npt.ArrayLike) -> tuple[int, float]:
    """Mann-Kendall S and two-sided p-value (tie-corrected variance, continuity correction).

    Args:
        y: Series in time order (n >= 3).

    Returns:
        ``(S, p)``.
    """
    v = np.asarray(y, dtype=np.float64)
    n = v.size
    diff = np.sign(v[None, :] - v[:, None])
    s = int(np.triu(diff, k=1).sum())
    _, counts = np.unique(v, return_counts=True)
    var = (
        n * (n - 1) * (2 * n + 5) - float(np.sum(counts * (counts - 1) * (2 * counts + 5)))
    ) / 18.0
    if var <= 0:
        return s, 1.0
    z = (s - 1) / math.sqrt(var) if s > 0 else (s + 1) / math.sqrt(var) if s < 0 else 0.0
    return s, float(math.erfc(abs(z) / math.sqrt(2.0)))


def pick_even(tslots: list[int], m: int) -> list[int]:
    """Choose ``m`` of sorted ``tslots`` evenly in time, keeping the first and the last."""
    if len(tslots) <= m:
        return list(tslots)
    arr = np.asarray(tslots, dtype=np.float64)
    targets = np.linspace(arr[0], arr[-1], m)
    free = np.ones(arr.size, bool)
    chosen = []
    for t in targets:
        cand = np.flatnonzero(free)
        j = cand[int(np.argmin(np.abs(arr[cand] - t)))]
        free[j] = False
        chosen.append(int(j))
    return [tslots[j] for j in sorted(chosen)]


# --------------------------------------------------------------------------- input checks


def _num(v: Any) -> float:
    if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(float(v)):
        raise InvalidArgument(
            f"coordinate {v!r} is not a finite number"[:200], code="invalid_geometry"
        )
    return float(v)


def _check_lat_lng(lat: float, lng: float) -> None:
    if not -90.0 <= lat <= 90.0:
        raise InvalidArgument(f"latitude {lat} outside [-90, 90]", code="invalid_latitude")
    if not -180.0 <= lng <= 180.0:
        raise InvalidArgument(f"longitude {lng} outside [-180, 180]", code="invalid_longitude")


def _rings(geometry: Any) -> list[list[list[Any]]]:
    """The polygons' rings of a GeoJSON Polygon/MultiPolygon, shape-checked, vertices capped."""
    if isinstance(geometry, dict) and geometry.get("type") == "Feature":
        geometry = geometry.get("geometry")
    if not isinstance(geometry, dict) or geometry.get("type") not in ("Polygon", "MultiPolygon"):
        raise InvalidArgument(
            "geometry must be a GeoJSON Polygon or MultiPolygon", code="invalid_geometry"
        )
    coords = geometry.get("coordinates")
    polys = [coords] if geometry["type"] == "Polygon" else coords
    if not isinstance(polys, list) or not polys:
        raise InvalidArgument("geometry has no coordinates", code="invalid_geometry")
    count = 0
    for poly in polys:
        if not isinstance(poly, list) or not poly:
            raise InvalidArgument(
                "a polygon must be a non-empty list of rings", code="invalid_geometry"
            )
        for ring in poly:
            if not isinstance(ring, list) or len(ring) < 4:
                raise InvalidArgument(
                    "a ring must list at least 4 positions", code="invalid_geometry"
                )
            count += len(ring)
            if count > MAX_VERTICES:
                raise InvalidArgument(
                    f"geometry has more than {MAX_VERTICES} vertices",
                    code="too_many_vertices",
                    details={"max_vertices": MAX_VERTICES},
                )
            for pos in ring:
                if not isinstance(pos, list | tuple) or len(pos) < 2:
                    raise InvalidArgument("a position must be [lng, lat]", code="invalid_geometry")
                _check_lat_lng(_num(pos[1]), _num(pos[0]))
            if list(ring[0][:2]) != list(ring[-1][:2]):
                raise InvalidArgument(
                    "a ring must be closed (first position = last)", code="invalid_geometry"
                )
    return polys


def _bbox(value: Any) -> tuple[float, float, float, float]:
    if isinstance(value, dict):
        try:
            parts = [value["min_lat"], value["min_lng"], value["max_lat"], value["max_lng"]]
        except KeyError:
            raise InvalidArgument(
                "bbox needs min_lat, min_lng, max_lat, max_lng", code="invalid_bbox"
            ) from None
    elif isinstance(value, list | tuple) and len(value) == 4:
        parts = list(value)
    else:
        raise InvalidArgument(
            "bbox must be {min_lat, min_lng, max_lat, max_lng} or a 4-list", code="invalid_bbox"
        )
    if any(
        isinstance(p, bool) or not isinstance(p, int | float) or not math.isfinite(float(p))
        for p in parts
    ):
        raise InvalidArgument("bbox values must be finite numbers", code="invalid_bbox")
    min_lat, min_lng, max_lat, max_lng = (float(p) for p in parts)
    _check_lat_lng(min_lat, min_lng)
    _check_lat_lng(max_lat, max_lng)
    if min_lat >= max_lat or min_lng >= max_lng:
        raise InvalidArgument("bbox minimum must be below its maximum", code="invalid_bbox")
    return min_lat, min_lng, max_lat, max_lng


def _area(area_id: str, geometry: Any, bbox: Any) -> _Area:
    import shapely
    from pyproj import Geod
    from shapely.geometry import MultiPolygon, Polygon, box, mapping

    if (geometry is None) == (bbox is None):
        raise InvalidArgument(
            f"area {area_id!r}: give exactly one of geometry or bbox", code="invalid_geometry"
        )
    if geometry is not None:
        polys = _rings(geometry)
        try:
            parts = [Polygon(p[0], p[1:]) for p in polys]
            geom = parts[0] if len(parts) == 1 else MultiPolygon(parts)
        except (ValueError, TypeError, shapely.errors.ShapelyError) as exc:
            raise InvalidArgument(f"malformed geometry: {exc}", code="invalid_geometry") from exc
        if geom.is_empty or not geom.is_valid:
            reason = shapely.is_valid_reason(geom) if not geom.is_empty else "empty"
            raise InvalidArgument(f"invalid polygon: {reason}", code="invalid_geometry")
    else:
        min_lat, min_lng, max_lat, max_lng = _bbox(bbox)
        geom = box(min_lng, min_lat, max_lng, max_lat)
    km2 = abs(Geod(ellps="WGS84").geometry_area_perimeter(geom)[0]) * _GEOD_KM2
    if km2 > MAX_AREA_KM2:
        raise InvalidArgument(
            f"area {area_id!r} is {km2:.1f} km^2; the cap is {MAX_AREA_KM2} km^2 per area",
            code="area_too_large",
            details={"area_km2": km2, "max_km2": MAX_AREA_KM2},
        )
    min_lng, min_lat, max_lng, max_lat = geom.bounds
    y0, y1, x0, x1 = address.bbox_q_range(min_lat, min_lng, max_lat, max_lng)
    if (y1 - y0) * (x1 - x0) > MAX_BOX_CELLS:
        raise InvalidArgument(
            f"area {area_id!r} spans {(y1 - y0) * (x1 - x0)} lattice cells in its bounding box "
            f"(cap {MAX_BOX_CELLS})",
            code="area_too_large",
        )
    lat_q = np.arange(y0, y1, dtype=np.int64)
    lng_q = np.arange(x0, x1, dtype=np.int64)
    lat, lng = address.q_center(lat_q, lng_q)
    if bbox is not None:
        inside = np.ones((lat_q.size, lng_q.size), bool)
    else:
        inside = shapely.contains_xy(geom, lng[None, :], lat[:, None])
    weights = np.where(inside, np.cos(np.radians(np.asarray(lat)))[:, None], 0.0)
    digest = blake3.blake3(canonical_cbor(_plain(mapping(geom)))).hexdigest()[:32]
    return _Area(area_id, geom, digest, float(km2), (y0, y1, x0, x1), inside, weights)


def _plain(x: Any) -> Any:
    if isinstance(x, dict):
        return {str(k): _plain(v) for k, v in x.items()}
    if isinstance(x, list | tuple):
        return [_plain(v) for v in x]
    return x


def _date(text: Any, name: str) -> dt.date:
    if not isinstance(text, str):
        raise InvalidArgument(f"{name} must be YYYY-MM-DD", code="invalid_date")
    try:
        d = dt.date.fromisoformat(text.strip())
    except ValueError:
        raise InvalidArgument(
            f"{name} {text[:40]!r} is not a valid YYYY-MM-DD date", code="invalid_date"
        ) from None
    if d < dt.date(1970, 1, 1) or d > dt.date(2149, 6, 1):
        raise InvalidArgument(f"{name} {d} outside 1970..2149", code="invalid_date")
    return d


# --------------------------------------------------------------------------- reading


def _read(
    ctx: ServiceContext,
    reader: CubeReader,
    band: str,
    box: tuple[int, int, int, int],
    slots: list[int],
) -> npt.NDArray[Any]:
    """Values ``(len(slots), h, w)`` of a band over a lattice box (fill where absent)."""
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
    want = np.asarray(slots, np.int64)
    for cy in cys:
        for cx in cxs:
            col = ctx.column(reader, band, cy * side, cx * side)
            if col.tslots.size == 0:
                continue
            idx = np.searchsorted(col.tslots, want)
            idx_c = np.minimum(idx, col.tslots.size - 1)
            hit = col.tslots[idx_c] == want
            if not hit.any():
                continue
            ya, yb = max(y0, cy * side), min(y1, (cy + 1) * side)
            xa, xb = max(x0, cx * side), min(x1, (cx + 1) * side)
            block = col.values[idx_c[hit]][
                :, ya - col.lat_q0 : yb - col.lat_q0, xa - col.lng_q0 : xb - col.lng_q0
            ]
            out[np.flatnonzero(hit), ya - y0 : yb - y0, xa - x0 : xb - x0] = block
    return out


def _clear_fractions(
    ctx: ServiceContext, reader: CubeReader, band: str, area: _Area, slots: list[int]
) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.bool_]]:
    flag_band, clear_value = clear_info(band)
    flags = _read(ctx, reader, flag_band, area.box, slots)
    ok = (flags == clear_value) & area.inside[None]
    n_total = max(1, int(area.inside.sum()))
    return ok.reshape(len(slots), -1).sum(axis=1) / n_total, ok


def _scene_stats(
    values: npt.NDArray[Any], ok: npt.NDArray[np.bool_], area: _Area
) -> dict[str, Any] | None:
    v = values.astype(np.float64)
    valid = ok & np.isfinite(v)
    if not valid.any():
        return None
    stats = weighted_stats(v[valid], area.weights[valid])
    n_total = int(area.inside.sum())
    n_clear = int(valid.sum())
    stats.update(
        {"n_clear": n_clear, "n_total": n_total, "clear_fraction": n_clear / max(1, n_total)}
    )
    return stats


def _doy_distance(a: int, b: int) -> int:
    da = (dt.date(1970, 1, 1) + dt.timedelta(days=a)).timetuple().tm_yday
    db = (dt.date(1970, 1, 1) + dt.timedelta(days=b)).timetuple().tm_yday
    d = abs(da - db)
    return min(d, 365 - d)


def _series(
    ctx: ServiceContext,
    reader: CubeReader,
    band: str,
    area: _Area,
    t0: int,
    t1: int,
    max_scenes: int,
    threshold: float,
) -> tuple[dict[str, Any], list[dict[str, Any]], ChartSeries]:
    family = BAND_FAMILY[band]
    cand = ctx.overpasses(family, area.box, t0, t1)
    sources = dict(cand)
    slots = [t for t, _ in cand]
    if len(slots) > MAX_CANDIDATES:
        slots = pick_even(slots, MAX_CANDIDATES)
    excluded = []
    above: list[int] = []
    if area.inside.any() and slots:
        fractions, _ = _clear_fractions(ctx, reader, band, area, slots)
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
        _, oks = _clear_fractions(ctx, reader, band, area, kept)
        for i, t in enumerate(kept):
            st = _scene_stats(values[i], oks[i], area)
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
        "n_cells": int(area.inside.sum()),
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
    area: _Area,
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
    year_start = (
        dt.date((dt.date(1970, 1, 1) + dt.timedelta(days=t_latest)).year, 1, 1)
        - dt.date(1970, 1, 1)
    ).days
    base = {**empty, "latest_tslot": t_latest, "latest_median": latest["median"]}
    cand = [
        t
        for t, _ in ctx.overpasses(BAND_FAMILY[band], area.box, None, year_start - 1)
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
    for j, i in enumerate(use):
        st = _scene_stats(values[j], oks[i], area)
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
    from scipy.stats import theilslopes

    x = np.array([s["tslot"] for s in scenes], dtype=np.float64) / 365.25
    y = np.array([s["median"] for s in scenes], dtype=np.float64)
    res = theilslopes(y, x)
    s, p = mann_kendall(y)
    return {
        "slope_per_year": float(res[0]),
        "intercept": float(res[1]),
        "mann_kendall_p": p,
        "mann_kendall_s": s,
        "n": n,
        "reason": None,
    }


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
    if index not in INDEX_BANDS:
        raise InvalidArgument(
            f"unknown index {args.index!r}; valid: {', '.join(INDEX_BANDS)}", code="unknown_index"
        )
    band = INDEX_BANDS[index]
    if isinstance(args.max_scenes, bool) or not 3 <= args.max_scenes <= 24:
        raise InvalidArgument(
            f"max_scenes must be in 3..24, got {args.max_scenes}", code="invalid_max_scenes"
        )
    if not 0.0 <= args.clear_fraction <= 1.0:
        raise InvalidArgument("clear_fraction must be in [0, 1]", code="invalid_argument")
    start, end = _date(args.start_date, "start_date"), _date(args.end_date, "end_date")
    if start > end:
        raise InvalidArgument(f"start_date {start} is after end_date {end}", code="reversed_dates")
    areas = [_area(i, g, b) for i, g, b in specs]
    t0 = (start - dt.date(1970, 1, 1)).days
    t1 = (end - dt.date(1970, 1, 1)).days
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
