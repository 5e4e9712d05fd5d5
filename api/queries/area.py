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
import os
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import blake3
import numpy as np
import numpy.typing as npt
from numba import njit

from api.charts import ChartSeries, render_area_chart
from api.context import BAND_FAMILY, ServiceContext
from api.errors import InvalidArgument
from api.models import AreaOverTimeAnswer, AreaOverTimeBody, AreaOverTimeIn
from api.queries._common import INDEX_BANDS, clear_info, finish, make_fact, slot_date, store_errors
from api.registry import primitive
from store import address
from store.cube import CubeReader
from store.facts import canonical_cbor

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
    "theil_sen",
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


_QUANTILES = (0.10, 0.25, 0.50, 0.75, 0.90)
_PW_BLOCK = 128  # numpy's pairwise-summation block (PW_BLOCKSIZE)
_PW_STACK = 256  # explicit recursion stack: 3 entries per level, ~log2(n / 128) levels


@njit(cache=True, nogil=True)
def _pairwise_leaf(a: Any, lo: int, n: int) -> float:  # pragma: no cover - numba
    if n < 8:
        res = 0.0
        for i in range(lo, lo + n):
            res += a[i]
        return res
    r0, r1, r2, r3 = a[lo], a[lo + 1], a[lo + 2], a[lo + 3]
    r4, r5, r6, r7 = a[lo + 4], a[lo + 5], a[lo + 6], a[lo + 7]
    i = 8
    m = n - n % 8
    while i < m:
        b = lo + i
        r0 += a[b]
        r1 += a[b + 1]
        r2 += a[b + 2]
        r3 += a[b + 3]
        r4 += a[b + 4]
        r5 += a[b + 5]
        r6 += a[b + 6]
        r7 += a[b + 7]
        i += 8
    res = ((r0 + r1) + (r2 + r3)) + ((r4 + r5) + (r6 + r7))
    while i < n:
        res += a[lo + i]
        i += 1
    return res


@njit(cache=True, nogil=True)
def _pairwise(a: Any, n: int) -> float:  # pragma: no cover - numba
    """``a[:n].sum()`` exactly as numpy sums a contiguous float64 array.

    numpy's add.reduce sums by pairwise recursion (halves rounded down to
    multiples of 8) down to blocks of at most 128 summed with 8 accumulators;
    doing the same additions in the same order gives the same bits. The
    recursion runs on an explicit stack (numba cannot cache recursive functions).
    """
    if n <= _PW_BLOCK:
        return _pairwise_leaf(a, 0, n)
    los = np.empty(_PW_STACK, np.int64)
    ns = np.empty(_PW_STACK, np.int64)
    done = np.zeros(_PW_STACK, np.bool_)
    vals = np.empty(_PW_STACK, np.float64)
    top, nv = 1, 0
    los[0], ns[0], done[0] = 0, n, False
    while top > 0:
        top -= 1
        lo, m = los[top], ns[top]
        if m <= _PW_BLOCK:
            vals[nv] = _pairwise_leaf(a, lo, m)
            nv += 1
        elif done[top]:
            nv -= 1
            vals[nv - 1] = vals[nv - 1] + vals[nv]
        else:
            m2 = m // 2
            m2 -= m2 % 8
            done[top] = True  # combine after both halves
            los[top + 1], ns[top + 1], done[top + 1] = lo + m2, m - m2, False
            los[top + 2], ns[top + 2], done[top + 2] = lo, m2, False
            top += 3
    return vals[0]


