"""The graph lane: hops from the anchor over typed relations, and items sharing a place
with the top text hits.

From the ``anchor`` item, relations of every kind recall follows
(:data:`GRAPH_KINDS`, both directions) are walked breadth-first up to
``anchorDepth`` hops (one store read per hop); an item ``h`` hops away scores
``1 / h``. Items whose anchor box overlaps the box of one of the top text hits
(``seed_ids``: the same named feature or overlapping areas) score
:data:`SHARED_PLACE_SCORE`. Under ``asOf`` only relations written by then are walked.
"""

from __future__ import annotations

import dataclasses
import time
from typing import TYPE_CHECKING

from api.recall.lanes import LaneHits, RecallQuery
from store.memory.model import RELATION_KINDS, ItemBrief

if TYPE_CHECKING:
    from api.context import ServiceContext
    from store.memory.interface import MemoryStore

__all__ = ["GRAPH_KINDS", "SEEDS", "SHARED_PLACE_SCORE", "graph_lane"]

GRAPH_KINDS = RELATION_KINDS
"""supersedes, contradicts, derived_from, refines, depends_on, related."""
SHARED_PLACE_SCORE = 0.5
"""Score of an item sharing a place with a top text hit (one hop's worth is 1.0)."""
SEEDS = 3
"""Top text hits whose places are expanded."""
_PER_SEED = 20
_MAX_FRONTIER = 2000


def _walk(store: MemoryStore, q: RecallQuery) -> tuple[dict[str, float], int]:
    hops: dict[str, int] = {a: 0 for a in q.anchor_ids}
    frontier = list(q.anchor_ids)
    looked = 0
    for depth in range(1, q.anchor_depth + 1):
        if not frontier:
            break
        edges = store.relations_of(
            q.project, frontier[:_MAX_FRONTIER], GRAPH_KINDS, written_before=q.as_of
        )
        looked += len(edges)
        nxt: list[str] = []
        for e in edges:
            for other in (e.src_id, e.dst_id):
                if other not in hops:
                    hops[other] = depth
                    nxt.append(other)
        frontier = nxt
    return {i: 1.0 / h for i, h in hops.items() if h > 0}, looked


def _shared_places(
    store: MemoryStore, q: RecallQuery, read: dict[str, ItemBrief]
) -> tuple[dict[str, float], int]:
    scores: dict[str, float] = {}
    looked = 0
    wanted = list(q.seed_ids[:SEEDS])
    if all(i in q.text_briefs for i in wanted):
        briefs = [q.text_briefs[i] for i in wanted]
    else:
        briefs = store.get_briefs(q.project, wanted)
    seeds = [i for i in briefs if i.anchor.bbox]
    boxes = {s.anchor.bbox: {x.id for x in seeds if x.anchor.bbox == s.anchor.bbox} for s in seeds}
    for box, own in boxes.items():  # seeds at the same place: one read
        page = store.list_briefs(q.project, dataclasses.replace(q.where, bbox=box), limit=_PER_SEED)
        looked += len(page.items)
        for item in page.items:
            if own - {item.id}:  # another seed is at this place
                scores.setdefault(item.id, SHARED_PLACE_SCORE)
                read[item.id] = item
    return scores, looked


def graph_lane(ctx: ServiceContext, store: MemoryStore, q: RecallQuery) -> LaneHits:
    """Relation hops from the anchor, plus items sharing a place with the top text hits."""
    t0 = time.perf_counter()
    if q.no_graph:
        return LaneHits("graph", {}, 0, 0.0, ran=False, note="noGraph")
    if not q.anchor_ids and not q.seed_ids:
        return LaneHits("graph", {}, 0, 0.0, ran=False, note="no anchor and no text hits")
    walked, n1 = _walk(store, q) if q.anchor_ids else ({}, 0)
    read: dict[str, ItemBrief] = {}
    shared, n2 = _shared_places(store, q, read) if q.seed_ids else ({}, 0)
    scores = {**shared, **walked}  # a relation hop outranks a shared place
    for i, s in shared.items():
        scores[i] = max(scores[i], s)
    wall = round((time.perf_counter() - t0) * 1000, 3)
    return LaneHits("graph", scores, n1 + n2, wall, items=read)
