"""REST's fast route answers as FastAPI's route does (canonical CBOR's fast path: tests/store/test_facts.py)."""

from __future__ import annotations

import copy
import json

import pytest
from fastapi.testclient import TestClient

from api import receipts
from api.receipts import verify_answer
from api.rest import create_app
from store import address


def _strip_volatile(doc: dict) -> dict:
    doc = copy.deepcopy(doc)
    for key in ("request_id", "served_at", "signature", "answer_digest"):
        doc["receipt"].pop(key, None)
    return doc


@pytest.fixture(scope="module")
def client(tiny_store):
    with TestClient(create_app(tiny_store.data, mount_mcp=False)) as c:
        yield c


def test_fast_route_and_fastapi_route_answer_the_same(client, tiny_store) -> None:
    ev = tiny_store.event("forest_clearing")
    cell = address.encode(ev["centre"]["lat"], ev["centre"]["lng"])
    traj = client.post("/v1/trajectory", json={"cell": cell, "band": "indices.ndvi"}).json()
    clear = [p["tslot"] for p in traj["points"] if p["clear"]]
    body = json.dumps({"cell": cell, "band": "indices.ndvi", "window": [clear[0], clear[-1]]})
    fast = client.post("/v1/did_change", content=body, headers={"content-type": "application/json"})
    # a content type the fast path does not take goes through FastAPI's own route
    slow = client.post(
        "/v1/did_change", content=body, headers={"content-type": "application/json; charset=utf-8"}
    )
    assert fast.status_code == slow.status_code == 200
    a, b = fast.json(), slow.json()
    assert verify_answer(a).ok
    assert verify_answer(b).ok
    assert _strip_volatile(a) == _strip_volatile(b)
    bad = json.dumps({"cell": "nope", "band": "indices.ndvi", "window": [1, 2]})
    e1 = client.post("/v1/did_change", content=bad, headers={"content-type": "application/json"})
    e2 = client.post(
        "/v1/did_change", content=bad, headers={"content-type": "application/json; charset=utf-8"}
    )
    assert e1.status_code == e2.status_code == 422
    assert e1.json() == e2.json()
    assert e1.json()["error"]["code"] == "invalid_cell"


def test_signer_caches_are_consistent(tmp_path) -> None:
    s = receipts.Signer.load_or_create(tmp_path)
    assert s.key_id == receipts.key_id_of(s.public_key)


def test_light_public_calls_run_on_the_loop_once_settled(tiny_store, monkeypatch) -> None:
    """A light public primitive answers on the event loop after its first (threaded) answer,
    with the same answer; heavy, memory and writing primitives never do, nor does anything
    when the data root is object storage (network reads stay off the loop)."""
    app = create_app(tiny_store.data, mount_mcp=False)
    fast = app.fast
    assert fast is not None
    assert {"did_change", "read_cell", "trajectory"} <= fast.may_inline
    assert not {"area_over_time", "find_similar", "recall", "memory_create"} & fast.may_inline
    ev = tiny_store.event("forest_clearing")
    cell = address.encode(ev["centre"]["lat"], ev["centre"]["lng"])
    body = {"cell": cell, "band": "indices.ndvi"}
    with TestClient(app) as c:
        first = c.post("/v1/trajectory", json=body)
        assert "trajectory" in fast.settled
        again = c.post("/v1/trajectory", json=body)  # on the loop now
        bad = c.post("/v1/trajectory", json={**body, "cell": "nope"})
    assert first.status_code == again.status_code == 200
    assert verify_answer(again.json()).ok
    assert _strip_volatile(first.json()) == _strip_volatile(again.json())
    assert bad.status_code == 422
    assert bad.json()["error"]["code"] == "invalid_cell"
    monkeypatch.setenv("EARTHMEM_OBJECT_STORE", "s3://bucket/prefix")
    assert create_app(tiny_store.data, mount_mcp=False).fast.may_inline == set()
