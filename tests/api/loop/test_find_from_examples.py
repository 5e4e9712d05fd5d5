"""find_similar from several examples: positives' centroid, negatives' pull, a within area."""

from __future__ import annotations

import json
from typing import Any

import anyio
import numpy as np
import pytest
from mcp import Client

from api.context import ServiceContext
from api.dispatch import run
from api.errors import ApiError
from api.mcp_server import build_server
from api.queries.similar_examples import MAX_EXAMPLE_KEYS, NEGATIVE_WEIGHT
from api.receipts import verify_answer
from store import address


def _table(ctx: ServiceContext) -> Any:
    return ctx.table(f"geotessera/{ctx.vintages()[-1]}")


def _cells(ctx: ServiceContext, n: int, step: int = 97) -> list[str]:
    table = _table(ctx)
    raws = table.cells_at(np.arange(0, n * step, step) % table.n)
    return address.format_cells(raws).tolist()


def _unit(v: Any) -> Any:
    f = np.asarray(v, np.float64)
    return f / np.linalg.norm(f)


def test_examples_score_by_the_centroid_minus_the_negatives(ctx: ServiceContext) -> None:
    table = _table(ctx)
    key, p1, p2, n1 = _cells(ctx, 4)
    rows = [table.row_of(address.parse_cell(c)) for c in (key, p1, p2, n1)]
    q = np.mean([_unit(table.vector(r)) for r in rows[:3]], axis=0)
    q = q - NEGATIVE_WEIGHT * _unit(table.vector(rows[3]))
    args = {"key": key, "positives": [p1, p2], "negatives": [n1], "k": 8, "distinct_pixels": False}
    ans = run(ctx, "find_similar", args)
    assert ans.examples is not None
    assert ans.examples.positives == [key, p1, p2]
    assert ans.examples.negatives == [n1]
    returned = [n.cell64 for n in ans.neighbours]
    assert not {key, p1, p2, n1} & set(returned)  # examples are never returned
    # the same ranking as an inline key holding the formula's vector, examples excluded
    inline = run(ctx, "find_similar", {"key": "inline:" + str(q.tolist()), "k": 12})
    expected = [n.cell64 for n in inline.neighbours if n.cell64 not in {key, p1, p2, n1}]
    assert returned == expected[: len(returned)]
    for got, want in zip(ans.neighbours, inline.neighbours, strict=False):
        if got.cell64 == want.cell64:
            assert got.score == pytest.approx(want.score)
    # a negative moves the answer: without it the ranking differs
    plain = run(
        ctx, "find_similar", {"key": key, "positives": [p1, p2], "k": 8, "distinct_pixels": False}
    )
    assert [n.cell64 for n in plain.neighbours] != returned
    assert len(ans.facts) == 1 + 3 + len(ans.neighbours)  # key, examples, neighbours


def test_within_restricts_the_candidates(ctx: ServiceContext) -> None:
    key = _cells(ctx, 1)[0]
    everywhere = run(ctx, "find_similar", {"key": key, "k": 20})
    far = everywhere.neighbours[-1]
    d = 0.0008
    box = [far.lat - d, far.lng - d, far.lat + d, far.lng + d]
    ans = run(ctx, "find_similar", {"key": key, "k": 20, "within": box})
    assert ans.within is not None
    assert 0 < ans.within.eligible < _table(ctx).n
    assert ans.neighbours
    assert far.cell64 in [n.cell64 for n in ans.neighbours]
    for n in ans.neighbours:
        assert box[0] <= n.lat <= box[2]
        assert box[1] <= n.lng <= box[3]
    poly = {
        "type": "Polygon",
        "coordinates": [
            [
                [box[1], box[0]],
                [box[3], box[0]],
                [box[3], box[2]],
                [box[1], box[2]],
                [box[1], box[0]],
            ]
        ],
    }
    same = run(ctx, "find_similar", {"key": key, "k": 20, "within": poly})
    assert [n.cell64 for n in same.neighbours] == [n.cell64 for n in ans.neighbours]


def _code(ctx: ServiceContext, args: dict[str, Any]) -> str:
    with pytest.raises(ApiError) as info:
        run(ctx, "find_similar", args)
    return info.value.code


def test_bad_examples_are_typed(ctx: ServiceContext) -> None:
    cells = _cells(ctx, MAX_EXAMPLE_KEYS + 1)
    key = cells[0]
    assert _code(ctx, {"key": key, "positives": cells[1:]}) == "too_many_keys"
    at_cap = run(ctx, "find_similar", {"key": key, "positives": cells[1:MAX_EXAMPLE_KEYS]})
    assert at_cap.examples is not None
    assert len(at_cap.examples.positives) == MAX_EXAMPLE_KEYS
    assert _code(ctx, {"key": key, "negatives": cells[:1] * (MAX_EXAMPLE_KEYS + 1)}) == (
        "too_many_keys"
    )
    assert _code(ctx, {"key": key, "positives": ["nope"]}) == "invalid_cell"
    assert _code(ctx, {"key": key, "positives": [cells[1]], "negatives": [cells[1]]}) == (
        "invalid_argument"
    )
    assert _code(ctx, {"key": key, "within": [0, 0, 10, 10]}) == "area_too_large"
    assert _code(ctx, {"key": key, "within": {"type": "Point"}}) == "invalid_geometry"
    # a cell outside the tables (the south pole's row is not on the sample)
    nowhere = address.format_cell(address.q_to_raw(5, 5))
    assert _code(ctx, {"key": key, "positives": [nowhere]}) == "no_vector"


def test_mcp_serves_examples(tiny_store: Any, ctx: ServiceContext) -> None:
    key, p1, n1 = _cells(ctx, 3)

    async def main() -> None:
        async with Client(build_server(tiny_store.data)) as mcp:
            args = {"key": key, "positives": [p1], "negatives": [n1], "k": 3}
            got = await mcp.call_tool("earthmem_find_similar", args)
            assert not got.is_error
            body = json.loads(json.dumps(got.structured_content))
            assert verify_answer(body).ok
            assert body["examples"]["negatives"] == [n1]

    anyio.run(main)