@njit(cache=True, nogil=True)
def _scene_keys(bits: Any, ok: Any, keys: Any, counts: Any) -> None:  # pragma: no cover - numba
    """Sort keys of each scene's clear finite float32 values (see :func:`_sort_order`).

    ``bits`` (scenes, cells) is the uint32 view of the float32 values. Row ``s``
    of ``keys`` gets, for each cell ``i`` (row-major) that is ``ok`` and finite,
    the order-preserving image of its bits above ``i``; ``counts[s]`` how many.
    Cells keep their row-major order among equal values, as in the compacted
    reference, so sorting a row gives the reference order.
    """
    for s in range(bits.shape[0]):
        n = 0
        for i in range(bits.shape[1]):
            b = bits[s, i]
            if ok[s, i] and (b & np.uint32(0x7F800000)) != np.uint32(0x7F800000):
                o = ~b if b >> np.uint32(31) else b | np.uint32(0x80000000)
                keys[s, n] = (np.uint64(o) << np.uint64(32)) | np.uint64(i)
                n += 1
        counts[s] = n


@njit(cache=True, nogil=True)
def _keyed_stats(
    values: Any, weights: Any, keys: Any, counts: Any, xs: Any, ws: Any, t: Any, res: Any
) -> None:  # pragma: no cover - numba
    """:func:`_stats_core` of each scene's values taken in the order of its sorted keys."""
    mask = np.uint64(0xFFFFFFFF)
    for s in range(values.shape[0]):
        n = counts[s]
        if n == 0:
            continue
        for j in range(n):
            k = np.intp(keys[s, j] & mask)
            xs[j] = np.float64(values[s, k])
            ws[j] = weights[k]
        _stats_core(xs, ws, t, n, res[s])


@njit(cache=True, nogil=True)
def _sorted_stats(
    x: Any, w: Any, order: Any, xs: Any, ws: Any, t: Any, out: Any
) -> None:  # pragma: no cover - numba
    """Weighted mean, std and quantiles of ``x`` taken in ``order`` (see :func:`weighted_stats`)."""
    n = order.size  # xs, ws, t: float64 scratch of at least n
    for i in range(n):
        k = order[i]
        xs[i] = np.float64(x[k])
        ws[i] = w[k]
    _stats_core(xs, ws, t, n, out)


@njit(cache=True, nogil=True)
def _stats_core(xs: Any, ws: Any, t: Any, n: int, out: Any) -> None:  # pragma: no cover - numba
    """Weighted mean, std and quantiles of sorted ``xs[:n]`` with weights ``ws[:n]``.

    Reproduces the numpy expression order of the reference exactly: pairwise
    sums of ``ws``, ``xs * ws`` and ``ws * (xs - mean) ** 2``; a running sum for
    the cumulative mid-point weights; ``np.interp``'s arithmetic.
    """
    total = _pairwise(ws, n)
    for i in range(n):
        t[i] = xs[i] * ws[i]
    mean = _pairwise(t, n) / total
    for i in range(n):
        d = xs[i] - mean
        t[i] = ws[i] * (d * d)
    var = _pairwise(t, n) / total
    out[0] = mean
    out[1] = np.sqrt(max(0.0, var))
    c = 0.0
    for i in range(n):
        c += ws[i]
        t[i] = (c - ws[i] / 2.0) / total
    for qi in range(5):
        out[2 + qi] = _interp(_QUANTILES[qi], t[:n], xs[:n])


@njit(cache=True, nogil=True)
def _interp(q: float, xp: Any, fp: Any) -> float:  # pragma: no cover - numba
    """``np.interp(q, xp, fp)`` for ascending ``xp`` (numpy's arithmetic, same bits)."""
    n = xp.size
    if n == 1:
        return fp[0]
    if q < xp[0]:
        return fp[0]
    if q > xp[n - 1]:
        return fp[n - 1]
    lo, hi = 0, n  # j = last index with xp[j] <= q
    while lo < hi:
        mid = lo + ((hi - lo) >> 1)
        if q >= xp[mid]:
            lo = mid + 1
        else:
            hi = mid
    j = lo - 1
    if j == n - 1 or xp[j] == q:
        return fp[j]
    slope = (fp[j + 1] - fp[j]) / (xp[j + 1] - xp[j])
    r = slope * (q - xp[j]) + fp[j]
    if np.isnan(r):
        r = slope * (q - xp[j + 1]) + fp[j + 1]
        if np.isnan(r) and fp[j] == fp[j + 1]:
            r = fp[j]
    return r


