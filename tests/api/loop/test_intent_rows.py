"""The intent router's rows for the agent's loop, run on the tiny sample, and the old rows beside them."""

from __future__ import annotations

import json
from typing import Any

import pytest

from api.context import ServiceContext
from api.dispatch import run, run_intent
from api.errors import ApiError
from api.intent import INTENT_TYPES
from api.receipts import verify_answer
from store import address


def _intent(ctx: ServiceContext, payload: dict[str, Any]) -> dict[str, Any]:
    out = run_intent(ctx, payload)
    assert out["status"] == "answered", out
    return json.loads(json.dumps(out))


def test_new_rows_are_in_the_table() -> None:
    for name in ("read_cell", "read_area", "locate", "coverage", "compare_same_doy", "fact"):
        assert name in INTENT_TYPES
    assert "verify_receipt" in INTENT_TYPES
    # the first rows keep their place
    assert INTENT_TYPES[:8] == (
        "where_is",
        "what_is_here",
        "is_like",
        "did_change",
        "find_like",
        "confirm",
        "ask",
        "area_over_time",
    )


def test_what_is_the_ndvi_here_runs_read_cell(ctx: ServiceContext, clearing_cell: str) -> None:
    out = _intent(
        ctx,
        {"type": "read_cell", "cell": clearing_cell, "bands": ["ndvi"], "window": [1, 2]},
    )
    assert out["plan"] == [
        {"primitive": "read_cell", "args": {"cell": clearing_cell, "bands": ["ndvi"]}}
    ]
    assert out["ignored_fields"] == ["window"]
    direct = run(ctx, "read_cell", {"cell": clearing_cell, "bands": ["ndvi"]})
    assert out["result"]["values"][0]["fact_id"] == direct.values[0].fact_id
    assert verify_answer(out["result"]).ok


def test_locate_coverage_and_season_rows(ctx: ServiceContext, clearing_cell: str) -> None:
    geo = address.decode(clearing_cell)
    loc = _intent(ctx, {"type": "locate", "lat": geo.lat, "lng": geo.lng})
    assert loc["plan"][0]["primitive"] == "locate"
    assert loc["result"]["cell"] == clearing_cell
    cov = _intent(ctx, {"type": "coverage", "cell": clearing_cell, "band": "ndvi"})
    assert cov["plan"][0]["primitive"] == "coverage"
    assert verify_answer(cov["result"]).ok
    tr = run(ctx, "trajectory", {"cell": clearing_cell, "band": "ndvi"})
    day = [p for p in tr.points if p.clear][-1].date
    season = _intent(
        ctx, {"type": "compare_same_doy", "cell": clearing_cell, "band": "ndvi", "date": day}
    )
    assert season["plan"][0]["primitive"] == "compare_same_doy"
    assert verify_answer(season["result"]).ok


def test_read_area_row_needs_a_place_and_a_band(ctx: ServiceContext, clearing_cell: str) -> None:
    geo = address.decode(clearing_cell)
    tr = run(ctx, "trajectory", {"cell": clearing_cell, "band": "ndvi"})
    t = [p for p in tr.points if p.clear][-1].tslot
    d = 0.001
    box = [geo.lat - d, geo.lng - d, geo.lat + d, geo.lng + d]
    out = _intent(ctx, {"type": "read_area", "bbox": box, "band": "ndvi", "tslot": t})
    assert out["plan"][0]["primitive"] == "read_area"
    assert out["result"]["n_clear"] > 0
    with pytest.raises(ApiError) as info:
        run_intent(ctx, {"type": "read_area", "band": "ndvi", "tslot": t})
    assert info.value.code == "missing_fields"
    assert info.value.details["missing"] == ["geometry | bbox"]


def test_cite_and_verify_rows(ctx: ServiceContext, clearing_cell: str) -> None:
    read = _intent(ctx, {"type": "read_cell", "cell": clearing_cell, "bands": ["ndvi"]})
    fid = read["result"]["values"][0]["fact_id"]
    fact = _intent(ctx, {"type": "fact", "fact_id": fid})
    assert fact["plan"][0]["primitive"] == "fact"
    assert fact["result"]["fact"]["fact_id"] == fid
    assert fact["result"]["current_holds"]
    ok = _intent(ctx, {"type": "verify_receipt", "answer": read["result"]})
    assert ok["result"]["valid"]
    tampered = json.loads(json.dumps(read["result"]))
    tampered["values"][0]["value"] = 0.123
    bad = _intent(ctx, {"type": "verify_receipt", "answer": tampered})
    assert not bad["result"]["valid"]
    with pytest.raises(ApiError) as info:
        run_intent(ctx, {"type": "fact", "fact_id": "f2:nope"})
    assert info.value.code in {"invalid_fact_id", "fact_not_found", "invalid_argument"}


def test_old_rows_still_route_their_payloads(ctx: ServiceContext, clearing_cell: str) -> None:
    tr = run(ctx, "trajectory", {"cell": clearing_cell, "band": "ndvi"})
    window = [tr.valid_tslots[0], tr.valid_tslots[-1]]
    dc = _intent(
        ctx,
        {"type": "did_change", "cell": clearing_cell, "band": "indices.ndvi", "window": window},
    )
    assert dc["plan"][0]["primitive"] == "did_change"
    assert dc["ignored_fields"] == []
    like = _intent(ctx, {"type": "find_like", "cell": clearing_cell, "k": 3, "bands": ["x"]})
    assert like["plan"][0]["primitive"] == "find_similar"
    assert like["ignored_fields"] == ["bands"]
    here = _intent(ctx, {"type": "what_is_here", "cell": clearing_cell, "date": "2024-01-01"})
    assert here["plan"][0]["primitive"] == "what_is_here"
    assert here["ignored_fields"] == ["date"]
    env = run_intent(ctx, {"cell": clearing_cell})
    assert env["status"] == "needs_intent_type"
    assert {"read_cell", "locate", "coverage", "fact"} <= set(env["intents"])
    assert env["intents"]["compare_same_doy"]["one_of"] == ["cell", "geometry", "bbox"]
