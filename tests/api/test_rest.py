"""The REST adapter: routes per primitive, error bodies, limits, receipts, MCP mount."""

from __future__ import annotations

import gc
import json
from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient

from api.dispatch import PRIMITIVES
from api.receipts import verify_answer
from api.rest import create_app
from store import address
from tests.api.adapter_helpers import (
    CELL_TOOL,
    CHART_TOOL,
    PNG,
    FakeContext,
    bracket,
    clearing_cell,
    registered_test_primitives,
)

CELL = address.encode(23.36, 85.33)


@pytest.fixture
def ctx() -> FakeContext:
    return FakeContext()


@pytest.fixture
def client(ctx: FakeContext) -> Iterator[TestClient]:
    with registered_test_primitives():
        yield TestClient(create_app(ctx), raise_server_exceptions=False)


def _error(resp: Any, status: int, code: str) -> dict[str, Any]:
    assert resp.status_code == status, resp.text
    assert resp.headers["content-type"].startswith("application/json")
    body = resp.json()
    assert set(body) == {"error"}
    assert body["error"]["code"] == code, body
    assert isinstance(body["error"]["message"], str)
    assert body["error"]["message"]
    return body["error"]


# --------------------------------------------------------------------------- OpenAPI and routes


def test_openapi_has_stable_operation_ids_one_route_per_primitive(client: TestClient) -> None:
    spec = client.get("/openapi.json").json()
    ops = {
        (path, method): op["operationId"]
        for path, item in spec["paths"].items()
        for method, op in item.items()
    }
    for name in PRIMITIVES:
        assert ops[(f"/v1/{name}", "post")] == name
    assert ops[("/v1/intent", "post")] == "intent"
    assert ops[("/.well-known/earthmem.json", "get")] == "well_known"
    assert ops[("/healthz", "get")] == "healthz"
    assert ops[("/v1/charts/{chart_id}.png", "get")] == "get_chart"
    route = spec["paths"][f"/v1/{CELL_TOOL}"]["post"]
    assert route["summary"] == "Decode a cell (test)"
    assert route["tags"] == ["primitives"]
    body_ref = route["requestBody"]["content"]["application/json"]["schema"]["$ref"]
    assert body_ref.endswith("/DecodeIn")
    ok_ref = route["responses"]["200"]["content"]["application/json"]["schema"]["$ref"]
    assert ok_ref.endswith("/DecodeOut")
    assert route["responses"]["422"]["content"]["application/json"]["schema"]["$ref"].endswith(
        "/ErrorBody"
    )
    intent_body = spec["paths"]["/v1/intent"]["post"]["requestBody"]["content"]["application/json"]
    assert {"type", "cell", "band", "window", "key", "geometry"} <= set(
        intent_body["schema"]["properties"]
    )


def test_primitive_answer_is_the_signed_dict_and_verifies(client: TestClient) -> None:
    resp = client.post(f"/v1/{CELL_TOOL}", json={"cell": CELL})
    assert resp.status_code == 200
    doc = json.loads(resp.text)
    assert doc["cell"] == CELL
    assert abs(doc["lat"] - 23.36) < 1e-4
    assert verify_answer(doc).ok
    # Saved to disk and reloaded, still verifies; one changed value fails.
    reloaded = json.loads(json.dumps(doc, indent=1))
    assert verify_answer(reloaded).ok
    reloaded["lat"] += 1e-9
    assert not verify_answer(reloaded).ok


def test_healthz_and_well_known(client: TestClient, ctx: FakeContext) -> None:
    health = client.get("/healthz").json()
    assert health["status"] == "ok"
    assert CELL_TOOL in health["primitives"]
    doc = client.get("/.well-known/earthmem.json").json()
    assert doc["keys"][0]["public_key"] == ctx.signer.public_key.hex()
    assert doc["keys"][0]["key_id"] == ctx.signer.key_id
    assert doc["version"]
    names = {p["name"]: p for p in doc["primitives"]}
    assert names[CELL_TOOL]["rest"] == f"/v1/{CELL_TOOL}"
    assert names[CELL_TOOL]["mcp_tool"] == f"earthmem_{CELL_TOOL}"
    assert "did_change" in doc["intent_types"]
    assert doc["mcp"] == "/mcp"


def test_chart_route_serves_png_from_an_answer(client: TestClient) -> None:
    answer = client.post(f"/v1/{CHART_TOOL}", json={}).json()
    resp = client.get(f"/v1/charts/{answer['chart_id']}.png")
    assert resp.status_code == 200
    assert resp.headers["content-type"] == "image/png"
    assert resp.content == PNG
    _error(client.get("/v1/charts/0123456789abcdef.png"), 404, "chart_not_found")


# --------------------------------------------------------------------------- errors and limits


