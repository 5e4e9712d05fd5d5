"""The areas of area_over_time: input checks and the lattice cells of an area.

* An area is a GeoJSON Polygon/MultiPolygon (or a Feature holding one) or a
  bbox; coordinates are checked here (shape, closed rings, vertex cap) and by
  :func:`store.address.check_lat` / :func:`store.address.check_lng`, whose
  :mod:`store.errors` types the service boundary maps to the API's codes.
* Its size is the geodesic area on the WGS84 ellipsoid (capped).
* Its cells: cells whose centre lies inside the polygon, or inside the bbox;
  each weighs ``cos(latitude of its centre)``, proportional to its true area on
  the sphere (lattice cells span equal angles). They are found tile by tile
  (:data:`_TILE` cells a side) over the tiles the geometry touches only: a tile
  inside the polygon is taken whole, a tile crossing its edge is tested with
  ``shapely.contains_xy`` and a tile it misses is skipped, so the work and the
  memory follow the cells inside, not the bounding box (a thin diagonal shape
  has a large box and few cells). Cells are kept as flat row-major arrays
  (``ys``, ``xs``, ``weights``), grouped by storage block on demand
  (:meth:`Area.blocks`) for the reads.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
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
    "BlockCells",
    "parse_area",
]

MAX_VERTICES = 1000
"""Most vertices (all rings of a geometry together) per area."""
MAX_AREA_KM2 = 100.0
"""Largest area (km^2) per area."""
MAX_BOX_CELLS = 4_000_000
"""Most lattice cells in an area's bounding box (thin diagonal shapes)."""
_GEOD_KM2 = 1e-6
_TILE = 128  # side (cells) of the tiles the inside test walks


@dataclass(frozen=True)
class BlockCells:
    """The cells of an area inside one storage block."""

    cy: int
    """Block row (``lat_q // side``)."""
    cx: int
    """Block column (``lng_q // side``)."""
    pos: npt.NDArray[np.int64]
    """Positions of these cells in the area's flat arrays."""
    ly: npt.NDArray[np.intp]
    """Rows of the cells within the block."""
    lx: npt.NDArray[np.intp]
    """Columns of the cells within the block."""
    rect: tuple[int, int, int, int] | None
    """``(y0, y1, x0, x1)`` within the block when the cells fill that rectangle (row-major)."""

    def take(self, plane: npt.NDArray[Any]) -> npt.NDArray[Any]:
        """The values of these cells in one ``(side, side)`` plane of the block, in order."""
        if self.rect is not None:
            y0, y1, x0, x1 = self.rect
            return plane[y0:y1, x0:x1].reshape(-1)
        return plane[self.ly, self.lx]


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
    ys: npt.NDArray[np.int64]
    """Rows (``lat_q``) of the cells inside, row-major order."""
    xs: npt.NDArray[np.int64]
    """Columns (``lng_q``) of the cells inside, same order."""
    weights: npt.NDArray[np.float64]
    """cos(latitude) of each cell inside, same order."""
    n_cells: int
    """Cells inside the area."""
    _blocks: dict[int, tuple[BlockCells, ...]] = field(
        default_factory=dict, compare=False, repr=False
    )

    def blocks(self, side: int) -> tuple[BlockCells, ...]:
        """The area's cells grouped by storage block of ``side`` cells (computed once per side)."""
        got = self._blocks.get(side)
        if got is None:
            got = self._blocks[side] = _group(self.ys, self.xs, side)
        return got

    def mask(self) -> npt.NDArray[np.bool_]:
        """``(h, w)`` cells of :attr:`box` inside the area (for checks on small areas)."""
        y0, _, x0, _ = self.box
        out = np.zeros((self.box[1] - y0, self.box[3] - x0), bool)
        out[self.ys - y0, self.xs - x0] = True
        return out


