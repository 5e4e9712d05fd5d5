"""Ranking quality of one system on the recall set: recall@k, nDCG@k, hidden items shown.

Pure functions over ranked set keys and a query's graded relevance
(``{key: grade}``, grades 1..2; gain ``2^grade - 1``, log2 discount).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Mapping, Sequence
from typing import Any

__all__ = ["hidden_shown", "ndcg_at", "recall_at", "score_system", "summarise"]


def _top(ranked: Sequence[str], k: int) -> list[str]:
    """The first ``k`` distinct keys."""
    return list(dict.fromkeys(ranked))[:k]


def ndcg_at(ranked: Sequence[str], relevant: Mapping[str, int], k: int = 10) -> float:
    """Normalised discounted cumulative gain of the first ``k`` distinct keys."""
    top = _top(ranked, k)
    dcg = sum((2 ** relevant.get(key, 0) - 1) / math.log2(i + 2) for i, key in enumerate(top))
    ideal = sorted((g for g in relevant.values() if g > 0), reverse=True)[:k]
    idcg = sum((2**g - 1) / math.log2(i + 2) for i, g in enumerate(ideal))
    return dcg / idcg if idcg > 0 else 0.0


def recall_at(ranked: Sequence[str], relevant: Mapping[str, int], k: int = 10) -> float:
    """Share of the relevant keys (at most ``k``) found in the first ``k``."""
    rel = {key for key, g in relevant.items() if g > 0}
    if not rel:
        return 0.0
    return len(rel.intersection(_top(ranked, k))) / min(k, len(rel))


def hidden_shown(ranked: Sequence[str], hidden: Sequence[str], k: int = 10) -> int:
    """How many keys that must not be shown are in the first ``k``."""
    return len(set(hidden).intersection(_top(ranked, k)))


def score_system(
    queries: Sequence[Mapping[str, Any]],
    rank: Callable[[Mapping[str, Any]], Sequence[str]],
    k: int = 10,
) -> list[dict[str, Any]]:
    """Per-query metrics of one system (``rank`` returns set keys, best first)."""
    out = []
    for q in queries:
        ranked = list(rank(q))
        out.append(
            {
                "key": q["key"],
                "case": q["case"],
                "subtype": q["subtype"],
                "ndcg": ndcg_at(ranked, q["relevant"], k),
                "recall": recall_at(ranked, q["relevant"], k),
                "hidden_shown": hidden_shown(ranked, q["hidden"], k),
            }
        )
    return out


def summarise(
    per_query: Sequence[Mapping[str, Any]], cases: Sequence[str]
) -> dict[str, dict[str, float]]:
    """Mean nDCG, mean recall and total hidden items shown, overall and per case type."""
    groups: dict[str, list[Mapping[str, Any]]] = {"overall": list(per_query)}
    for c in cases:
        groups[c] = [r for r in per_query if r["case"] == c]
    return {
        name: {
            "queries": len(rows),
            "ndcg": statistics.fmean(r["ndcg"] for r in rows) if rows else float("nan"),
            "recall": statistics.fmean(r["recall"] for r in rows) if rows else float("nan"),
            "hidden_shown": sum(int(r["hidden_shown"]) for r in rows),
        }
        for name, rows in groups.items()
    }