def _sort_order(x: npt.NDArray[Any]) -> npt.NDArray[np.intp]:
    """Ascending order of the values, equal values by position: the same on every machine.

    numpy's default sort is not stable and its tie order depends on the SIMD path
    of the machine (AVX2 vs AVX-512); the order of equal values moves the
    cumulative weights, hence the quantiles (by ~1e-9) and the fact ids bound to
    them. Values exact in float32 (cube values are) are sorted as one uint64 per
    value: the order-preserving uint32 image of the float32 bits above the
    position, so every key is unique and any sort algorithm gives one answer
    (numpy's SIMD sort of uint64: faster than an argsort). Other values use a
    stable argsort.
    """
    xv = np.asarray(x)
    keys = xv.astype(np.float32)
    if xv.size >= 1 << 32 or not np.array_equal(keys, xv):
        return np.argsort(xv.astype(np.float64, copy=False), kind="stable")
    bits = keys.view(np.uint32)
    ordered = np.where(bits >> np.uint32(31), ~bits, bits | np.uint32(1 << 31))
    packed = (ordered.astype(np.uint64) << np.uint64(32)) | np.arange(xv.size, dtype=np.uint64)
    packed.sort()
    return (packed & np.uint64(0xFFFFFFFF)).astype(np.intp)


def _stats_dict(out: npt.NDArray[np.float64]) -> dict[str, float]:
    return {
        "mean": float(out[0]),
        "std": float(out[1]),
        "p10": float(out[2]),
        "p25": float(out[3]),
        "median": float(out[4]),
        "p75": float(out[5]),
        "p90": float(out[6]),
    }


def weighted_stats(x: npt.NDArray[np.float64], w: npt.NDArray[np.float64]) -> dict[str, float]:
    """Weighted mean, std (population) and quantiles p10 p25 median p75 p90.

    ``mean = sum(w x) / sum(w)``; ``std = sqrt(sum(w (x - mean)^2) / sum(w))``;
    quantiles interpolate linearly over the sorted values at the cumulative
    mid-point weights ``(cumsum(w) - w / 2) / sum(w)`` (numpy's summation
    order throughout, in a compiled kernel).

    Args:
        x: Values (finite).
        w: Positive weights, same shape.
    """
    xv = np.ascontiguousarray(np.asarray(x).ravel())
    wv = np.ascontiguousarray(np.asarray(w, dtype=np.float64).ravel())
    out = np.empty(7, np.float64)
    scratch = np.empty((3, xv.size), np.float64)
    _sorted_stats(xv, wv, _sort_order(xv), scratch[0], scratch[1], scratch[2], out)
    return _stats_dict(out)


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


def theil_sen(y: npt.ArrayLike, x: npt.ArrayLike) -> tuple[float, float]:
    """Theil-Sen slope and intercept (``median(y) - slope * median(x)``).

    The same arithmetic as ``scipy.stats.theilslopes(y, x)`` (method
    ``separate``), without its confidence interval.

    Args:
        y: Values.
        x: Abscissae (not all equal), same length.
    """
    yv = np.asarray(y, dtype=np.float64).ravel()
    xv = np.asarray(x, dtype=np.float64).ravel()
    deltax = xv[:, None] - xv
    deltay = yv[:, None] - yv
    pos = deltax > 0
    slopes = deltay[pos] / deltax[pos]
    slopes.sort()
    slope = float(np.median(slopes))
    return slope, float(np.median(yv) - slope * np.median(xv))


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
    ctx: ServiceContext, reader: CubeReader, band: str, area: _Area, slots: list[int]
) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.bool_]]:
    flag_band, clear_value = clear_info(band)
    flags = _read(ctx, reader, flag_band, area.box, slots)
    ok = (flags == clear_value) & area.inside[None]
    n_total = max(1, int(area.inside.sum()))
    return np.count_nonzero(ok.reshape(len(slots), -1), axis=1) / n_total, ok


