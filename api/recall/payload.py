"""Recall's hits as the answer shows them: verbose or compact, within ``maxTokens``.

A verbose hit: ``{id, name, kind, snippet, fusedScore, components, verdict, fact_ids,
place, entities, item}`` (``item`` as memory_get shows it, with its status as of
``asOf``). A compact hit: ``{id, name, kind, snippet, fusedScore, entities}`` (the
id kept so the hit can be cited). ``entities``: the named place the item is anchored
at, when it has one. ``maxTokens``: a hit's size is its compact JSON's bytes / 4;
hits are dropped lowest-scored first until the total fits, the top hit always kept.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from api.memory.present import anchor_out, item_out
from api.recall.engine import Hit
from api.recall.text import snippet

__all__ = ["BYTES_PER_TOKEN", "fact_ids_of", "fit_tokens", "hit_out"]

BYTES_PER_TOKEN = 4
"""The token estimate: ~4 bytes of JSON per token."""


def fact_ids_of(hit: Hit) -> list[str]:
    """The fact ids a hit's verdict and evidence cite."""
    ids = [*hit.item.verdict_facts]
    ids += [str(e["fact_id"]) for e in hit.item.evidence if e.get("fact_id")]
    return list(dict.fromkeys(ids))


def hit_out(
    hit: Hit, words: Sequence[str], *, compact: bool, entities: Sequence[str] = ()
) -> dict[str, Any]:
    """One hit of the answer (``entities``: the ids of the entities the item links to, which
    memory_get / memory_neighbors / memory_relations take; the anchor's place name when none)."""
    item = hit.item
    out: dict[str, Any] = {
        "id": item.id,
        "name": item.title,
        "kind": item.type,
        "snippet": snippet(item, list(words)),
        "fusedScore": hit.fused,
        "entities": list(entities) or ([item.anchor.place] if item.anchor.place else []),
    }
    if compact:
        return out
    out.update(
        {
            "components": {k: round(v, 6) for k, v in sorted(hit.components.items())},
            "verdict": item.verdict or "unknown",
            "fact_ids": fact_ids_of(hit),
            "place": anchor_out(item.anchor),
            "item": item_out(item),
        }
    )
    return out


def _size(hit: dict[str, Any]) -> int:
    return (
        len(json.dumps(hit, separators=(",", ":"), ensure_ascii=False).encode()) // BYTES_PER_TOKEN
    )


def fit_tokens(
    hits: list[dict[str, Any]], max_tokens: int | None
) -> tuple[list[dict[str, Any]], int]:
    """The hits kept under ``max_tokens`` (best first) and how many were dropped."""
    if max_tokens is None or not hits:
        return hits, 0
    sizes = [_size(h) for h in hits]
    keep = len(hits)
    while keep > 1 and sum(sizes[:keep]) > max_tokens:
        keep -= 1
    return hits[:keep], len(hits) - keep
