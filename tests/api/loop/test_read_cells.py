"""read_cell / read_cells on the tiny sample: the values trajectory sees, typed errors."""

from __future__ import annotations

import json
from typing import Any

import anyio
import pytest
from fastapi.testclient import TestClient
from mcp import Client

from api.context import ServiceContext
from api.dispatch import run
from api.errors import ApiError
from api.mcp_server import build_server
from api.receipts import verify_answer
from api.rest import create_app
from store import address


def _doc(model: Any) -> dict[str, Any]:
    return json.loads(json.dumps(model.model_dump(mode="json")))


def test_latest_clear_value_matches_trajectory(ctx: ServiceContext, clearing_cell: str) -> None:
    tr = run(ctx, "trajectory", {"cell": clearing_cell, "band": "ndvi"})
    last = [p for p in tr.points if p.clear][-1]
    ans = run(ctx, "read_cell", {"cell": clearing_cell, "bands": ["ndvi", "s2.clear"]})
    ndvi, flag = ans.values
    assert (ndvi.band, ndvi.status, ndvi.tslot, ndvi.value) == (
        "indices.ndvi",
        "ok",
        last.tslot,
        last.value,
    )
    assert ndvi.clear
    assert ndvi.sources
    # the same fact id trajectory cites for that value
    assert ndvi.fact_id in {f.fact_id for f in tr.facts}
    assert flag.band == "s2.clear"
    assert flag.value == 2
    assert isinstance(flag.value, int)
    assert {f.fact_id for f in ans.facts} == {ndvi.fact_id, flag.fact_id}
    assert verify_answer(_doc(ans)).ok
    assert ans.time == "latest_clear"


def test_at_a_tslot_and_a_date(ctx: ServiceContext, clearing_cell: str) -> None:
    tr = run(ctx, "trajectory", {"cell": clearing_cell, "band": "ndvi"})
    masked = [p for p in tr.points if p.value is None]
    p = tr.points[0]
    a = run(ctx, "read_cell", {"cell": clearing_cell, "bands": ["ndvi"], "tslot": p.tslot})
    b = run(ctx, "read_cell", {"cell": clearing_cell, "bands": ["ndvi"], "date": p.date})
    assert a.values[0].value == p.value == b.values[0].value
    assert a.values[0].clear == p.clear
    if masked:
        m = run(
            ctx, "read_cell", {"cell": clearing_cell, "bands": ["ndvi"], "tslot": masked[0].tslot}
        )
        assert m.values[0].status == "masked"
        assert m.values[0].value is None
    gap = p.tslot - 1
    none = run(ctx, "read_cell", {"cell": clearing_cell, "bands": ["ndvi"], "tslot": gap})
    v = none.values[0]
    assert v.status == "no_observation"
    assert v.fact_id is None
    assert not none.facts
    assert v.nearest_after == tr.valid_tslots[0]


def test_default_bands_are_every_scalar_band(ctx: ServiceContext, clearing_cell: str) -> None:
    from store.cube.bands import SCALAR_BANDS

    ans = run(ctx, "read_cell", {"cell": clearing_cell})
    assert [v.band for v in ans.values] == list(SCALAR_BANDS)
    assert any(v.band == "s1.vh" and v.status == "ok" for v in ans.values)


def test_read_cells_equals_read_cell_per_cell(ctx: ServiceContext, clearing_cell: str) -> None:
    other = address.neighbours(clearing_cell)[0]
    many = run(
        ctx, "read_cells", {"cells": [clearing_cell, other, clearing_cell], "bands": ["ndvi", "vh"]}
    )
    assert [c.cell for c in many.cells] == [clearing_cell, other]
    for c in many.cells:
        one = run(ctx, "read_cell", {"cell": c.cell, "bands": ["ndvi", "vh"]})
        assert [v.model_dump() for v in c.values] == [v.model_dump() for v in one.values]
    assert many.n_values == len(many.facts)
    assert sorted(verify_answer(_doc(many)).__dict__)
    assert verify_answer(_doc(many)).ok


def _code(name: str, args: dict[str, Any], ctx: ServiceContext) -> str:
    with pytest.raises(ApiError) as info:
        run(ctx, name, args)
    return info.value.code


def test_bad_input_is_typed(ctx: ServiceContext, clearing_cell: str) -> None:
    assert (
        _code("read_cells", {"cells": [clearing_cell] * 257, "bands": ["ndvi"]}, ctx)
        == "too_many_cells"
    )
    assert _code("read_cells", {"cells": [], "bands": ["ndvi"]}, ctx) == "invalid_argument"
    assert _code("read_cell", {"cell": clearing_cell, "bands": ["nope"]}, ctx) == "unknown_band"
    assert (
        _code("read_cell", {"cell": clearing_cell, "bands": ["geotessera"]}, ctx) == "unknown_band"
    )
    assert _code("read_cell", {"cell": "zz", "bands": ["ndvi"]}, ctx) == "invalid_cell"
    assert (
        _code("read_cell", {"cell": clearing_cell, "tslot": 1, "date": "2024-01-01"}, ctx)
        == "invalid_argument"
    )
    assert _code("read_cell", {"cell": clearing_cell, "date": "2024-13-01"}, ctx) == "invalid_date"
    assert (
        _code("read_cell", {"cell": clearing_cell, "as_of": "1990-01-01T00:00:00Z"}, ctx)
        == "snapshot_not_found"
    )
    assert (
        _code("read_cell", {"cell": clearing_cell, "as_of": "NOSUCHSNAPSHOT0000"}, ctx)
        == "snapshot_not_found"
    )
    assert (
        _code("read_cell", {"cell": clearing_cell, "as_of": "not a time!"}, ctx) == "invalid_as_of"
    )


