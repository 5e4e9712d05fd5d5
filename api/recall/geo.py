"""Recall's geo-embedding lane: items anchored at places whose Tessera embedding resembles the
query place's ("what do we know about places like this field?", with no text model).

The query place is ``near``'s point, else the first ``anchor`` item that has a place. Its
lattice cell's vector comes from the newest Tessera vintage's k-NN table
(``knn/geotessera/<year>``, the table ``find_similar`` scans); if that cell has none, the
nearest cell of its 3 x 3 neighbourhood that has one stands in (said in the note).

Each candidate item is scored by the cosine of that vector to the vector of the cell its
anchor's centre falls in (looked up in the same table: ``rows_of``, then the int8 rows),
or, when that cell has none, the best of its 3 x 3 neighbourhood ("at or near"). This
scores every item's own place exactly, so its cost is bounded by the project's items
(at most :data:`GEO_MAX_ITEMS` are scored; the rest are named in the note), not by the
table: finding the table's top-k cells first and then joining the items to them would
scan every cell of the table and still miss items whose cell ranked k + 1. Items without a
place, or whose neighbourhood has no vector (outside the ingested area), get no score; the
lane proposes the ``q.candidates`` best positive cosines.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from api.errors import ApiError
from api.recall.lanes import LaneHits, RecallQuery
from api.recall.vector import cached_item_vectors
from store import address
from store.errors import StoreError

if TYPE_CHECKING:
    from api.context import ServiceContext
    from store.knn.table import KnnTable
    from store.memory.interface import MemoryStore

__all__ = ["GEO_MAX_ITEMS", "geo_lane", "query_place"]

GEO_MAX_ITEMS = 250_000
"""Most items with a place the lane scores in one recall."""
_RING = tuple((d_lat, d_lng) for d_lat in (0, 1, -1) for d_lng in (0, 1, -1))
"""The 3 x 3 neighbourhood, centre first."""


def _off(t0: float, note: str, candidates: int = 0) -> LaneHits:
    return LaneHits("geo", {}, candidates, (time.perf_counter() - t0) * 1e3, ran=False, note=note)


def query_place(store: MemoryStore, q: RecallQuery) -> tuple[float, float, str] | None:
    """``(lat, lng, what)`` of the query place: ``near``, else the first anchor item's place."""
    if q.near is not None:
        return q.near.lat, q.near.lng, f"near {q.near.place or 'the given point'}"
    if q.anchor_ids:
        for item in store.get_many(q.project, list(q.anchor_ids)[:16]):
            if item.anchor.cell:
                geo = address.decode(item.anchor.cell)
                return geo.lat, geo.lng, f"anchor {item.id}"
    return None


def _newest_table(ctx: ServiceContext) -> tuple[int, KnnTable] | None:
    for year in reversed(ctx.vintages()):
        table = ctx.table(f"geotessera/{year}")
        if table.n:
            return year, table
    return None


def _ring_rows(
    table: KnnTable, lat_q: npt.NDArray[np.int64], lng_q: npt.NDArray[np.int64]
) -> npt.NDArray[np.int64]:
    """``(9, n)`` table rows of each position's 3 x 3 neighbourhood (centre first; -1: none)."""
    out = np.full((len(_RING), lat_q.size), -1, dtype=np.int64)
    for k, (d_lat, d_lng) in enumerate(_RING):
        la = lat_q + d_lat
        ln = (lng_q + d_lng) % address.LNG_MAX_Q
        ok = (la > 0) & (la < address.LAT_MAX_Q)
        if ok.any():
            out[k, ok] = table.rows_of(address.q_to_raw_array(la[ok], ln[ok]))
    return out


def _cosines(
    table: KnnTable, rows: npt.NDArray[np.int64], qvec: npt.NDArray[np.float32]
) -> npt.NDArray[np.float32]:
    """Cosine of each row's int8 vector to ``qvec`` (a unit vector); -inf where ``rows`` is -1."""
    out = np.full(rows.shape, -np.inf, dtype=np.float32)
    have = rows >= 0
    if not have.any():
        return out
    uniq, inverse = np.unique(rows[have], return_inverse=True)
    vecs = np.asarray(table.vectors[uniq], dtype=np.float32)  # sorted rows: one pass
    norms = np.linalg.norm(vecs, axis=1)
    sims = np.divide(vecs @ qvec, norms, out=np.zeros(uniq.size, np.float32), where=norms > 0)
    out[have] = sims[inverse]
    return out


def geo_lane(ctx: ServiceContext, store: MemoryStore, q: RecallQuery) -> LaneHits:
    """Items scored by how much their place's Tessera embedding resembles the query place's."""
    t0 = time.perf_counter()
    place = query_place(store, q)
    if place is None:
        return _off(t0, "no query place: give near, or an anchor item that has a place")
    lat, lng, what = place
    try:
        picked = _newest_table(ctx)
    except ApiError as exc:
        return _off(t0, f"no Tessera k-NN table to read: {exc.message}")
    if picked is None:
        return _off(t0, "no Tessera vintage with vectors in the store (knn/geotessera/<year>)")
    year, table = picked
    try:
        lat_q, lng_q = address.encode_q_array([lat], [lng])
        ring = _ring_rows(table, lat_q, lng_q)[:, 0]
    except StoreError as exc:
        return _off(t0, f"the query place is not a lattice cell: {exc}")
    found = np.flatnonzero(ring >= 0)
    cell = address.format_cell(int(address.q_to_raw_array(lat_q, lng_q)[0]))
    if not found.size:
        return _off(t0, f"no Tessera embedding at or next to {cell} ({what}) in vintage {year}")
    notes = [f"query place {what}: cell {cell}, Tessera vintage {year}"]
    if found[0] != 0:
        notes.append("the query cell has no vector; its nearest neighbour's stands in")
    qvec = np.asarray(table.vectors[int(ring[found[0]])], dtype=np.float32)
    qvec /= max(float(np.linalg.norm(qvec)), 1e-12)

    vectors = cached_item_vectors(store, q.project, q.where)
    placed = np.flatnonzero(np.isfinite(vectors.lat) & np.isfinite(vectors.lng))
    if placed.size > GEO_MAX_ITEMS:
        notes.append(f"{placed.size} items have a place; only {GEO_MAX_ITEMS} were scored")
        placed = placed[:GEO_MAX_ITEMS]
    scores: dict[str, float] = {}
    if placed.size:
        ilat_q, ilng_q = address.encode_q_array(vectors.lat[placed], vectors.lng[placed])
        sims = _cosines(table, _ring_rows(table, ilat_q, ilng_q), qvec)
        own = sims[0]
        best = np.where(np.isfinite(own), own, sims.max(axis=0))
        unplaced = int((~np.isfinite(best)).sum())
        if unplaced:
            notes.append(f"{unplaced} items lie where the table has no vector")
        keep = np.flatnonzero(np.isfinite(best) & (best > 0)) if q.candidates > 0 else placed[:0]
        if keep.size > q.candidates:
            keep = keep[np.argpartition(-best[keep], q.candidates - 1)[: q.candidates]]
        scores = {vectors.ids[int(placed[i])]: float(best[i]) for i in keep.tolist()}
    return LaneHits(
        "geo", scores, int(placed.size), (time.perf_counter() - t0) * 1e3, note="; ".join(notes)
    )
