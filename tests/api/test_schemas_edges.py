"""Published schemas as strict as the validation: cell pattern, typed bbox, strict ints, one tslot rule."""

from __future__ import annotations

import random
import re
from typing import Any

import pytest
from fastapi.testclient import TestClient

from api.dispatch import PRIMITIVES, parse_args
from api.errors import ApiError
from api.intent import IntentRequest
from api.rest import create_app
from store import address
from store.errors import InvalidCell
from store.tslot import MAX_DAY_SLOT
from tests.api.adapter_helpers import FakeContext

CELL = address.encode(23.36, 85.33)


def _error(name: str, args: dict[str, Any]) -> dict[str, Any]:
    with pytest.raises(ApiError) as err:
        parse_args(name, args)
    return {"code": err.value.code, **err.value.details}


def test_strings_are_not_ints_and_ints_are_not_bools() -> None:
    assert parse_args("find_similar", {"key": CELL, "k": 10}).k == 10  # type: ignore[attr-defined]
    err = _error("find_similar", {"key": CELL, "k": "10"})
    assert err["code"] == "invalid_argument"
    assert err["errors"][0]["loc"] == ["k"]
    assert err["errors"][0]["type"] == "int_type"
    assert _error("area_over_time", {"bbox": [1, 2, 3, 4], "chart": 1})["code"] == (
        "invalid_argument"
    )
    # An int is still a float.
    assert parse_args("ask", {"description": "water?", "lat": 23, "lng": 85})


@pytest.mark.parametrize("bad", [-1, MAX_DAY_SLOT + 1, 2**63, 2**64])
def test_one_range_rule_for_every_tslot(bad: int) -> None:
    claim = {"band": "indices.ndvi", "op": "gt", "value": 0.4}
    for args in (
        {"cell": CELL, "claim": {**claim, "tslot": bad}},
        {"cell": CELL, "claim": {**claim, "window": [0, bad]}},
    ):
        err = _error("confirm", args)
        assert err["code"] == "invalid_argument", err
        assert err["errors"][0]["type"] in ("greater_than_equal", "less_than_equal")
    err = _error("did_change", {"cell": CELL, "band": "ndvi", "window": [bad, 5]})
    assert err["code"] == "invalid_argument"
    assert parse_args("confirm", {"cell": CELL, "claim": {**claim, "tslot": MAX_DAY_SLOT}})


def test_the_cell_pattern_fits_every_cell_and_the_validation_still_decides() -> None:
    pattern = re.compile(address.CELL64_PATTERN)
    rng = random.Random(0)
    points = [(90.0, 0.0), (-90.0, 0.0), (0.0, 180.0), (0.0, -180.0)] + [
        (rng.uniform(-90, 90), rng.uniform(-180, 180)) for _ in range(2000)
    ]
    for lat, lng in points:
        assert pattern.match(address.encode(lat, lng))
    assert not pattern.match("zz.top")
    assert not pattern.match(CELL + ".baba")
    # Fits the pattern but names no geo cell: the store's invalid_cell, not a pattern error.
    assert pattern.match("baba.baba.baba.baba")
    with pytest.raises(InvalidCell):
        address.parse_cell("baba.baba.baba.baba")


def test_openapi_publishes_the_real_constraints() -> None:
    spec = TestClient(create_app(FakeContext())).get("/openapi.json").json()
    schemas = spec["components"]["schemas"]
    for name in ("DidChangeIn", "TrajectoryIn", "ConfirmIn"):
        assert schemas[name]["properties"]["cell"]["pattern"] == address.CELL64_PATTERN
    for name in ("AreaOverTimeIn", "AreaIn"):
        bbox = schemas[name]["properties"]["bbox"]
        kinds = {alt.get("type") for alt in bbox["anyOf"]}
        assert kinds == {"object", "array", "null"}
        box = next(alt for alt in bbox["anyOf"] if alt.get("type") == "object")
        assert box["properties"]["min_lat"] == {"type": "number", "minimum": -90, "maximum": 90}
    claim = schemas["Claim"]["properties"]["tslot"]["anyOf"][0]
    assert (claim["minimum"], claim["maximum"]) == (0, MAX_DAY_SLOT)
    intent = IntentRequest.model_json_schema()["properties"]
    assert intent["cell"]["pattern"] == address.CELL64_PATTERN
    assert set(PRIMITIVES) <= {op.removeprefix("/v1/") for op in spec["paths"]}


def test_intent_envelope_lists_the_type_errors() -> None:
    client = TestClient(create_app(FakeContext()))
    resp = client.post("/v1/intent", json={"cell": 5, "k": "10", "window": [1, "x"]})
    assert resp.status_code == 200
    body = resp.json()
    assert body["status"] == "needs_intent_type"
    locs = {tuple(e["loc"]) for e in body["type_errors"]}
    assert {("cell",), ("k",), ("window", 1)} <= locs
    clean = client.post("/v1/intent", json={"cell": CELL}).json()
    assert clean["type_errors"] == []
