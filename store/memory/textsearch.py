"""How ``search_text`` bounds its work: every word first, then the rare words (or any word).

The database's ranking (SQLite FTS5 ``bm25``, PostgreSQL ``ts_rank``) costs one
evaluation per matching row, and an OR of everyday words matches a large share of a big
store. So the search is done in bounded passes (each a scan of at most
:data:`SCAN_CAP` matches, ranked by the database, merged by best score):

1. every word must match (AND) — when that gives ``limit`` hits, it is the answer, and
   otherwise its items rank above those of the next passes (whose scores are scaled
   under the lowest of them), so they come first, with the same scores, whatever the
   ``limit``;
2. then any of the *rare* words — those matching at most :data:`SCAN_CAP` items
   (counted with a bounded count) — so an item holding only the distinctive word of a
   query is still found, exactly ranked; items holding none of the query's rare words
   are then not proposed (they are the everyday-word matches a bounded scan would pick
   at random);
   when no word is rare, any word at all.

A pass that reaches :data:`SCAN_CAP` matches ranks the ones its index yields first
(SQLite: the newest items; PostgreSQL: the GIN scan's order) and leaves the rest out:
the price of a bounded cost when the only words given are everywhere.

What the caps do not bound on SQLite: FTS5's ``bm25`` computes each query word's IDF
(its document count) by running that word over the whole index on the first row it
scores, so a pass that returns any row pays a scan of every word's doclist. A common
word makes that most of the pass (10^5 items: "road" alone, 500 rows ranked in 3.1 ms,
1.0 ms without the score, 2.0 ms to count its matches), and it grows with the store.
Bounding it needs the document counts from elsewhere (a maintained count per word) and
a bm25 computed outside FTS5, which would change the scores.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping, Sequence
from typing import Any, Protocol

import sqlalchemy as sa

from store.memory.reads import FilterShape
from store.memory.readsql import ReadStatements

__all__ = ["SCAN_CAP", "Match", "TextBackend", "counts", "ranked_text", "search"]

SCAN_CAP = 500
"""Most matches one pass ranks."""
_UNDER = 0.999

Match = Callable[[Sequence[str], bool, int], list[tuple[str, float]]]
"""``(words, all_words, cap) -> [(item id, score)]``: at most ``cap`` matches, unordered."""
Count = Callable[[Sequence[str], int], list[int]]
"""``(words, cap) -> matches of each word``, counted up to ``cap + 1`` (one statement)."""


def ranked_text(
    words: Sequence[str], limit: int, match: Match, count: Count
) -> list[tuple[str, float]]:
    """``[(item id, score)]``, best first, ties by id, at most ``limit`` (see the module doc)."""
    cap = max(SCAN_CAP, limit)
    every = dict(match(words, True, cap))
    if len(every) >= limit or len(words) == 1:
        return _best(every, limit)
    some: dict[str, float] = {}

    def merge(hits: list[tuple[str, float]]) -> None:
        for i, s in hits:
            if i not in every and s > some.get(i, float("-inf")):
                some[i] = s

    rare = [w for w, n in zip(words, count(words, cap), strict=True) if n <= cap]
    merge(match(rare or words, False, cap))
    # every word's items above any word's: the others scaled under the lowest of them (so
    # the first tier's scores are the same whatever the limit)
    lo, hi = min(every.values(), default=0.0), max(some.values(), default=0.0)
    if lo > 0 and hi >= lo:
        some = {i: s * _UNDER * lo / hi for i, s in some.items()}
    return _best({**some, **every}, limit)


def _best(scores: dict[str, float], limit: int) -> list[tuple[str, float]]:
    return sorted(scores.items(), key=lambda x: (-x[1], x[0]))[:limit]


def counts(
    reads: ReadStatements,
    conn: sa.Connection,
    key: Hashable,
    holding: Callable[[int], sa.Subquery],
    n: int,
    params: Mapping[str, Any],
) -> list[int]:
    """The row counts of ``holding(0) .. holding(n - 1)`` (bounded subqueries, one per word,
    over ``params``), in one statement of shape ``key``."""

    def build() -> sa.Select[Any]:
        each = [
            sa.select(sa.func.count()).select_from(holding(i)).scalar_subquery() for i in range(n)
        ]
        return sa.select(*each)

    return [int(x) for x in reads.rows(conn, key, build, params)[0]]


class TextBackend(Protocol):
    """What a store backend gives the passes (:class:`~store.memory.sql.SqlMemoryStore`)."""

    def text_match(
        self,
        conn: sa.Connection,
        words: Sequence[str],
        where: tuple[FilterShape, dict[str, Any]],
        *,
        all_words: bool,
        cap: int,
    ) -> list[tuple[str, float]]: ...

    def word_counts(
        self, conn: sa.Connection, project: str, words: Sequence[str], cap: int
    ) -> list[int]: ...


def search(
    backend: TextBackend,
    conn: sa.Connection,
    project: str,
    words: Sequence[str],
    where: tuple[FilterShape, dict[str, Any]],
    limit: int,
) -> list[tuple[str, float]]:
    """:func:`ranked_text` over a backend's matches and word counts, on one connection
    (``where``: the filter's shape and parameters, :func:`store.memory.reads.filter_sql`)."""
    return ranked_text(
        words,
        limit,
        lambda ws, every, cap: backend.text_match(conn, ws, where, all_words=every, cap=cap),
        lambda ws, cap: backend.word_counts(conn, project, ws, cap),
    )
