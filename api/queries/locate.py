"""Locating a question's place: gazetteer lookups, "<kind> near <place>", pinned cells.

A location is a :class:`Located`: the cell to read, its ``LocationOut`` dict, and
the gazetteer place and manifest feature when the text named one.

"X near Y": when the located place is not itself a named feature and the text
holds a feature-kind word ("forest", "lake", ...), the manifest feature of that
kind nearest to the located point (within :data:`NEAR_KM`) is used instead, so
"the forest near Kanke" is the sample's forest, not the town's centre. When the
gazetteer finds nothing, a named feature sharing a distinctive word with the
text is used (a partial match, low confidence).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Literal

from api.context import ServiceContext
from api.errors import InvalidArgument
from api.places import GazetteerResult, Place, normalise_name
from api.queries._common import CellRef
from store import address
from store.errors import StoreError

__all__ = [
    "NEAR_KM",
    "Located",
    "alternatives_out",
    "confidence_out",
    "geocode",
    "latlng_cell",
    "manifest_features",
    "pinned",
    "place_out",
    "where_text",
]

NEAR_KM = 25.0
""""<kind> near <place>" picks the nearest feature of that kind within this distance."""

_KIND_WORDS: dict[str, str] = {
    **dict.fromkeys(("forest", "forests", "wood", "woods", "woodland", "jungle"), "forest"),
    **dict.fromkeys(("lake", "reservoir", "pond"), "lake"),
    **dict.fromkeys(("river", "stream"), "river"),
    **dict.fromkeys(("town", "bazar", "bazaar", "market"), "town"),
    **dict.fromkeys(("field", "fields", "farm", "farmland"), "farmland"),
}


def place_out(p: Place) -> dict[str, Any]:
    """A gazetteer place as the answer's place object."""
    return {
        "name": p.name,
        "kind": p.kind,
        "source": p.source,
        "country": p.country,
        "admin1": p.admin1,
        "admin1_name": p.admin1_name,
        "population": p.population,
        "lat": p.lat,
        "lng": p.lng,
        "bbox": list(p.bbox) if p.bbox else None,
        "id": p.id,
    }


def alternatives_out(res: GazetteerResult) -> list[dict[str, Any]]:
    """The alternatives of a gazetteer result as answer objects."""
    return [
        {
            "cell64": address.encode(a.lat, a.lng),
            "name": a.name,
            "country": a.country,
            "population": a.population,
            "kind": a.kind,
            "source": a.source,
        }
        for a in res.alternatives
    ]


def confidence_out(res: GazetteerResult, note: str | None = None) -> dict[str, Any]:
    """The confidence object of a gazetteer result (with an optional note)."""
    reason = res.reason + (f"; {note}" if note else "")
    return {"is_high_confidence": res.is_high_confidence, "reason": reason, "match": res.match}


def _km(lat1: float, lng1: float, lat2: float, lng2: float) -> float:
    p1, p2 = math.radians(lat1), math.radians(lat2)
    h = (
        math.sin((p2 - p1) / 2) ** 2
        + math.cos(p1) * math.cos(p2) * math.sin(math.radians(lng2 - lng1) / 2) ** 2
    )
    return 2 * 6371.0088 * math.asin(min(1.0, math.sqrt(h)))


def manifest_features(ctx: ServiceContext) -> list[dict[str, Any]]:
    """The named features of the context's place manifest."""
    return [f for f in ctx.manifest().get("features") or () if isinstance(f, dict)]


def _feature_of(ctx: ServiceContext, place: Place | None) -> dict[str, Any] | None:
    """The manifest feature a sample place came from (with its geometry)."""
    if place is None or place.source != "sample":
        return None
    for f in manifest_features(ctx):
        if place.id in (f"sample:{f.get('id')}", f"sample:{f.get('name')}"):
            return f
    return None


@dataclass(frozen=True)
class Located:
    """A resolved location."""

    cell: CellRef
    """The cell read."""
    out: dict[str, Any]
    """Its :class:`LocationOut` dict."""
    place: Place | None
    """The gazetteer place, if geocoded."""
    feature: dict[str, Any] | None
    """The manifest feature (with geometry), when the place is one."""