def _scenes_stats(
    values: npt.NDArray[Any], oks: npt.NDArray[np.bool_], area: _Area
) -> list[dict[str, Any] | None]:
    """:func:`weighted_stats` and clear counts of each scene's clear finite values (None: none).

    Float32 values (every index and backscatter band) take one pass per group of scenes: a kernel
    writes each scene's sort keys (:func:`_sort_order`'s, with the cell index
    for the position, which orders ties the same way), numpy sorts each row, a
    kernel reduces the values in key order. Other dtypes take the reference
    path. Scenes are split between the calling thread and a pool thread (the
    sort and the kernels release the GIL); the result does not depend on the split.
    """
    weights = np.ascontiguousarray(area.weights, dtype=np.float64).ravel()
    n_total = int(area.inside.sum())
    n_scenes = values.shape[0]
    res = np.empty((n_scenes, 7), np.float64)
    counts = np.zeros(n_scenes, np.int64)

    flat_values = np.ascontiguousarray(values.reshape(n_scenes, -1))
    flat_ok = np.ascontiguousarray(oks.reshape(n_scenes, -1))

    def work(lo: int, hi: int) -> None:
        if hi <= lo:
            return
        scratch = np.empty((3, weights.size), np.float64)
        if flat_values.dtype == np.float32:
            # keys of a group of scenes at a time: ~_KEY_BYTES whatever the area
            group = max(1, min(hi - lo, _KEY_BYTES // max(1, 8 * weights.size)))
            keys = np.empty((group, weights.size), np.uint64)
            for g0 in range(lo, hi, group):
                g1 = min(hi, g0 + group)
                kg = keys[: g1 - g0]
                _scene_keys(flat_values[g0:g1].view(np.uint32), flat_ok[g0:g1], kg, counts[g0:g1])
                for j in range(g1 - g0):
                    kg[j, : counts[g0 + j]].sort()
                _keyed_stats(
                    flat_values[g0:g1],
                    weights,
                    kg,
                    counts[g0:g1],
                    scratch[0],
                    scratch[1],
                    scratch[2],
                    res[g0:g1],
                )
            return
        for i in range(lo, hi):
            sel = flat_ok[i] & np.isfinite(flat_values[i])
            x, w = flat_values[i][sel], weights[sel]
            counts[i] = x.size
            if x.size:
                _sorted_stats(x, w, _sort_order(x), scratch[0], scratch[1], scratch[2], res[i])

    half = n_scenes // 2
    if n_scenes >= _THREADED_SCENES and (pool := _stats_pool()) is not None:
        other = pool.submit(work, half, n_scenes)
        work(0, half)
        other.result()
    else:
        work(0, n_scenes)
    out: list[dict[str, Any] | None] = []
    for i in range(n_scenes):
        n = int(counts[i])
        if n == 0:
            out.append(None)
            continue
        stats: dict[str, Any] = _stats_dict(res[i])
        stats.update({"n_clear": n, "n_total": n_total, "clear_fraction": n / max(1, n_total)})
        out.append(stats)
    return out


_THREADED_SCENES = 4  # scenes per call from which half go to a pool thread
_KEY_BYTES = 32 << 20  # sort keys held at once per thread (a group of scenes)
_POOL: list[ThreadPoolExecutor | None] = []
_POOL_LOCK = threading.Lock()


def _stats_pool() -> ThreadPoolExecutor | None:
    """One process-wide helper thread for scene statistics (None on a single core)."""
    with _POOL_LOCK:
        if not _POOL:
            cores = os.cpu_count() or 1
            _POOL.append(
                ThreadPoolExecutor(1, thread_name_prefix="earthmem-area") if cores > 1 else None
            )
        return _POOL[0]


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
        all_stats = _scenes_stats(values, oks[[row[t] for t in kept]], area)
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
    for i, st in zip(use, _scenes_stats(values, oks[use], area), strict=True):
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