def test_bad_cell_is_invalid_cell_with_field_errors(client: TestClient) -> None:
    err = _error(client.post(f"/v1/{CELL_TOOL}", json={"cell": "not-a-cell"}), 422, "invalid_cell")
    assert err["details"]["errors"][0]["loc"] == ["body", "cell"]


def test_argument_errors_are_invalid_argument(client: TestClient) -> None:
    err = _error(client.post(f"/v1/{CELL_TOOL}", json={}), 422, "invalid_argument")
    assert err["details"]["errors"][0]["loc"] == ["body", "cell"]
    _error(
        client.post(f"/v1/{CELL_TOOL}", json={"cell": CELL, "bogus": 1}), 422, "invalid_argument"
    )
    _error(client.post(f"/v1/{CELL_TOOL}", json=[CELL]), 422, "invalid_argument")


def test_malformed_json_is_422(client: TestClient) -> None:
    headers = {"content-type": "application/json"}
    err = _error(
        client.post(f"/v1/{CELL_TOOL}", content=b'{"cell": ', headers=headers),
        422,
        "invalid_argument",
    )
    assert "JSON" in err["message"]
    err = _error(
        client.post("/v1/intent", content=b"{nope", headers=headers), 422, "invalid_argument"
    )
    assert "JSON" in err["message"]


def test_domain_error_keeps_code_status_and_details(client: TestClient) -> None:
    err = _error(
        client.post(f"/v1/{CELL_TOOL}", json={"cell": CELL, "missing": True}), 404, "no_observation"
    )
    assert err["details"] == {"nearest_before": 5}


def test_oversized_body_is_413_declared_or_streamed(client: TestClient) -> None:
    big = json.dumps({"cell": CELL, "pad": "x" * 300_000}).encode()
    _error(
        client.post(f"/v1/{CELL_TOOL}", content=big, headers={"content-type": "application/json"}),
        413,
        "payload_too_large",
    )

    def chunks() -> Iterator[bytes]:  # no Content-Length: chunked transfer
        for _ in range(40):
            yield b" " * 10_000

    _error(
        client.post(
            f"/v1/{CELL_TOOL}", content=chunks(), headers={"content-type": "application/json"}
        ),
        413,
        "payload_too_large",
    )
    _error(
        client.post("/v1/intent", content=big, headers={"content-type": "application/json"}),
        413,
        "payload_too_large",
    )


def test_unknown_route_and_method_are_json(client: TestClient) -> None:
    err = _error(client.get("/v1/nothing_here"), 404, "not_found")
    assert "/v1/nothing_here" in err["message"]
    _error(client.post("/v2/did_change", json={}), 404, "not_found")
    _error(client.get(f"/v1/{CELL_TOOL}"), 405, "method_not_allowed")


# --------------------------------------------------------------------------- intent over REST


def test_intent_envelope_for_missing_and_unknown_type(client: TestClient) -> None:
    resp = client.post("/v1/intent", json={"cell": CELL})
    assert resp.status_code == 200
    env = resp.json()
    assert env["status"] == "needs_intent_type"
    assert env["valid_types"] == [
        "where_is",
        "what_is_here",
        "is_like",
        "did_change",
        "find_like",
        "confirm",
        "ask",
        "area_over_time",
        "recall",
        "read_cell",
        "read_area",
        "locate",
        "coverage",
        "compare_same_doy",
        "fact",
        "verify_receipt",
    ]
    assert env["intents"]["did_change"]["needs"] == ["cell", "band", "window"]
    assert env["intents"]["area_over_time"]["one_of"] == ["geometry", "bbox", "areas"]
    assert env["ignored_fields"] == ["cell"]
    env = client.post("/v1/intent", json={"type": "teleport"}).json()
    assert env["status"] == "needs_intent_type"
    assert env["received_type"] == "teleport"


def test_intent_missing_fields_error(client: TestClient) -> None:
    err = _error(
        client.post("/v1/intent", json={"type": "did_change", "cell": CELL}), 422, "missing_fields"
    )
    assert err["details"]["missing"] == ["band", "window"]


# --------------------------------------------------------------------------- MCP mount


def test_mcp_route_needs_the_lifespan_and_answers_with_it(ctx: FakeContext) -> None:
    with registered_test_primitives():
        app = create_app(ctx, host="0.0.0.0")  # not loopback: no Host allow-list for "testserver"
        plain = TestClient(app)
        _error(plain.post("/mcp", json={}), 503, "mcp_not_running")
        headers = {"accept": "application/json, text/event-stream"}
        init = {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "initialize",
            "params": {
                "protocolVersion": "2025-06-18",
                "capabilities": {},
                "clientInfo": {"name": "test", "version": "0"},
            },
        }
        for _ in range(2):  # the lifespan can start twice (a fresh session manager each time)
            with TestClient(app) as live:
                resp = live.post("/mcp", json=init, headers=headers)
                assert resp.status_code == 200, resp.text
                assert resp.headers.get("mcp-session-id")
                data = [ln for ln in resp.text.splitlines() if ln.startswith("data:")]
                result = json.loads(data[0][5:])["result"]
                assert result["serverInfo"]["name"] == "earthmem"


