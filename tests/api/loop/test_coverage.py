"""coverage: bands, dates and clear counts per month at a cell or over an area, and a PNG map."""

from __future__ import annotations

import base64
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


def test_a_cell_counts_its_observations(ctx: ServiceContext, clearing_cell: str) -> None:
    ans = run(ctx, "coverage", {"cell": clearing_cell})
    assert ans.kind == "cell"
    fams = {f.family: f for f in ans.families}
    assert set(fams) == {"s2", "s1"}
    for fam, band in (("s2", "ndvi"), ("s1", "vh")):
        traj = run(ctx, "trajectory", {"cell": clearing_cell, "band": band})
        f = fams[fam]
        assert f.has_data
        assert f.tslots == [p.tslot for p in traj.points]
        assert f.n_overpasses == len(traj.points)
        assert f.n_clear == traj.n_clear
        assert sum(m.clear for m in f.months) == f.n_clear
        assert sum(m.overpasses for m in f.months) == f.n_overpasses
        assert f.first_date == traj.points[0].date
    assert "indices.ndvi" in ans.bands_with_data
    assert "s1.vh" in ans.bands_with_data
    assert ans.tessera_vintages == ctx.vintages()
    assert ans.map_png_base64 is None  # no map for one cell
    assert verify_answer(ans.model_dump(mode="json")).ok

    mid = fams["s2"].dates[len(fams["s2"].dates) // 2]
    part = run(ctx, "coverage", {"cell": clearing_cell, "band": "ndvi", "start_date": mid})
    assert [f.family for f in part.families] == ["s2"]
    assert part.families[0].tslots == [
        t for t in fams["s2"].tslots if t >= part.families[0].tslots[0]
    ]
    assert part.families[0].dates[0] >= mid


def test_an_area_counts_clear_cells_per_month_and_maps_them(
    ctx: ServiceContext, tiny_store: Any
) -> None:
    geom = tiny_store.event("flood")["geometry"]
    ans = run(ctx, "coverage", {"geometry": geom, "band": "ndwi"})
    assert ans.kind == "area"
    (s2,) = ans.families
    assert s2.has_data
    per_cell: dict[str, int] = {}
    by_month: dict[str, int] = {}
    for t in s2.tslots:  # read_area reads every cell of each overpass: the same counts
        try:
            read = run(
                ctx, "read_area", {"geometry": geom, "band": "ndwi", "tslot": t, "max_cells": 5000}
            )
        except ApiError as exc:  # an overpass over the box that misses the area's cells
            if exc.code != "no_observation":
                raise
            continue
        assert read.n_cells == ans.n_cells
        by_month[read.date[:7]] = by_month.get(read.date[:7], 0) + read.n_clear
        for c in read.cells:
            per_cell[c.cell] = per_cell.get(c.cell, 0) + int(c.clear)
    assert {m.month: m.clear for m in s2.months if m.clear} == {
        k: v for k, v in by_month.items() if v
    }
    assert ans.map_family == "s2"
    assert ans.map_max == max(per_cell.values())
    png = base64.b64decode(ans.map_png_base64 or "")
    assert png.startswith(b"\x89PNG")
    assert ans.chart_id is not None
    assert ctx.charts.get(ans.chart_id) == png
    no_map = run(ctx, "coverage", {"geometry": geom, "band": "ndwi", "map": False})
    assert no_map.map_png_base64 is None
    assert no_map.families == ans.families


def _code(ctx: ServiceContext, args: dict[str, Any]) -> str:
    with pytest.raises(ApiError) as info:
        run(ctx, "coverage", args)
    return info.value.code


def test_bad_input_is_typed(ctx: ServiceContext, clearing_cell: str) -> None:
    assert _code(ctx, {}) == "invalid_argument"
    assert _code(ctx, {"cell": clearing_cell, "bbox": [0, 0, 0.01, 0.01]}) == "invalid_argument"
    assert _code(ctx, {"cell": clearing_cell, "start_date": "2024-13-01"}) == "invalid_date"
    assert _code(
        ctx, {"cell": clearing_cell, "start_date": "2024-06-01", "end_date": "2024-01-01"}
    ) == ("invalid_date")
    assert _code(ctx, {"cell": clearing_cell, "band": "nope"}) == "unknown_band"
    assert _code(ctx, {"bbox": [0, 0, 10, 10]}) == "area_too_large"
    assert _code(ctx, {"cell": "x"}) == "invalid_cell"
    assert _code(ctx, {"cell": clearing_cell, "as_of": "1990-01-01T00:00:00Z"}) == (
        "snapshot_not_found"
    )


def test_rest_and_mcp_serve_it(tiny_store: Any, clearing_cell: str) -> None:
    client = TestClient(create_app(tiny_store.data), raise_server_exceptions=False)
    resp = client.post("/v1/coverage", json={"cell": clearing_cell})
    assert resp.status_code == 200, resp.text
    assert verify_answer(resp.json()).ok

    async def main() -> None:
        async with Client(build_server(tiny_store.data)) as mcp:
            got = await mcp.call_tool("earthmem_coverage", {"cell": clearing_cell, "band": "vh"})
            assert not got.is_error
            body = json.loads(json.dumps(got.structured_content))
            assert verify_answer(body).ok
            assert [f["family"] for f in body["families"]] == ["s1"]

    anyio.run(main)