def _group(
    ys: npt.NDArray[np.int64], xs: npt.NDArray[np.int64], side: int
) -> tuple[BlockCells, ...]:
    if ys.size == 0:
        return ()
    cy, cx = ys // side, xs // side
    key = (cy - cy.min()) * (int(cx.max() - cx.min()) + 1) + (cx - cx.min())
    order = np.argsort(key, kind="stable")
    starts = np.flatnonzero(np.r_[True, np.diff(key[order]) != 0])
    ends = np.r_[starts[1:], order.size]
    out = []
    for a, b in zip(starts.tolist(), ends.tolist(), strict=True):
        pos = order[a:b].astype(np.int64)
        by, bx = int(cy[pos[0]]), int(cx[pos[0]])
        ly, lx = (ys[pos] - by * side).astype(np.intp), (xs[pos] - bx * side).astype(np.intp)
        y0, y1, x0, x1 = int(ly[0]), int(ly[-1]) + 1, int(lx.min()), int(lx.max()) + 1
        full = pos.size == (y1 - y0) * (x1 - x0)  # distinct cells filling their extent
        out.append(BlockCells(by, bx, pos, ly, lx, (y0, y1, x0, x1) if full else None))
    return tuple(out)


def _cells_inside(
    geom: Any, box: tuple[int, int, int, int], whole: bool
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    """Rows and columns (row-major) of the box's cells whose centre is in ``geom``.

    Walks :data:`_TILE`-sided tiles of the box: tiles the geometry misses are
    skipped, tiles it contains are taken whole, the others tested cell by cell.
    ``whole``: every cell of the box is inside (a bbox area).
    """
    import shapely
    from shapely.geometry import box as rect

    y0, y1, x0, x1 = box
    if whole:  # every cell of the box, row-major (what the tile walk gives, without it)
        rows = np.arange(y0, y1, dtype=np.int64)
        cols = np.arange(x0, x1, dtype=np.int64)
        return np.repeat(rows, cols.size), np.tile(cols, rows.size)
    shapely.prepare(geom)
    ys_parts: list[npt.NDArray[np.int64]] = []
    xs_parts: list[npt.NDArray[np.int64]] = []
    for ty in range(y0, y1, _TILE):
        rows = np.arange(ty, min(y1, ty + _TILE), dtype=np.int64)
        row_parts: list[tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]] = []
        for tx in range(x0, x1, _TILE):
            cols = np.arange(tx, min(x1, tx + _TILE), dtype=np.int64)
            lat, lng = address.q_center(rows, cols)
            # the tile's cells' extent: missing it misses every centre; holding it
            # properly (no boundary contact) holds every centre
            hy, hx = address.LAT_STEP / 2, address.LNG_STEP / 2
            cell = rect(
                float(lng[0]) - hx, float(lat[0]) - hy, float(lng[-1]) + hx, float(lat[-1]) + hy
            )
            if not geom.intersects(cell):
                continue
            if shapely.contains_properly(geom, cell):
                inside = np.ones((rows.size, cols.size), bool)
            else:
                inside = shapely.contains_xy(geom, lng[None, :], lat[:, None])
            r, c = np.nonzero(inside)
            if r.size:
                row_parts.append((rows[r], cols[c]))
        if row_parts:  # row-major across the tiles of this band of rows
            ys = np.concatenate([p[0] for p in row_parts])
            xs = np.concatenate([p[1] for p in row_parts])
            order = np.lexsort((xs, ys))
            ys_parts.append(ys[order])
            xs_parts.append(xs[order])
    if not ys_parts:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    return np.concatenate(ys_parts), np.concatenate(xs_parts)


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
    digest = blake3.blake3(canonical_cbor(_plain(mapping(geom)))).hexdigest()[:32]
    ys, xs = _cells_inside(geom, (y0, y1, x0, x1), whole=bbox is not None)
    lat, _ = address.q_center(ys, np.zeros_like(ys))
    weights = np.cos(np.radians(np.asarray(lat, dtype=np.float64)))
    return Area(area_id, geom, digest, float(km2), (y0, y1, x0, x1), ys, xs, weights, int(ys.size))


def _plain(x: Any) -> Any:
    if isinstance(x, dict):
        return {str(k): _plain(v) for k, v in x.items()}
    if isinstance(x, list | tuple):
        return [_plain(v) for v in x]
    return x