# --------------------------------------------------------------------------- real primitives (tiny sample)


@pytest.fixture(scope="module")
def real_client(request: pytest.FixtureRequest) -> TestClient:
    store = request.getfixturevalue("tiny_store")
    return TestClient(create_app(store.data), raise_server_exceptions=False)


def _signed(resp: Any) -> dict[str, Any]:
    assert resp.status_code == 200, resp.text
    doc = json.loads(resp.text)
    assert verify_answer(doc).ok
    return doc


def test_every_real_primitive_answers_with_a_verifying_receipt(
    real_client: TestClient, request: pytest.FixtureRequest
) -> None:
    store = request.getfixturevalue("tiny_store")
    cell = clearing_cell(store.manifest)
    event = store.event("forest_clearing")
    traj = _signed(real_client.post("/v1/trajectory", json={"cell": cell, "band": "indices.ndvi"}))
    window = bracket(traj["valid_tslots"], event["start"])
    change = _signed(
        real_client.post(
            "/v1/did_change", json={"cell": cell, "band": "indices.ndvi", "window": window}
        )
    )
    assert change["significant"]
    assert change["delta"] < -0.3
    near = _signed(real_client.post("/v1/find_similar", json={"key": cell, "k": 5}))
    assert near["returned_k"] == 5
    assert cell not in {n["cell64"] for n in near["neighbours"]}
    other = near["neighbours"][0]["cell64"]
    _signed(real_client.post("/v1/is_like", json={"a": cell, "b": other}))
    verdict = _signed(
        real_client.post(
            "/v1/confirm",
            json={
                "cell": cell,
                "claim": {"band": "indices.ndvi", "op": "lt", "value": 0.4, "tslot": window[1]},
            },
        )
    )
    assert verdict["verdict"] == "true"
    area = _signed(
        real_client.post(
            "/v1/area_over_time",
            json={
                "geometry": event["geometry"],
                "start_date": "2024-01-01",
                "end_date": "2024-06-30",
                "max_scenes": 4,
            },
        )
    )
    png = real_client.get(f"/v1/charts/{area['chart_id']}.png")
    assert png.status_code == 200
    assert png.content.startswith(b"\x89PNG")
    assert {
        "did_change",
        "trajectory",
        "find_similar",
        "is_like",
        "confirm",
        "area_over_time",
    } <= set(PRIMITIVES)


def test_real_errors_have_codes(real_client: TestClient, request: pytest.FixtureRequest) -> None:
    cell = clearing_cell(request.getfixturevalue("tiny_store").manifest)
    _error(
        real_client.post(
            "/v1/did_change", json={"cell": "bad", "band": "indices.ndvi", "window": [1, 2]}
        ),
        422,
        "invalid_cell",
    )
    traj = _signed(real_client.post("/v1/trajectory", json={"cell": cell, "band": "indices.ndvi"}))
    t0, t1 = traj["valid_tslots"][-2:]
    gap = [t0 + 1, t1]  # no overpass on t0 + 1: an error naming the nearest valid tslots
    err = real_client.post(
        "/v1/did_change", json={"cell": cell, "band": "indices.ndvi", "window": gap}
    ).json()
    assert err["error"]["code"] == "no_observation"
    assert err["error"]["details"]["nearest_before"] == t0
    assert real_client.post("/v1/find_similar", json={"key": cell, "k": 5000}).status_code == 422


def test_warm_app_opens_the_reader_and_inventory_at_start(
    request: pytest.FixtureRequest, tmp_path: Any
) -> None:
    from api.context import ServiceContext
    from api.receipts import Signer

    store = request.getfixturevalue("tiny_store")
    ctx = ServiceContext(store.data, signer=Signer.generate())
    assert ctx._reader is None
    address._alphabet.cache_clear()  # as in a fresh process (other tests built it)
    app = create_app(ctx, mount_mcp=False, warm=True)
    gc.unfreeze()
    with TestClient(app) as live:
        app.state.warmup.join(timeout=120)
        assert not app.state.warmup.is_alive()
        assert gc.get_freeze_count() > 0  # what start-up built is frozen
        gc.unfreeze()  # (this process goes on to other tests)
        assert ctx._reader is not None  # opened before any request
        assert ctx._reader._inventory is not None  # and its snapshot's inventory
        assert address._alphabet.cache_info().currsize == 1  # cell names, built before a request
        assert live.get("/openapi.json").status_code == 200  # and it serves
    # a data directory with nothing in it: warming fails quietly, queries report it
    empty = ServiceContext(tmp_path, signer=Signer.generate())
    assert empty.warm() is False
    assert ServiceContext(store.data, signer=Signer.generate()).warm() is True
