"""The rankers the recall bench compares: fused recall, the store's fts lane, BM25 (bm25s).

* :func:`recall_missing` — why the ``recall`` primitive cannot be measured here
  (None when the dispatch room serves it).
* :func:`recall_body` / :func:`hit_ids` — a set query as recall's body (field
  names as recall.txt spells them; ``asOf: "@phase1"`` replaced by the load's
  instant) and the item ids of its ranked hits.
* :class:`Bm25Baseline` — BM25 (bm25s, Lucene variant, k1 1.5, b 0.75) over the
  text of every item written (title, statement, details, tags), superseded ones
  included, as a plain text index holds them; no place, time or status filter.
  Tokenisation (stated in the report): lower case, ``\\w\\w+`` words, bm25s's
  English stop words, no stemming (no stemmer is installed; the store's FTS5
  uses the porter stemmer).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = [
    "BM25_TOKENISATION",
    "EMBEDDER_ENV",
    "Bm25Baseline",
    "hit_ids",
    "recall_body",
    "recall_missing",
]

EMBEDDER_ENV = "EARTHMEM_EMBEDDER"
"""The setting that configures a text embedder (the vector lane)."""
BM25_TOKENISATION = (
    "bm25s 0.3.16 BM25 (lucene, k1=1.5, b=0.75); lower case, \\w\\w+ words, bm25s English "
    "stop words, no stemming; index = every item written (superseded included), no filters"
)
"""How the baseline tokenises and what it indexes (printed with the table)."""
_WORD = re.compile(r"(?u)\b\w\w+\b")


def recall_missing() -> str | None:
    """None when ``recall`` is a primitive of the dispatch room, else why it is not."""
    from api.dispatch import PRIMITIVES

    if "recall" in PRIMITIVES:
        return None
    return "recall primitive not available (api.dispatch.PRIMITIVES has no 'recall')"


def recall_body(q: Mapping[str, Any], phase1_at: str, limit: int = 10) -> dict[str, Any]:
    """The recall body of a set query."""
    body: dict[str, Any] = {"query": q["query"], "limit": limit}
    for name in ("near", "at", "asOf"):
        if q.get(name) is not None:
            body[name] = q[name]
    if body.get("asOf") == "@phase1":
        body["asOf"] = phase1_at
    return body


def _answer_hits(answer: Mapping[str, Any]) -> Sequence[Any]:
    hits = answer.get("hits")
    if hits is None and isinstance(answer.get("result"), Mapping):
        hits = answer["result"].get("hits")
    return hits or []


def hit_ids(answer: Mapping[str, Any]) -> list[str]:
    """Item ids of an answer's hits in rank order (``hit.item.id`` or ``hit.id``)."""
    out = []
    for hit in _answer_hits(answer):
        if not isinstance(hit, Mapping):
            continue
        item = hit.get("item")
        hid = item.get("id") if isinstance(item, Mapping) else hit.get("id")
        if hid is not None:
            out.append(str(hid))
    return out


def answer_lanes(answer: Mapping[str, Any]) -> tuple[tuple[str, ...], bool | None]:
    """The answer's ``lanes`` and ``degraded`` (top level or under ``result``)."""
    src = answer if "lanes" in answer else answer.get("result", {})
    lanes = src.get("lanes") if isinstance(src, Mapping) else None
    degraded = src.get("degraded") if isinstance(src, Mapping) else None
    return tuple(str(x) for x in lanes or ()), degraded


def tokens(text: str) -> list[str]:
    """The baseline's tokens of ``text``."""
    from bm25s.stopwords import STOPWORDS_EN

    stop = set(STOPWORDS_EN)
    return [w for w in _WORD.findall(text.lower()) if w not in stop]


class Bm25Baseline:
    """BM25 over the set's items (see the module docstring)."""

    def __init__(self, items: Sequence[Mapping[str, Any]]) -> None:
        import bm25s

        self.keys = [str(it["key"]) for it in items]
        corpus = [
            tokens(" ".join([it["title"], it["statement"], it.get("details") or "", *it["tags"]]))
            for it in items
        ]
        self.retriever = bm25s.BM25()
        self.retriever.index(corpus, show_progress=False)

    def rank(self, query: str, k: int = 10) -> list[str]:
        """Set keys of the best ``k`` items with a positive score."""
        toks = tokens(query)
        if not toks:
            return []
        res, scores = self.retriever.retrieve([toks], k=min(k, len(self.keys)), show_progress=False)
        return [self.keys[int(i)] for i, s in zip(res[0], scores[0], strict=True) if s > 0]
