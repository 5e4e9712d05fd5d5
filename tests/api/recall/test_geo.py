"""The geo-embedding lane on the tiny sample: items anchored where the Tessera embedding
resembles the query place's rank first, with no text model configured."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from api.context import ServiceContext
from api.dispatch import call_primitive
from api.memory.auth import issue_token
from api.recall.geo import geo_lane
from api.recall.lanes import NearPoint, RecallQuery
from api.receipts import Signer
from store import address
from store.memory.model import ItemFilter

PROJECT = "ranchi"


@pytest.fixture
def ctx(tiny_store: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> ServiceContext:
    monkeypatch.delenv("EARTHMEM_EMBEDDER", raising=False)  # no text model at all
    return ServiceContext(
        tiny_store.data,
        signer=Signer.generate(),
        manifest_path=tiny_store.sample / "manifest.json",
        memory_url=f"sqlite:///{tmp_path / 'memory.sqlite'}",
    )


def _write(ctx: ServiceContext, token: str, title: str, raw: int, **kw: Any) -> str:
    geo = address.decode(raw)
    body = {
        "type": "observation",
        "title": title,
        "statement": f"{title} (note)",
        "tags": ["field-report"],
        "where": {"lat": geo.lat, "lng": geo.lng},
        **kw,
    }
    return str(call_primitive(ctx, "memory_create", body, token=token)["result"]["item"]["id"])


def _cos(a: np.ndarray, b: np.ndarray) -> float:
    a, b = a.astype(np.float64), b.astype(np.float64)
    return float(a @ b / np.linalg.norm(a) / np.linalg.norm(b))


def test_items_at_places_like_the_query_place_rank_first(
    ctx: ServiceContext, tiny_store: Any
) -> None:
    year = ctx.vintages()[-1]
    table = ctx.table(f"geotessera/{year}")
    centre = tiny_store.event("flood")["centre"]
    q_raw = address.encode_int(centre["lat"], centre["lng"])
    q_row = table.row_of(q_raw)
    assert q_row is not None
    # the k-NN table's own neighbours of the query cell: the most alike far from it, and the
    # least alike cell of the table
    q_lat_q, q_lng_q = address.raw_to_q(q_raw)
    res = table.search(table.vector(q_row), k=min(table.n, 400), mode="cosine", exclude_row=q_row)
    far = [
        int(r)
        for r in res.rows
        if max(
            abs(a - b)
            for a, b in zip(address.raw_to_q(int(table.cells[r])), (q_lat_q, q_lng_q), strict=True)
        )
        > 3
    ]
    alike = int(table.cells[far[0]])
    vecs = np.asarray(table.vectors, dtype=np.float32)
    qv = vecs[q_row] / np.linalg.norm(vecs[q_row])
    sims = vecs @ qv / np.maximum(np.linalg.norm(vecs, axis=1), 1e-9)
    unlike = int(table.cells[int(np.argmin(sims))])

    token = issue_token(ctx.memory(), PROJECT, ("read", "write"), actor="agent:test")[0]
    a = _write(ctx, token, "alpha", alike)
    b = _write(ctx, token, "bravo", unlike)
    placeless = call_primitive(
        ctx,
        "memory_create",
        {"type": "decision", "title": "charlie", "statement": "no place", "tags": ["x"]},
        token=token,
    )["result"]["item"]["id"]
    geo = address.decode(q_raw)
    q = RecallQuery(
        project=PROJECT,
        text="what do we know about places like this field?",
        where=ItemFilter(),
        near=NearPoint(geo.lat, geo.lng, 500.0),
    )
    hits = geo_lane(ctx, ctx.memory(), q)
    assert hits.ran
    assert hits.lane == "geo"
    assert f"vintage {year}" in (hits.note or "")
    assert hits.candidates == 2  # the items with a place
    assert placeless not in hits.scores
    assert hits.scores[a] == pytest.approx(
        _cos(table.vector(q_row), table.vector(far[0])), abs=1e-5
    )
    assert b not in hits.scores or hits.scores[b] < hits.scores[a]
    assert max(hits.scores, key=hits.scores.__getitem__) == a

    # the anchor item's place is the query place when near is absent
    by_anchor = geo_lane(ctx, ctx.memory(), RecallQuery(PROJECT, "", ItemFilter(), anchor_ids=(a,)))
    assert by_anchor.ran
    assert by_anchor.scores[a] == pytest.approx(1.0, abs=1e-5)
    # the candidate cap
    capped = geo_lane(
        ctx, ctx.memory(), RecallQuery(PROJECT, "", ItemFilter(), near=q.near, candidates=1)
    )
    assert list(capped.scores) == [a]


def test_without_a_query_place_or_an_embedding_there_the_lane_does_not_run(
    ctx: ServiceContext,
) -> None:
    none = geo_lane(ctx, ctx.memory(), RecallQuery(PROJECT, "fields", ItemFilter()))
    assert not none.ran
    assert none.note is not None
    assert "no query place" in none.note
    far_away = NearPoint(-33.9, 151.2, 100.0)  # Sydney: outside the sample area
    off = geo_lane(ctx, ctx.memory(), RecallQuery(PROJECT, "", ItemFilter(), near=far_away))
    assert not off.ran
    assert off.note is not None
    assert "no Tessera embedding" in off.note