def _near_feature(ctx: ServiceContext, text: str, best: Place) -> tuple[Place, str] | None:
    """Read "<kind> near <place>": the nearest manifest feature of that kind, if close."""
    if best.source == "sample":
        return None
    kinds = {_KIND_WORDS[t] for t in normalise_name(text).split(" ") if t in _KIND_WORDS}
    if not kinds:
        return None
    found: list[tuple[float, dict[str, Any]]] = []
    for f in manifest_features(ctx):
        centre = f.get("centre") or {}
        if f.get("kind") in kinds and "lat" in centre and "lng" in centre:
            d = _km(best.lat, best.lng, float(centre["lat"]), float(centre["lng"]))
            if d <= NEAR_KM:
                found.append((d, f))
    if not found:
        return None
    d, f = min(found, key=lambda x: (x[0], str(x[1].get("name"))))
    res = ctx.gazetteer().resolve(str(f["name"]))
    if res.best is None or res.best.source != "sample":
        return None
    note = (
        f"read as the {f.get('kind')} near {best.name}: the named {f.get('kind')} nearest to it "
        f"is {f['name']} ({d:.1f} km)"
    )
    return res.best, note


def _feature_token_match(ctx: ServiceContext, text: str) -> tuple[Place, str] | None:
    """A named feature sharing a distinctive word with the text ("the forest near Pithoria").

    Used only when the gazetteer finds nothing. Distinctive words of a feature
    name are those of at least 4 letters that are not kind words; a feature
    scores one per such word in the text, plus one when the text names its
    kind. The best score wins; a tie is ambiguous and finds nothing.
    """
    tokens = set(normalise_name(text).split(" "))
    kinds = {_KIND_WORDS[t] for t in tokens if t in _KIND_WORDS}
    scored: list[tuple[int, dict[str, Any], list[str]]] = []
    for f in manifest_features(ctx):
        words = [
            w
            for w in normalise_name(str(f.get("name") or "")).split(" ")
            if len(w) >= 4 and w not in _KIND_WORDS
        ]
        hits = sorted(set(words) & tokens)
        if hits:
            scored.append((len(hits) + (f.get("kind") in kinds), f, hits))
    if not scored:
        return None
    scored.sort(key=lambda x: -x[0])
    if len(scored) > 1 and scored[1][0] == scored[0][0]:
        return None
    _, f, hits = scored[0]
    res = ctx.gazetteer().resolve(str(f["name"]))
    if res.best is None or res.best.source != "sample":
        return None
    return res.best, f"partial match of the feature name on {', '.join(repr(h) for h in hits)}"


def geocode(
    ctx: ServiceContext, text: str, role: Literal["place", "description", "question"]
) -> Located | str:
    """Resolve text to a location, or return why not (gazetteer not_found)."""
    res = ctx.gazetteer().resolve(text)
    if res.best is None:
        # a qualifier that ruled everything out is not overridden by a word match
        fallback = _feature_token_match(ctx, text) if res.query and not res.qualifier else None
        if fallback is None:
            return res.reason
        place, why = fallback
        res = GazetteerResult(
            status="ok",
            best=place,
            alternatives=(),
            is_high_confidence=False,
            reason=why,
            match="partial",
            query=res.query,
        )
    place, note = res.best, None
    assert place is not None
    near = _near_feature(ctx, text, place)
    if near is not None:
        place, note = near
    cell = CellRef(address.encode_int(place.lat, place.lng))
    out = {
        "cell64": cell.cell,
        "lat": cell.lat,
        "lng": cell.lng,
        "resolved_from": role,
        "text": text,
        "place": place_out(place),
        "confidence": confidence_out(res, note),
        "alternatives": alternatives_out(res),
        "note": note,
    }
    return Located(cell, out, place, _feature_of(ctx, place))


def pinned(cell: CellRef, role: Literal["cell", "lat_lng"]) -> Located:
    """A location given by a cell or a lat/lng (no geocoding: high confidence)."""
    out = {
        "cell64": cell.cell,
        "lat": cell.lat,
        "lng": cell.lng,
        "resolved_from": role,
        "text": None,
        "place": None,
        "confidence": None,
        "alternatives": [],
        "note": None,
    }
    return Located(cell, out, None, None)


def latlng_cell(lat: float, lng: float) -> CellRef:
    """The cell of a latitude/longitude argument (typed error when out of range)."""
    try:
        return CellRef(address.encode_int(float(lat), float(lng)))
    except StoreError as exc:
        raise InvalidArgument(str(exc), code=str(exc.code)) from exc


def where_text(loc: dict[str, Any]) -> str:
    """A short description of a located place for sentences."""
    place = loc.get("place")
    if place:
        conf = loc["confidence"]
        how = "high confidence" if conf["is_high_confidence"] else "low confidence"
        return f"{place['name']} ({place['source']} {place['kind']}, {how}), cell {loc['cell64']}"
    return f"cell {loc['cell64']}"
