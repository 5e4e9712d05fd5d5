"""read_area on the tiny sample: area_over_time's statistics for one overpass, sampling, errors."""

from __future__ import annotations

import json
from typing import Any

import pytest

from api.context import ServiceContext
from api.dispatch import PRIMITIVES, run
from api.errors import ApiError
from api.receipts import verify_answer


@pytest.fixture(scope="module")
def flood_series(ctx: ServiceContext, tiny_store: Any) -> Any:
    flood = tiny_store.event("flood")
    return run(
        ctx,
        "area_over_time",
        {
            "geometry": flood["geometry"],
            "start_date": "2024-07-01",
            "end_date": flood["end"],
            "index": "ndwi",
            "chart": False,
        },
    )


def test_same_statistics_and_fact_as_area_over_time(
    ctx: ServiceContext, tiny_store: Any, flood_series: Any
) -> None:
    geom = tiny_store.event("flood")["geometry"]
    area = flood_series.areas[0]
    scene = area.scenes[-1]
    ans = run(ctx, "read_area", {"geometry": geom, "band": "ndwi", "date": scene.date})
    assert ans.n_cells == area.n_cells
    assert not ans.sampled
    assert len(ans.cells) == ans.n_cells
    assert ans.stats is not None
    for k in ("mean", "std", "median", "p10", "p25", "p75", "p90"):
        assert ans.stats[k] == getattr(scene, k)
    assert ans.n_clear == scene.n_clear
    assert sum(c.clear for c in ans.cells) == scene.n_clear
    aot_fact = next(f for f in flood_series.facts if f.tslot == scene.tslot)
    assert ans.facts[0].fact_id == aot_fact.fact_id
    assert ans.sources == aot_fact.sources
    assert verify_answer(json.loads(json.dumps(ans.model_dump(mode="json")))).ok
    assert PRIMITIVES["read_area"].cost == "heavy"


def test_over_max_cells_lists_a_deterministic_sample(
    ctx: ServiceContext, tiny_store: Any, flood_series: Any
) -> None:
    geom = tiny_store.event("flood")["geometry"]
    t = flood_series.areas[0].scenes[0].tslot
    full = run(ctx, "read_area", {"geometry": geom, "band": "ndwi", "tslot": t})
    a = run(ctx, "read_area", {"geometry": geom, "band": "ndwi", "tslot": t, "max_cells": 7})
    b = run(ctx, "read_area", {"geometry": geom, "band": "ndwi", "tslot": t, "max_cells": 7})
    assert a.sampled
    assert len(a.cells) == 7
    assert "evenly spaced" in (a.sample_rule or "")
    assert [c.cell for c in a.cells] == [c.cell for c in b.cells]
    by_cell = {c.cell: c for c in full.cells}
    assert all(by_cell[c.cell] == c for c in a.cells)
    assert a.cells[0] == full.cells[0]
    assert a.cells[-1] == full.cells[-1]
    assert a.stats == full.stats  # the statistics use every cell


def _code(ctx: ServiceContext, args: dict[str, Any]) -> str:
    with pytest.raises(ApiError) as info:
        run(ctx, "read_area", args)
    return info.value.code


def test_bad_input_is_typed(ctx: ServiceContext, tiny_store: Any, flood_series: Any) -> None:
    geom = tiny_store.event("flood")["geometry"]
    t = flood_series.areas[0].scenes[0].tslot
    assert _code(ctx, {"geometry": geom, "band": "ndwi", "tslot": t - 1}) == "no_observation"
    assert _code(ctx, {"geometry": geom, "band": "ndwi"}) == "invalid_argument"
    assert _code(ctx, {"geometry": geom, "band": "nope", "tslot": t}) == "unknown_band"
    assert _code(ctx, {"band": "ndwi", "tslot": t}) == "invalid_geometry"
    assert _code(ctx, {"bbox": [0, 0, 10, 10], "band": "ndwi", "tslot": t}) == "area_too_large"
    assert _code(ctx, {"geometry": geom, "band": "ndwi", "tslot": t, "max_cells": 0}) == (
        "invalid_argument"
    )
    assert _code(ctx, {"geometry": geom, "band": "ndwi", "tslot": t, "max_cells": 5001}) == (
        "invalid_argument"
    )
