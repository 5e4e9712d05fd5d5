"""Reading items' embeddings in bulk, and filling in those written before an embedder was
configured (``reembed``).

An embedding is derived from an item's text by whichever embedder is configured; it is
not part of what the item says (:mod:`store.memory.digest` leaves it out), so storing one
later is not a write of the item: no history entry, no new version, no head move. Only
items without one are filled (``embedding IS NULL`` in the ``UPDATE`` itself), so two
concurrent runs, or a run racing a write that stored its own, never overwrite a vector.
Query builders over one open connection; the store's methods open the transactions.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import sqlalchemy as sa

from store.memory.codec import item_from_row, item_vectors_from_rows, pack_vector
from store.memory.model import ItemVectors, MemoryItem
from store.memory.schema import ITEM_COLUMNS, items

__all__ = ["item_vectors", "set_embeddings", "unembedded"]


def item_vectors(
    conn: sa.Connection,
    conditions: Sequence[sa.ColumnElement[bool]],
    params: Mapping[str, Any],
) -> ItemVectors:
    """Ids (in id order), anchor centres and embeddings of the items matching ``conditions``
    (``params``: the values of their parameters)."""
    c = items.c
    q = sa.select(c.id, c.embedding, c.min_lat, c.min_lng, c.max_lat, c.max_lng).where(*conditions)
    return item_vectors_from_rows(conn.execute(q.order_by(c.id), dict(params)).all())


def unembedded(
    conn: sa.Connection, project: str, after: str | None, limit: int
) -> list[MemoryItem]:
    """Up to ``limit`` items with no embedding, in id order after ``after``."""
    c = items.c
    conds = [c.project == project, c.embedding.is_(None)]
    if after is not None:
        conds.append(c.id > after)
    q = sa.select(*ITEM_COLUMNS).where(*conds).order_by(c.id).limit(max(0, limit))
    return [item_from_row(r._mapping) for r in conn.execute(q)]


def set_embeddings(
    conn: sa.Connection, project: str, vectors: Mapping[str, Sequence[float]]
) -> int:
    """Store each vector on its item when the item has none; the number stored."""
    c = items.c
    stored = 0
    for item_id, vec in vectors.items():
        q = (
            sa.update(items)
            .where(c.project == project, c.id == item_id, c.embedding.is_(None))
            .values(embedding=pack_vector(tuple(float(x) for x in vec)))
        )
        stored += conn.execute(q).rowcount
    return stored
