"""compare_same_doy: a value against the same ±15 days of the other years."""

from __future__ import annotations

import datetime as dt
import json
from typing import Any

import anyio
import numpy as np
import pytest
from fastapi.testclient import TestClient
from mcp import Client

from api.context import ServiceContext
from api.dispatch import run
from api.errors import ApiError
from api.mcp_server import build_server
from api.receipts import verify_answer
from api.rest import create_app


def _day(t: int) -> dt.date:
    return dt.date(1970, 1, 1) + dt.timedelta(days=t)


def _clear_points(ctx: ServiceContext, cell: str) -> dict[int, float]:
    traj = run(ctx, "trajectory", {"cell": cell, "band": "ndvi"})
    return {p.tslot: p.value for p in traj.points if p.clear and p.value is not None}


def _a_day_with_a_season_before(points: dict[int, float]) -> int:
    for t in sorted(points, reverse=True):
        d = _day(t)
        before = (d.replace(year=d.year - 1) - dt.date(1970, 1, 1)).days
        if any(abs(u - before) <= 15 for u in points):
            return t
    raise AssertionError("no clear value with a clear one a year before")


def test_a_cell_against_its_other_years(ctx: ServiceContext, clearing_cell: str) -> None:
    points = _clear_points(ctx, clearing_cell)
    t = _a_day_with_a_season_before(points)
    asked = _day(t) + dt.timedelta(days=3)  # the nearest clear value is taken
    ans = run(
        ctx, "compare_same_doy", {"cell": clearing_cell, "band": "ndvi", "date": asked.isoformat()}
    )
    here = [u for u in points if abs(u - (t + 3)) <= 15]
    nearest = min(here, key=lambda u: (abs(u - (t + 3)), u))
    assert ans.value.tslot == nearest
    assert ans.value.value == pytest.approx(points[nearest])
    assert ans.offset_days == nearest - (t + 3)
    pooled = []
    for other in ans.other_years:
        centre = (asked.replace(year=other.year) - dt.date(1970, 1, 1)).days
        want = sorted(u for u in points if abs(u - centre) <= 15)
        assert [p.tslot for p in other.points] == want
        pooled += [points[u] for u in want]
    assert pooled
    assert asked.year not in [o.year for o in ans.other_years]
    assert ans.baseline_median == pytest.approx(float(np.median(pooled)))
    assert ans.difference == pytest.approx(ans.value.value - float(np.median(pooled)))
    assert ans.within_season_range == (min(pooled) <= ans.value.value <= max(pooled))
    ids = {f.fact_id for f in ans.facts}
    assert ans.value.fact_id in ids
    assert all(p.fact_id in ids for o in ans.other_years for p in o.points)
    assert verify_answer(ans.model_dump(mode="json")).ok

    only = run(
        ctx,
        "compare_same_doy",
        {"cell": clearing_cell, "band": "ndvi", "date": asked.isoformat(), "years": [1999]},
    )
    assert only.years_without_data == [1999]
    assert only.baseline_median is None


def test_an_area_uses_its_overpass_medians(ctx: ServiceContext, tiny_store: Any) -> None:
    geom = tiny_store.event("flood")["geometry"]
    cov = run(ctx, "coverage", {"geometry": geom, "band": "ndwi", "map": False})
    t = cov.families[0].tslots[-1]
    ans = run(
        ctx, "compare_same_doy", {"geometry": geom, "band": "ndwi", "date": _day(t).isoformat()}
    )
    assert ans.kind == "area"
    read = run(ctx, "read_area", {"geometry": geom, "band": "ndwi", "tslot": ans.value.tslot})
    assert read.stats is not None
    assert ans.value.value == pytest.approx(read.stats["median"])
    assert read.clear_fraction >= 0.4


def _code(ctx: ServiceContext, args: dict[str, Any]) -> str:
    with pytest.raises(ApiError) as info:
        run(ctx, "compare_same_doy", args)
    return info.value.code


def test_bad_input_is_typed(ctx: ServiceContext, clearing_cell: str) -> None:
    base = {"cell": clearing_cell, "band": "ndvi"}
    assert _code(ctx, {"band": "ndvi", "date": "2024-06-01"}) == "invalid_argument"
    assert _code(ctx, {**base, "date": "2024-02-30"}) == "invalid_date"
    assert _code(ctx, {**base, "date": "1990-06-01"}) == "no_observation"
    assert _code(ctx, {**base, "date": "2024-06-01", "years": list(range(1970, 2030))}) == (
        "invalid_argument"
    )
    assert _code(ctx, {**base, "date": "2024-06-01", "years": [1900]}) == "invalid_argument"
    assert _code(ctx, {**base, "band": "nope", "date": "2024-06-01"}) == "unknown_band"


def test_rest_and_mcp_serve_it(tiny_store: Any, ctx: ServiceContext, clearing_cell: str) -> None:
    t = _a_day_with_a_season_before(_clear_points(ctx, clearing_cell))
    args = {"cell": clearing_cell, "band": "ndvi", "date": _day(t).isoformat()}
    client = TestClient(create_app(tiny_store.data), raise_server_exceptions=False)
    resp = client.post("/v1/compare_same_doy", json=args)
    assert resp.status_code == 200, resp.text
    assert verify_answer(resp.json()).ok

    async def main() -> None:
        async with Client(build_server(tiny_store.data)) as mcp:
            got = await mcp.call_tool("earthmem_compare_same_doy", args)
            assert not got.is_error
            assert verify_answer(json.loads(json.dumps(got.structured_content))).ok

    anyio.run(main)