def test_as_of_a_snapshot_id_names_it(ctx: ServiceContext, clearing_cell: str) -> None:
    snaps = ctx.reader().list_snapshots()
    # the repository's first snapshot precedes the cube's layout: typed, not a crash
    with pytest.raises(ApiError) as info:
        run(ctx, "read_cell", {"cell": clearing_cell, "as_of": snaps[-1].id})
    assert info.value.code == "snapshot_not_found"
    layout = snaps[-2]  # the layout commit: no data yet
    ans = run(ctx, "read_cell", {"cell": clearing_cell, "bands": ["ndvi"], "as_of": layout.id})
    assert ans.snapshot_id == layout.id
    assert ans.values[0].status == "no_observation"
    tip = run(ctx, "read_cell", {"cell": clearing_cell, "bands": ["ndvi"], "as_of": snaps[0].id})
    assert tip.values[0].status == "ok"
    assert tip.snapshot_id == snaps[0].id


def test_rest_and_mcp_serve_it(tiny_store: Any, clearing_cell: str) -> None:
    client = TestClient(create_app(tiny_store.data), raise_server_exceptions=False)
    resp = client.post("/v1/read_cells", json={"cells": [clearing_cell], "bands": ["ndvi"]})
    assert resp.status_code == 200, resp.text
    assert verify_answer(resp.json()).ok
    resp = client.post("/v1/read_cells", json={"cells": [clearing_cell] * 300, "bands": ["ndvi"]})
    assert resp.status_code == 422
    assert resp.json()["error"]["code"] == "too_many_cells"

    async def main() -> None:
        async with Client(build_server(tiny_store.data)) as mcp:
            got = await mcp.call_tool(
                "earthmem_read_cell", {"cell": clearing_cell, "bands": ["ndvi"]}
            )
            assert not got.is_error
            one = json.loads(json.dumps(got.structured_content))
            assert verify_answer(one).ok
            listed = {t.name for t in (await mcp.list_tools()).tools}
            assert "earthmem_read_cells" not in listed  # called by name all the same
            other = address.neighbours(clearing_cell)[0]
            many = await mcp.call_tool(
                "earthmem_read_cells", {"cells": [clearing_cell, other], "bands": ["ndvi"]}
            )
            assert not many.is_error
            doc = json.loads(json.dumps(many.structured_content))
            assert verify_answer(doc).ok
            assert doc["cells"][0]["values"] == one["values"]
            bad = await mcp.call_tool(
                "earthmem_read_cells", {"cells": [clearing_cell] * 257, "bands": ["ndvi"]}
            )
            assert bad.is_error
            assert json.loads(bad.content[0].text)["error"]["code"] == "too_many_cells"
            fid = one["values"][0]["fact_id"]
            fact = await mcp.call_tool("earthmem_fact", {"fact_id": fid})
            assert not fact.is_error
            assert fact.structured_content["fact"]["fact_id"] == fid
            checked = await mcp.call_tool("earthmem_verify_receipt", {"answer": one})
            assert checked.structured_content["valid"] is True
            bad = await mcp.call_tool("earthmem_verify_receipt", {"answer": {"cell": "x"}})
            assert bad.is_error
            assert json.loads(bad.content[0].text)["error"]["code"] == "invalid_answer"

    anyio.run(main)


def test_read_cells_batch_is_read_cell_byte_for_byte(
    ctx: ServiceContext, clearing_cell: str
) -> None:
    """read_cells (vectorised per block) gives per cell exactly read_cell's entries and facts:
    the same fact ids, sources and statuses, at the latest clear value and at tslots that
    hold a value, a masked observation or nothing, across a block edge."""
    geo = address.decode(clearing_cell)
    cells = [
        address.format_cell(address.q_to_raw(geo.lat_q + dy, geo.lng_q + dx))
        for dy in range(-8, 8, 3)
        for dx in range(-8, 8, 3)
    ]
    # a cell of the next storage block too, and one far outside the sample (no data)
    side = 1 << ctx.reader().block_level
    cells.append(address.format_cell(address.q_to_raw(geo.lat_q, geo.lng_q + side)))
    cells.append(address.format_cell(address.q_to_raw(geo.lat_q + 50 * side, geo.lng_q)))
    bands = ["ndvi", "vh", "s2.clear", "s1.valid"]
    tr = run(ctx, "trajectory", {"cell": clearing_cell, "band": "ndvi"})
    times: list[int | None] = [None, tr.points[0].tslot, tr.points[0].tslot - 1]
    times += [p.tslot for p in tr.points if p.value is None][:2]
    statuses = set()
    for t in times:
        args: dict[str, Any] = {"cells": cells, "bands": bands}
        one_args: dict[str, Any] = {"bands": bands}
        if t is not None:
            args["tslot"] = one_args["tslot"] = t
        many = run(ctx, "read_cells", args)
        facts = []
        for c in many.cells:
            one = run(ctx, "read_cell", {"cell": c.cell, **one_args})
            assert [v.model_dump() for v in c.values] == [v.model_dump() for v in one.values]
            facts += [f.model_dump() for f in one.facts]
            statuses |= {v.status for v in one.values}
        assert [f.model_dump() for f in many.facts] == facts
        assert many.n_values == len(facts)
        assert verify_answer(_doc(many)).ok
    assert statuses == {"ok", "masked", "no_observation"}
