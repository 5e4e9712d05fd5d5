"""The recall engine: run the lanes, keep what the caller may see, fuse, filter, judge.

1. The lanes of :data:`LANES` run in order (``fts`` first: its top hits seed the
   lanes that expand from text hits).
2. The union of their candidates is read once as briefs (no item body decoded:
   :class:`~store.memory.model.ItemBrief`), and what the query may not see is
   dropped: the anchor item itself (the caller holds it), another kind or scope (``personal``: the caller's own items only), a
   confidence under ``minConfidence``, outside ``near``'s radius, written after
   ``asOf``, or a status not recalled. Under ``asOf`` an item's status is the one it
   had then (from the history), so an item superseded later shows as it was: active,
   its later successor hidden.
   Under ``near`` every visible candidate gets its distance score in the ``place`` lane,
   and under ``at`` its valid-time score in the ``time`` lane (whichever lane proposed
   it: those lanes' own candidates are capped).
3. Fusion of what is left. ``weighted`` (default): each lane's scores min-max
   normalised to [0, 1] over the visible candidates, with the lane's zero as the floor
   (every lane's raw score is higher-is-better and 0 means no evidence, so the weakest
   candidate a lane proposed still counts above one it did not), combined with
   :data:`WEIGHTS` and divided by the weight of the lanes that proposed anything, so
   the fused score is in [0, 1]. ``rrf``: ``sum 1 / (60 + rank)`` over the lanes.
   Ties: higher importance, then newer id.
4. After ranking, ``source`` and ``hasPrimarySource`` filter (survivors keep their order),
   and the whole items of the hits kept (at most ``limit``) are read, with their status
   as of ``asOf``.
5. ``weak_match``: nothing matched well — no hits; or the query has content words and
   the top hit covers under :data:`WEAK_COVERAGE` of them (by text) while no structural
   lane (``place``, ``graph`` from an anchor) vouches for it; or, under weighted fusion,
   the top fused score is under :data:`WEAK_FUSED`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from api.recall.core_lanes import (
    anchor_distance_m,
    fts_lane,
    place_lane,
    time_lane,
    valid_time_score,
)
from api.recall.geo import geo_lane
from api.recall.graph import graph_lane
from api.recall.lanes import Lane, LaneHits, RecallQuery
from api.recall.names import name_lane
from api.recall.parse import SCOPE_KINDS, RecallPlan
from api.recall.text import content_words, coverage, item_words
from api.recall.vector import vector_lane
from store.memory.model import ItemBrief, MemoryItem, changed

if TYPE_CHECKING:
    from api.context import ServiceContext
    from store.memory.interface import MemoryStore

__all__ = [
    "LANES",
    "PRIMARY_EVIDENCE",
    "RRF_K",
    "WEAK_COVERAGE",
    "WEAK_FUSED",
    "WEIGHTS",
    "Hit",
    "Recalled",
    "recall_items",
]

LANES: tuple[Lane, ...] = (
    fts_lane,
    vector_lane,
    place_lane,
    time_lane,
    graph_lane,
    name_lane,
    geo_lane,
)
"""The lanes recall runs, in order."""

WEIGHTS: Mapping[str, float] = {
    "fts": 1.0,
    "vector": 1.0,
    "name": 0.8,
    "place": 0.6,
    "time": 0.5,
    "graph": 0.5,
    "geo": 0.4,
}
"""Weighted fusion's lane weights (a lane not named here weighs 0.5)."""
RRF_K = 60
"""Reciprocal rank fusion's constant."""
WEAK_COVERAGE = 0.5
"""Top hit covering under this share of the query's content words (and no structural
lane behind it): a weak match."""
WEAK_FUSED = 0.2
"""Top weighted fused score under this: a weak match."""
PRIMARY_EVIDENCE = frozenset({"fact", "scene", "answer"})
"""Evidence kinds that are primary sources (a cube fact, a scene, a verified signed answer)."""
_SEEDS = 5
_PRIMARY_STEP = 50
"""Briefs whose whole items are read at a time while ``hasPrimarySource`` filters."""


