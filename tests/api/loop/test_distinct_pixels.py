"""find_similar drops, by default, the key's copies under the same 10 m Tessera pixel."""

from __future__ import annotations

from typing import Any

import numpy as np
from fastapi.testclient import TestClient

from api.context import ServiceContext
from api.dispatch import run
from api.queries.similar_pixels import same_pixel_rows
from api.receipts import verify_answer
from api.rest import create_app
from store import address


def _key_with_copies(ctx: ServiceContext) -> tuple[str, set[str]]:
    """A cell whose source pixel also lies under some of its surrounding cells."""
    table = ctx.table(f"geotessera/{ctx.vintages()[-1]}")
    for row in range(table.n):
        raw = int(table.cells_at([row])[0])
        lat_q, lng_q = address.raw_to_q(raw)
        same = same_pixel_rows(table, lat_q, lng_q, row)
        if same:
            cells = address.format_cells(np.array([c for _, c in same], np.uint64)).tolist()
            return address.format_cell(raw), set(cells)
    raise AssertionError("the tiny store has no cell sharing its pixel")


def test_same_pixel_copies_are_dropped_by_default(ctx: ServiceContext) -> None:
    key, copies = _key_with_copies(ctx)
    kept = run(ctx, "find_similar", {"key": key, "k": 5, "distinct_pixels": False})
    assert kept.neighbours[0].cell64 in copies
    assert kept.neighbours[0].score > 0.9999  # byte-identical: the same measurement
    assert kept.distinct_pixels is not None
    assert not kept.distinct_pixels.applied
    assert kept.distinct_pixels.dropped == 0
    assert set(kept.distinct_pixels.same_pixel_cells) == copies

    ans = run(ctx, "find_similar", {"key": key, "k": 5})
    assert ans.distinct_pixels is not None
    assert ans.distinct_pixels.applied
    assert ans.distinct_pixels.dropped == len(copies)
    assert not copies & {n.cell64 for n in ans.neighbours}
    assert len(ans.neighbours) == 5
    # the rest of the ranking is the one without the copies
    rest = [n.cell64 for n in kept.neighbours if n.cell64 not in copies]
    assert [n.cell64 for n in ans.neighbours][: len(rest)] == rest


def test_inline_keys_have_no_pixel(ctx: ServiceContext) -> None:
    table = ctx.table(f"geotessera/{ctx.vintages()[-1]}")
    vec = table.vector(0).astype(float).tolist()
    ans = run(ctx, "find_similar", {"key": "inline:" + str(vec), "k": 3})
    assert ans.distinct_pixels is None


def test_rest_takes_the_option(tiny_store: Any, ctx: ServiceContext) -> None:
    key, copies = _key_with_copies(ctx)
    client = TestClient(create_app(tiny_store.data), raise_server_exceptions=False)
    resp = client.post("/v1/find_similar", json={"key": key, "k": 3, "distinct_pixels": False})
    assert resp.status_code == 200, resp.text
    body = resp.json()
    assert verify_answer(body).ok
    assert body["neighbours"][0]["cell64"] in copies
    resp = client.post("/v1/find_similar", json={"key": key, "distinct_pixels": "yes"})
    assert resp.status_code == 422
