"""The areas of area_over_time: input checks and the lattice cells of an area.

* An area is a GeoJSON Polygon/MultiPolygon (or a Feature holding one) or a
  bbox; coordinates are checked here (shape, closed rings, vertex cap) and by
  :func:`store.address.check_lat` / :func:`store.address.check_lng`, whose
  :mod:`store.errors` types the service boundary maps to the API's codes.
* Its size is the geodesic area on the WGS84 ellipsoid (capped).
* Its cells: cells whose centre lies inside the polygon
  (``shapely.contains_xy`` over the centres of the area's bounding lattice
  box), or inside the bbox; each weighs ``cos(latitude of its centre)``,
  proportional to its true area on the sphere (lattice cells span equal
  angles).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import blake3
import numpy as np
import numpy.typing as npt

from api.errors import InvalidArgument
from store import address
from store.facts import canonical_cbor

__all__ = [
    "MAX_AREA_KM2",
    "MAX_BOX_CELLS",
    "MAX_VERTICES",
    "Area",
    "parse_area",
]

MAX_VERTICES = 1000
"""Most vertices (all rings of a geometry together) per area."""
MAX_AREA_KM2 = 100.0
"""Largest area (km^2) per area."""
MAX_BOX_CELLS = 4_000_000
"""Most lattice cells in an area's bounding box (thin diagonal shapes)."""
_GEOD_KM2 = 1e-6


@dataclass(frozen=True, eq=False)
class Area:
    """One checked area and its cells on the lattice."""

    id: str
    """The caller's id of the area (``"area"`` for a lone geometry or bbox)."""
    geom: Any
    """The shapely polygon (a bbox becomes its box)."""
    digest: str
    """Digest of the canonical GeoJSON of ``geom`` (names the area in facts)."""
    km2: float
    """Geodesic area in km^2."""
    box: tuple[int, int, int, int]
    """Half-open lattice box ``(y0, y1, x0, x1)`` around the area."""
    inside: npt.NDArray[np.bool_]
    """``(h, w)`` cells of the box whose centre lies inside the area."""
    weights: npt.NDArray[np.float64]
    """``(h, w)`` cos(latitude) of the cells inside, zero outside."""
    n_cells: int
    """Cells inside the area."""


def _num(v: Any) -> float:
    if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(float(v)):
        raise InvalidArgument(
            f"coordinate {v!r} is not a finite number"[:200], code="invalid_geometry"
        )
    return float(v)


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
                lat, lng = _num(pos[1]), _num(pos[0])
                address.check_lat(lat)
                address.check_lng(lng)
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
    for lat, lng in ((min_lat, min_lng), (max_lat, max_lng)):
        address.check_lat(lat)
        address.check_lng(lng)
    if min_lat >= max_lat or min_lng >= max_lng:
        raise InvalidArgument("bbox minimum must be below its maximum", code="invalid_bbox")
    return min_lat, min_lng, max_lat, max_lng


def parse_area(area_id: str, geometry: Any, bbox: Any) -> Area:
    """The :class:`Area` of one geometry or bbox, checked and capped.

    Args:
        area_id: The caller's id of the area (used in messages).
        geometry: A GeoJSON Polygon/MultiPolygon (or a Feature holding one), or None.
        bbox: ``{min_lat, min_lng, max_lat, max_lng}`` or that 4-list, or None.

    Raises:
        InvalidArgument: not exactly one of geometry and bbox, a malformed or
            invalid shape, too many vertices, or an area over the caps.
        store.errors.InvalidLatitude / store.errors.InvalidLongitude: a
            coordinate off the globe (the caller maps store errors).
    """
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
    return Area(
        area_id,
        geom,
        digest,
        float(km2),
        (y0, y1, x0, x1),
        inside,
        weights,
        int(inside.sum()),
    )


def _plain(x: Any) -> Any:
    if isinstance(x, dict):
        return {str(k): _plain(v) for k, v in x.items()}
    if isinstance(x, list | tuple):
        return [_plain(v) for v in x]
    return x