@dataclass(frozen=True)
class Hit:
    """One ranked, visible item."""

    item: MemoryItem
    """As of ``asOf`` when given (its status then)."""
    fused: float
    components: Mapping[str, float]
    """Lane -> its normalised score (weighted) or its rank contribution (rrf)."""


@dataclass(frozen=True)
class Recalled:
    """What the engine found."""

    hits: tuple[Hit, ...]
    lanes: tuple[LaneHits, ...]
    visible: int
    """Visible candidates before the post-ranking filters and the limit."""
    weak_match: bool
    words: tuple[str, ...]
    notes: tuple[str, ...]
    contributed: tuple[str, ...] = ()
    """Lanes that proposed at least one visible candidate, in lane order."""


def _run_lanes(
    ctx: ServiceContext, store: MemoryStore, q: RecallQuery, lanes: Sequence[Lane]
) -> list[LaneHits]:
    out: list[LaneHits] = []
    for lane in lanes:
        hits = lane(ctx, store, q)
        out.append(hits)
        if hits.lane == "fts" and hits.ran:
            ranked = tuple(sorted(hits.scores, key=lambda i: -hits.scores[i]))
            q = dataclasses.replace(
                q, seed_ids=q.seed_ids or ranked[:_SEEDS], text_ids=ranked, text_briefs=hits.items
            )
    return out


def _visible(
    store: MemoryStore, plan: RecallPlan, ids: list[str], read: Mapping[str, ItemBrief]
) -> dict[str, ItemBrief]:
    q = plan.query
    fetched = {b.id: b for b in store.get_briefs(q.project, [i for i in ids if i not in read])}
    briefs = [b for i in ids if (b := read.get(i) or fetched.get(i)) is not None]
    if q.as_of is not None:
        states = store.states_as_of(q.project, [b.id for b in briefs], q.as_of)
        briefs = [
            changed(b, status=s.status, superseded_by=s.superseded_by)
            for b in briefs
            if (s := states.get(b.id)) is not None
        ]
    kinds = set(q.where.types)
    scope_kinds = {k for s in plan.scopes if s != "personal" for k in SCOPE_KINDS[s]}
    out: dict[str, ItemBrief] = {}
    for b in briefs:
        if b.id in q.anchor_ids:
            continue
        if b.status not in plan.statuses or (kinds and b.type not in kinds):
            continue
        sk = b.scope_kind or "project"
        personal = sk == "user" and "personal" in plan.scopes and b.actor == plan.actor
        if not (sk in scope_kinds or personal) or b.confidence < plan.min_confidence:
            continue
        if q.near is not None:
            d = anchor_distance_m(b.anchor, q.near.lat, q.near.lng)
            if d is None or d > q.near.radius_m:
                continue
        out[b.id] = b
    return out


def _whole(
    store: MemoryStore, project: str, ranked: Sequence[ItemBrief], limit: int, primary: bool
) -> list[MemoryItem]:
    """The whole items of the best ``limit`` briefs (with ``primary``: of those whose evidence
    holds a primary source), best first, each with its brief's status (as of ``asOf``)."""
    out: list[MemoryItem] = []
    step = limit if not primary else max(limit, _PRIMARY_STEP)
    for start in range(0, len(ranked), step):
        chunk = ranked[start : start + step]
        whole = {i.id: i for i in store.get_many(project, [b.id for b in chunk])}
        for b in chunk:
            item = whole.get(b.id)
            if item is None or (primary and not _primary(item)):
                continue
            if (item.status, item.superseded_by) != (b.status, b.superseded_by):  # as of asOf
                item = changed(item, status=b.status, superseded_by=b.superseded_by)
            out.append(item)
            if len(out) >= limit:
                return out
    return out


