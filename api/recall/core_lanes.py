"""The database-backed lanes: full text, place and time.

* ``fts`` — the store's own full-text ranking (SQLite FTS5 bm25, PostgreSQL ts_rank)
  over title, statement, details and tags, for the query's content words
  (:func:`api.recall.text.content_words`; OR semantics, ranked by the database);
  it reads its hits' briefs, which the lanes expanding from text hits reuse.
* ``place`` — items whose anchor box lies within ``near.radius_m`` of the ``near``
  point (the R*Tree / GiST box pre-filter, then the exact distance to the box),
  scored ``1 - distance / radius``; without ``near``, the anchor item's own place
  (within :data:`ANCHOR_PLACE_RADIUS_M`) is the point, as a ranking signal only.
* ``time`` — items nearest ``at`` in valid time (covering it: distance 0), scored
  ``1 / (1 + days away)``.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import math
import time
from typing import TYPE_CHECKING

from api.recall.lanes import LaneHits, NearPoint, RecallQuery
from api.recall.text import content_words
from store.memory.model import Anchor, ItemBrief, MemoryItem

if TYPE_CHECKING:
    from api.context import ServiceContext
    from store.memory.interface import MemoryStore

__all__ = [
    "ANCHOR_PLACE_RADIUS_M",
    "anchor_distance_m",
    "box_around",
    "fts_lane",
    "place_lane",
    "time_lane",
    "valid_time_score",
]

ANCHOR_PLACE_RADIUS_M = 5_000.0
"""Radius around the anchor item's place when no ``near`` is given (ranking only)."""
_EARTH_M = 6_371_008.8
_DAY_US = 86_400_000_000


def _ms(t0: float) -> float:
    return round((time.perf_counter() - t0) * 1000, 3)


def anchor_distance_m(anchor: Anchor, lat: float, lng: float) -> float | None:
    """Great-circle metres from a point to the nearest point of an anchor's box (0 inside);
    None for an item without a place."""
    if anchor.bbox is None:
        return None
    s, w, n, e = anchor.bbox
    plat, plng = min(max(lat, s), n), min(max(lng, w), e)
    p1, p2 = math.radians(lat), math.radians(plat)
    dlat, dlng = p2 - p1, math.radians(plng - lng)
    a = math.sin(dlat / 2) ** 2 + math.cos(p1) * math.cos(p2) * math.sin(dlng / 2) ** 2
    return 2 * _EARTH_M * math.asin(min(1.0, math.sqrt(a)))


def box_around(lat: float, lng: float, radius_m: float) -> tuple[float, float, float, float]:
    """A ``(min_lat, min_lng, max_lat, max_lng)`` box holding the circle (clamped at the poles
    and the antimeridian: a superset, checked exactly after)."""
    dlat = math.degrees(radius_m / _EARTH_M)
    coslat = math.cos(math.radians(lat))
    dlng = 180.0 if coslat < 1e-6 else min(180.0, dlat / coslat)
    s, n = max(-90.0, lat - dlat), min(90.0, lat + dlat)
    w, e = lng - dlng, lng + dlng
    if w < -180.0 or e > 180.0:
        w, e = -180.0, 180.0
    return (s, w, n, e)


def fts_lane(ctx: ServiceContext, store: MemoryStore, q: RecallQuery) -> LaneHits:
    """Full-text ranking of the query's content words (higher is better)."""
    t0 = time.perf_counter()
    words = content_words(q.text)
    if not words:
        return LaneHits("fts", {}, 0, _ms(t0), ran=True, note="no content words to search")
    hits = store.search_text(q.project, " ".join(words), limit=q.candidates, where=q.where)
    briefs = {b.id: b for b in store.get_briefs(q.project, [i for i, _ in hits])}
    return LaneHits("fts", dict(hits), len(hits), _ms(t0), items=briefs)


def _place_point(store: MemoryStore, q: RecallQuery) -> NearPoint | None:
    if q.near is not None:
        return q.near
    for item in store.get_briefs(q.project, list(q.anchor_ids[:1])):
        if item.anchor.bbox is not None:
            s, w, n, e = item.anchor.bbox
            return NearPoint((s + n) / 2, (w + e) / 2, ANCHOR_PLACE_RADIUS_M)
    return None


def place_lane(ctx: ServiceContext, store: MemoryStore, q: RecallQuery) -> LaneHits:
    """Items within the radius of the ``near`` point (or the anchor's place), nearer higher."""
    t0 = time.perf_counter()
    point = _place_point(store, q)
    if point is None:
        return LaneHits("place", {}, 0, _ms(t0), ran=False, note="no near point or anchor place")
    where = dataclasses.replace(q.where, bbox=box_around(point.lat, point.lng, point.radius_m))
    page = store.list_briefs(q.project, where, limit=q.candidates)
    scores: dict[str, float] = {}
    read = {}
    for item in page.items:
        d = anchor_distance_m(item.anchor, point.lat, point.lng)
        if d is not None and d <= point.radius_m:
            scores[item.id] = 1.0 - d / point.radius_m if point.radius_m > 0 else 1.0
            read[item.id] = item
    note = "candidates capped: more items lie in the box" if page.next_cursor else None
    return LaneHits("place", scores, len(page.items), _ms(t0), note=note, items=read)


def valid_time_score(item: MemoryItem | ItemBrief, at: dt.datetime) -> float | None:
    """The time lane's score of an item: ``1 / (1 + days)`` between its valid time and ``at``
    (0 days when it covers ``at``; an open end is unbounded); None without a valid time."""
    start, end = item.valid_from, item.valid_to
    if start is None and end is None:
        return None
    gap = dt.timedelta(0)
    if start is not None and start > at:
        gap += start - at
    if end is not None and end < at:
        gap += at - end
    return 1.0 / (1.0 + gap / dt.timedelta(days=1))


def time_lane(ctx: ServiceContext, store: MemoryStore, q: RecallQuery) -> LaneHits:
    """Items nearest ``at`` in valid time (those covering it first)."""
    t0 = time.perf_counter()
    if q.at is None:
        return LaneHits("time", {}, 0, _ms(t0), ran=False, note="no at")
    where = dataclasses.replace(q.where, valid_at=None)
    hits = store.nearest_valid(q.project, q.at, limit=q.candidates, where=where)
    scores = {i: 1.0 / (1.0 + d / _DAY_US) for i, d in hits}
    return LaneHits("time", scores, len(hits), _ms(t0))
