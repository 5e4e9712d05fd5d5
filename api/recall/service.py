"""The ``recall`` primitive: search the caller's project memory, ranked, with a receipt.

The call is checked and resolved (:mod:`api.recall.parse`), the lanes run and their
scores are fused (:mod:`api.recall.engine`), and the hits are shaped
(:mod:`api.recall.payload`). The receipt names the memory state read (the project's
history head, read in the same read transaction as the lanes: one snapshot) as cube
answers name their snapshot; its
cells are the hits' anchor cells and its fact ids the facts the hits cite. Recall
never writes.
"""

from __future__ import annotations

import time
from typing import Any

from api.context import ServiceContext
from api.errors import from_store_error
from api.memory.auth import Caller
from api.memory.present import head_out, memory_state
from api.queries._common import finish
from api.recall.engine import LANES, recall_items
from api.recall.entities import links_of
from api.recall.models import (
    DEFAULT_LIMIT,
    MAX_LIMIT,
    MAX_RADIUS_M,
    RecallAnswer,
    RecallBody,
    RecallIn,
)
from api.recall.parse import plan_recall
from api.recall.payload import fact_ids_of, fit_tokens, hit_out
from api.registry import primitive
from store.errors import StoreError

__all__ = ["RECALL_DESCRIPTION", "recall"]

RECALL_DESCRIPTION = (
    "Search the project's long-term memory (typed, place-anchored items agents and people "
    "wrote) for what matches a question, a place and a time. CALL THIS before answering "
    "anything that depends on what was recorded about a place (observations, decisions, "
    "open questions). It is a SEED-FINDER: ground answers on each hit's text, evidence and "
    "verdict, and use memory_get for the authoritative item with its relations and history. "
    "fusedScore is a blended relevance score where rank ORDER is the signal, not magnitude "
    "([0, 1] under the default weighted fusion, a small reciprocal-rank value under rrf). "
    "Recall ALWAYS returns its best candidates even when nothing matches: weak_match: true "
    "(low, flat scores) means the subject is probably NOT in memory - a miss is cheap, a "
    "confident hallucination is not. near {place | cell | lat+lng, radius_m <= "
    f"{MAX_RADIUS_M:g} m}} keeps items anchored within the radius (a place name is resolved and "
    "reported); at = valid time, asOf = transaction time ('what did we know on X?': later "
    "writes, supersessions and deletions hidden), asOfEventUID = a history seq or item id. "
    "currentDate + rewriteQuery resolve 'two weeks ago', 'last month', 'in March'. Filters: "
    "kinds, scopes (project, personal, team), source and hasPrimarySource (after ranking), "
    f"minConfidence; limit default {DEFAULT_LIMIT}, at most {MAX_LIMIT}. compact and maxTokens "
    "shrink the payload; explain adds per-lane counts under _meta. Needs a token that may "
    "read; only the token's project is searched. Read-only."
)


@primitive(
    "recall",
    RecallIn,
    RecallAnswer,
    "Search long-term memory for items matching a query, a place and a time; ranked hits "
    "with citable ids, their verdicts and places, to ground an answer.",
    RECALL_DESCRIPTION,
    access="read",
)
def recall(ctx: ServiceContext, args: RecallIn, caller: Caller) -> RecallAnswer:
    """recall: hybrid (text, place, time, graph), bi-temporal recall over the memory."""
    t0 = time.perf_counter()
    store = ctx.memory()
    try:
        with store.reading():  # one snapshot: the head the receipt names is what the lanes read
            head = store.head(caller.project)
            plan = plan_recall(ctx, store, args, caller)
            found = recall_items(ctx, store, plan, LANES)
    except StoreError as exc:
        raise from_store_error(exc) from exc
    notes = [*plan.notes, *found.notes]
    hits = [
        hit_out(
            h,
            found.words,
            compact=args.compact,
            entities=[lk.entity_id for lk in links_of(ctx, h.item)],
        )
        for h in found.hits
    ]
    hits, dropped = fit_tokens(hits, args.maxTokens)
    if dropped:
        notes.append(f"maxTokens: {dropped} lower-ranked hit(s) dropped")
    vector = next((r for r in found.lanes if r.lane == "vector"), None)
    degraded = vector is None or not vector.ran
    if degraded:
        why = vector.note if vector is not None and vector.note else "no embedder configured"
        notes.append(f"no vector lane ({why}): semantic matching did not run")
    notes += [
        f"{r.lane}: {r.note}" for r in found.lanes if r.note and (r.ran or r.lane != "vector")
    ]
    body: dict[str, Any] = {
        "hits": hits,
        "lanes": list(found.contributed),
        "degraded": degraded,
        "fusion": plan.fusion,
        "weak_match": found.weak_match,
        "resolved": plan.resolved,
        "notes": notes,
        "head": head_out(head),
    }
    if args.explain:
        body["_meta"] = {
            "lanes": {
                r.lane: {
                    "ran": r.ran,
                    "candidates": r.candidates,
                    "proposed": len(r.scores),
                    "wall_ms": r.wall_ms,
                    "note": r.note,
                }
                for r in found.lanes
            },
            "visible_candidates": found.visible,
            "wall_ms": round((time.perf_counter() - t0) * 1000, 3),
        }
    kept = found.hits[: len(hits)]  # what maxTokens left, best first
    cells = [h.item.anchor.cell for h in kept if h.item.anchor.cell]
    facts = [f for h in kept for f in fact_ids_of(h)]
    # validated and dumped once (by alias: ``_meta``), signed, not validated again
    return finish(
        ctx, "recall", args, RecallBody, RecallAnswer, body, cells, memory_state(head), facts
    )