def _complete(
    results: list[LaneHits], visible: Mapping[str, ItemBrief], q: RecallQuery
) -> list[LaneHits]:
    """Give every visible candidate its score in the place lane (under ``near``: its distance)
    and in the time lane (under ``at``: its valid time's distance); those lanes' own
    candidates are capped, and both scores of every visible item are known."""
    near, at = q.near, q.at
    out = []
    for r in results:
        if r.ran and ((r.lane == "place" and near is not None) or (r.lane == "time" and at)):
            scores = dict(r.scores)
            for i, item in visible.items():
                if i in scores:
                    continue
                if r.lane == "place" and near is not None:
                    d = anchor_distance_m(item.anchor, near.lat, near.lng)
                    if d is not None:
                        scores[i] = 1.0 - d / near.radius_m
                elif at is not None and (s := valid_time_score(item, at)) is not None:
                    scores[i] = s
            r = dataclasses.replace(r, scores=scores)
        out.append(r)
    return out


def _fuse(
    results: Sequence[LaneHits], visible: Mapping[str, ItemBrief], fusion: str
) -> dict[str, dict[str, float]]:
    parts: dict[str, dict[str, float]] = {i: {} for i in visible}
    for lane in results:
        scores = {i: s for i, s in lane.scores.items() if i in visible}
        if not scores:
            continue
        if fusion == "rrf":
            ranked = sorted(scores, key=lambda i: (-scores[i], i))
            for rank, i in enumerate(ranked, 1):
                parts[i][lane.lane] = 1.0 / (RRF_K + rank)
            continue
        lo, hi = min(0.0, *scores.values()), max(scores.values())
        for i, s in scores.items():
            parts[i][lane.lane] = 0.0 if hi == lo else (s - lo) / (hi - lo)
    return parts


def _primary(item: MemoryItem) -> bool:
    return any(str(e.get("kind")) in PRIMARY_EVIDENCE for e in item.evidence)


def recall_items(
    ctx: ServiceContext, store: MemoryStore, plan: RecallPlan, lanes: Sequence[Lane] = LANES
) -> Recalled:
    """Run the lanes and rank what the caller may see (see the module doc)."""
    q = plan.query
    notes: list[str] = []
    results = _run_lanes(ctx, store, q, lanes)
    ids = list(dict.fromkeys(i for r in results for i in r.scores))
    read = {i: it for r in results for i, it in r.items.items()}
    visible = _visible(store, plan, ids, read)
    results = _complete(results, visible, q)
    fusion = plan.fusion
    parts = _fuse(results, visible, fusion)
    proposed = {r.lane for r in results if any(i in visible for i in r.scores)}
    total_w = sum(WEIGHTS.get(lane, 0.5) for lane in proposed) or 1.0

    def fused(i: str) -> float:
        if fusion == "rrf":
            return sum(parts[i].values())
        return sum(WEIGHTS.get(k, 0.5) * v for k, v in parts[i].items()) / total_w

    # best fused first, then higher importance, then newer id: stable sorts, the last key
    # first (ids descending)
    by_id = sorted(visible.values(), key=lambda it: it.id, reverse=True)
    ranked = sorted(by_id, key=lambda it: (-fused(it.id), -it.importance))
    if plan.sources:
        ranked = [b for b in ranked if b.asserted_by in plan.sources or b.actor in plan.sources]
    whole = _whole(store, q.project, ranked, plan.limit, plan.has_primary_source)
    hits = [Hit(it, round(fused(it.id), 6), parts[it.id]) for it in whole]
    words = content_words(q.text)
    weak = _weak(hits, words, fusion, bool(q.anchor_ids))
    if q.anchor_ids and not store.get_briefs(q.project, list(q.anchor_ids)):
        notes.append("anchor names no item of this project: the graph walk found nothing")
    contributed = tuple(r.lane for r in results if r.lane in proposed)
    return Recalled(
        tuple(hits), tuple(results), len(visible), weak, tuple(words), tuple(notes), contributed
    )


def _weak(hits: Sequence[Hit], words: list[str], fusion: str, anchored: bool) -> bool:
    if not hits:
        return True
    top = hits[0]
    structural = "place" in top.components or (anchored and "graph" in top.components)
    if words and coverage(words, item_words(top.item)) < WEAK_COVERAGE and not structural:
        return True
    return fusion == "weighted" and top.fused < WEAK_FUSED
