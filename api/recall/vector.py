"""Recall's vector lane: cosine between the query's text embedding and the items'.

Runs only when an embedder is configured (:mod:`api.recall.embedder`); without one,
with a misconfigured one, or when embedding the query misses the query's deadline
(``embedDeadlineMs``), it answers ``ran=False`` with the reason, and the engine marks
the answer ``degraded``. Item embeddings were computed when the items were written
(:func:`api.recall.embedder.embed_item`); items written before an embedder was
configured (or while it failed) have none: the lane's note says how many, and
``earthmem memory reembed`` fills them in.

The items' vectors are read once per (project, history head, filter) with
:meth:`~store.memory.interface.MemoryStore.item_vectors` and kept in a small
process cache (:class:`VectorCache`, bounded by entries and bytes): a write moves
the head, so a recall never scores a stale matrix, and repeated recalls do not
re-read every row. Only the filter fields that do not vary per query are pushed down
(types, tags, statuses, scopes, actor); the engine applies the rest (place, valid
and transaction time) to the union of the lanes' candidates.
"""

from __future__ import annotations

import bisect
import threading
import time
from collections import OrderedDict
from collections.abc import Hashable
from typing import TYPE_CHECKING

import numpy as np

from api.recall.embedder import (
    EmbedDeadline,
    EmbedderFailed,
    EmbedderMisconfigured,
    cosine_ready,
)
from api.recall.lanes import LaneHits, RecallQuery
from store.memory.model import ItemFilter, ItemVectors

if TYPE_CHECKING:
    from api.context import ServiceContext
    from store.memory.interface import MemoryStore

__all__ = [
    "CACHE",
    "VECTOR_CACHE_BYTES",
    "VECTOR_CACHE_ENTRIES",
    "VectorCache",
    "cached_item_vectors",
    "lane_filter",
    "vector_lane",
]

VECTOR_CACHE_BYTES = 512 << 20
"""Bound of the process's cache of item matrices (least recently used dropped first)."""
VECTOR_CACHE_ENTRIES = 32
"""At most this many (project, head, filter) matrices are kept."""


class VectorCache:
    """LRU of :class:`ItemVectors` by key, bounded by entries and bytes (thread-safe)."""

    def __init__(
        self, max_bytes: int = VECTOR_CACHE_BYTES, max_entries: int = VECTOR_CACHE_ENTRIES
    ):
        self.max_bytes = max_bytes
        self.max_entries = max_entries
        self._entries: OrderedDict[Hashable, ItemVectors] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()
        self.reads = 0
        """Store reads made on a miss (tests and ``explain``)."""

    def get(self, key: Hashable) -> ItemVectors | None:
        with self._lock:
            found = self._entries.get(key)
            if found is not None:
                self._entries.move_to_end(key)
            return found

    def put(self, key: Hashable, value: ItemVectors) -> None:
        size = value.nbytes
        with self._lock:
            self.reads += 1
            if size > self.max_bytes:
                return  # larger than the whole cache: used once, not kept
            old = self._entries.pop(key, None)
            if old is not None:
                self._bytes -= old.nbytes
            self._entries[key] = value
            self._bytes += size
            while self._entries and (
                self._bytes > self.max_bytes or len(self._entries) > self.max_entries
            ):
                _, dropped = self._entries.popitem(last=False)
                self._bytes -= dropped.nbytes

    def info(self) -> dict[str, int]:
        with self._lock:
            return {"entries": len(self._entries), "bytes": self._bytes, "reads": self.reads}

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
            self._bytes = 0


CACHE = VectorCache()
"""The process's item-vector cache (shared by the vector and geo-embedding lanes)."""


def lane_filter(where: ItemFilter) -> ItemFilter:
    """The part of a query's filter that is pushed down (what does not vary per query)."""
    return ItemFilter(
        types=where.types,
        tags=where.tags,
        statuses=where.statuses,
        scope_kinds=where.scope_kinds,
        actor=where.actor,
    )


def cached_item_vectors(store: MemoryStore, project: str, where: ItemFilter) -> ItemVectors:
    """The project's :class:`ItemVectors` under ``lane_filter(where)``, cached per history head."""
    flt = lane_filter(where)
    seq = store.head(project).seq
    key = (id(store), getattr(store, "url", ""), project, seq, flt)
    found = CACHE.get(key)
    if found is None:
        found = store.item_vectors(project, flt)
        CACHE.put(key, found)
    return found


def _off(t0: float, note: str) -> LaneHits:
    return LaneHits("vector", {}, 0, (time.perf_counter() - t0) * 1e3, ran=False, note=note)


def vector_lane(ctx: ServiceContext, store: MemoryStore, q: RecallQuery) -> LaneHits:
    """Items ranked by cosine of their embedding to the query text's (the top ``q.candidates``,
    positive cosines only), and the full-text lane's candidates scored the same way (so
    fusion does not depend on whether a text hit made the vector lane's own cut)."""
    t0 = time.perf_counter()
    try:
        embedder = ctx.embedder()
    except EmbedderMisconfigured as exc:
        return _off(t0, f"embedder misconfigured: {exc.message}")
    if embedder is None:
        return _off(t0, "no embedder configured (EARTHMEM_EMBEDDER)")
    try:
        qvec = embedder.embed([q.text], deadline=q.deadline)[0]
    except EmbedDeadline as exc:
        return _off(t0, f"the query embedding missed embedDeadlineMs: {exc.message}")
    except EmbedderFailed as exc:
        return _off(t0, f"the embedder failed: {exc.message}")
    vectors = cached_item_vectors(store, q.project, q.where)
    n = len(vectors.ids)
    notes = []
    if vectors.missing:
        notes.append(
            f"{vectors.missing} of {n} candidate items have no embedding (written before an "
            "embedder was configured, or while it failed; `earthmem memory reembed` adds them)"
        )
    if vectors.other_dim:
        notes.append(f"{vectors.other_dim} items were embedded at another dimension")
    matrix = vectors.embeddings
    if matrix.shape[0] and matrix.shape[1] != qvec.size:
        notes.append(
            f"the items' embeddings have dimension {matrix.shape[1]}, the embedder's "
            f"{qvec.size} (another model wrote them: re-embed)"
        )
        return _off(t0, "; ".join(notes))
    if not cosine_ready(qvec):
        notes.append("the query has no word the embedder knows")
        matrix = matrix[:0]
    sims = matrix @ qvec.astype(np.float32) if matrix.shape[0] else np.zeros(0, np.float32)
    item_of_row = np.empty(vectors.embeddings.shape[0], dtype=np.int64)  # the whole matrix's
    has = np.flatnonzero(vectors.embedded >= 0)
    item_of_row[vectors.embedded[has]] = has
    keep = np.flatnonzero(sims > 0) if q.candidates > 0 else np.zeros(0, np.int64)
    if keep.size > q.candidates:
        part = np.argpartition(-sims[keep], q.candidates - 1)[: q.candidates]
        keep = keep[part]
    scores = {vectors.ids[int(item_of_row[r])]: float(sims[r]) for r in keep.tolist()}
    for i in (q.text_ids or ())[: q.candidates] if sims.size else ():
        k = bisect.bisect_left(vectors.ids, i)  # ids are in id order
        if k < n and vectors.ids[k] == i and (r := int(vectors.embedded[k])) >= 0 and sims[r] > 0:
            scores.setdefault(i, float(sims[r]))
    return LaneHits(
        "vector",
        scores,
        int(matrix.shape[0]),
        (time.perf_counter() - t0) * 1e3,
        note="; ".join(notes) or None,
    )
