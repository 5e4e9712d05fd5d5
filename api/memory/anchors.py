"""Where a memory is: a place argument resolved to an :class:`~store.memory.model.Anchor`.

A cell or a lat/lng anchors to that cell; a bbox or polygon is checked with
area_over_time's caps (:func:`api.queries.area_geometry.parse_area`); a place name is
resolved with the gazetteer (where_is) and the resolution — match, confidence,
alternatives — is stored with the item, with the named feature's own geometry when
the place is a feature of the sample's manifest.
"""

from __future__ import annotations

import contextlib
from typing import Any

from shapely.geometry import mapping, shape

from api.context import ServiceContext
from api.errors import InvalidArgument, NotFound
from api.memory.models import PlaceIn
from api.queries._common import parse_cell_arg, store_errors
from api.queries.area_geometry import parse_area
from api.queries.locate import geocode
from store import address
from store.memory.model import Anchor

__all__ = ["NO_PLACE", "resolve_anchor"]

NO_PLACE = Anchor(kind="none", geometry=None, bbox=None)
"""The anchor of an item written without a place."""


def _point(lat: float, lng: float) -> dict[str, Any]:
    return {"type": "Point", "coordinates": [lng, lat]}


def _cell_anchor(cell_text: str) -> Anchor:
    geo = address.decode(parse_cell_arg(cell_text, "where.cell").raw)
    return Anchor(kind="cell", geometry=_point(geo.lat, geo.lng), bbox=geo.bounds, cell=geo.cell)


def _point_anchor(lat: float, lng: float) -> Anchor:
    """The anchor of a lat/lng: its cell (as :func:`_cell_anchor` of the cell's text, kind
    ``point``), decoded from the integer without formatting and parsing that text."""
    with store_errors():
        geo = address.decode(address.encode_int(lat, lng))
    return Anchor(kind="point", geometry=_point(geo.lat, geo.lng), bbox=geo.bounds, cell=geo.cell)


def _area_anchor(geometry: Any, bbox: Any) -> Anchor:
    with store_errors():
        area = parse_area("where", geometry, bbox)
    geom = area.geom
    min_lng, min_lat, max_lng, max_lat = geom.bounds
    centre = geom.representative_point()
    return Anchor(
        kind="polygon" if geometry is not None else "bbox",
        geometry=mapping(geom),
        bbox=(min_lat, min_lng, max_lat, max_lng),
        cell=address.encode(centre.y, centre.x),
    )


def _place_anchor(ctx: ServiceContext, name: str) -> Anchor:
    located = geocode(ctx, name, "place")
    if isinstance(located, str):
        raise NotFound(
            f"place {name!r} does not resolve: {located}"[:300],
            code="place_not_found",
            details={"place": name[:200]},
        )
    geometry: dict[str, Any] = _point(located.cell.lat, located.cell.lng)
    feature = located.feature
    if feature is not None and isinstance(feature.get("geometry"), dict):
        with contextlib.suppress(ValueError, TypeError, AttributeError, KeyError):
            geometry = mapping(shape(feature["geometry"]))
    if geometry["type"] == "Point" and located.place is not None and located.place.bbox:
        west, south, east, north = located.place.bbox
        bbox = (south, west, north, east)
    elif geometry["type"] == "Point":
        south, west, north, east = address.decode(located.cell.raw).bounds
        bbox = (south, west, north, east)
    else:
        min_lng, min_lat, max_lng, max_lat = shape(geometry).bounds
        bbox = (min_lat, min_lng, max_lat, max_lng)
    return Anchor(
        kind="place",
        geometry=geometry,
        bbox=bbox,
        cell=located.cell.cell,
        place=located.place.name if located.place is not None else name,
        resolution=located.out,
    )


def resolve_anchor(ctx: ServiceContext, where: PlaceIn | None) -> Anchor:
    """The anchor of a place argument (:data:`NO_PLACE` when there is none).

    Raises:
        InvalidArgument: ``invalid_place`` when not exactly one form is given,
            ``invalid_cell``, ``invalid_geometry`` and the area caps' codes.
        NotFound: ``place_not_found`` for a name the gazetteer does not resolve.
    """
    if where is None:
        return NO_PLACE
    given = [
        name
        for name, present in (
            ("cell", where.cell is not None),
            ("lat+lng", where.lat is not None or where.lng is not None),
            ("bbox", where.bbox is not None),
            ("geometry", where.geometry is not None),
            ("place", where.place is not None),
        )
        if present
    ]
    if len(given) != 1:
        raise InvalidArgument(
            "where takes exactly one of cell, lat+lng, bbox, geometry or place"
            + (f"; got {', '.join(given)}" if given else ""),
            code="invalid_place",
        )
    if where.cell is not None:
        return _cell_anchor(where.cell)
    if where.lat is not None or where.lng is not None:
        if where.lat is None or where.lng is None:
            raise InvalidArgument("where takes lat and lng together", code="invalid_place")
        return _point_anchor(where.lat, where.lng)
    if where.place is not None:
        return _place_anchor(ctx, where.place)
    return _area_anchor(where.geometry, where.bbox)
