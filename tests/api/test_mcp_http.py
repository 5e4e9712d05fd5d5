"""MCP over HTTP against clients that misbehave: sessions left open, streams that cannot be."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest
from fastapi.testclient import TestClient

from api.mcp_http import SessionTable
from api.rest import create_app
from tests.api.adapter_helpers import FakeContext, UvicornThread, registered_test_primitives

HEADERS = {"accept": "application/json, text/event-stream", "content-type": "application/json"}
INIT = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-06-18",
        "capabilities": {},
        "clientInfo": {"name": "test", "version": "0"},
    },
}


@pytest.fixture
def ctx() -> Iterator[FakeContext]:
    with registered_test_primitives():
        yield FakeContext()


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_session_table_evicts_the_clients_oldest_idle_session_first() -> None:
    clock = Clock()
    table = SessionTable(per_client=2, total=3, idle_seconds=100, clock=clock)
    table.opened("a1", "alice")
    clock.now = 1
    table.opened("a2", "alice")
    clock.now = 2
    table.opened("b1", "bob")
    table.enter("a1")  # a1 busy (request in flight / stream open), a2 idle
    clock.now = 3
    assert table.to_evict("alice") == (["a2"], True)  # alice at her bound: her oldest idle
    table.leave("a1")
    clock.now = 4
    # carol: the table is full; the least recently used idle session of anyone goes.
    assert table.to_evict("carol") == (["a2"], True)
    table.enter("a1")
    table.enter("a2")
    table.enter("b1")
    assert table.to_evict("carol") == ([], False)  # all busy: refused, nothing closed
    assert table.to_evict("alice") == ([], False)


def test_session_table_forgets_sessions_the_sdk_reaped() -> None:
    clock = Clock()
    table = SessionTable(per_client=5, total=5, idle_seconds=10, clock=clock)
    table.opened("old", "x")
    table.opened("busy", "x")
    table.enter("busy")
    clock.now = 11
    assert table.expired() == ["old"]
    assert set(table.sessions) == {"busy"}


def _initialize(http: httpx.Client) -> httpx.Response:
    return http.post("/mcp", headers=HEADERS, json=INIT)


def test_abandoned_sessions_never_lock_new_clients_out(ctx: FakeContext) -> None:
    table = SessionTable(per_client=3, total=4, idle_seconds=600)
    app = create_app(ctx, mcp_sessions=table)
    with UvicornThread(app) as base, httpx.Client(base_url=base, timeout=10) as http:
        ids = []
        for _ in range(10):  # clients that never send DELETE
            resp = _initialize(http)
            assert resp.status_code == 200, resp.text
            ids.append(resp.headers["mcp-session-id"])
        assert len(table.sessions) == 3
        assert set(table.sessions) == set(ids[-3:])  # the newest kept, the oldest closed
        first = http.post(
            "/mcp",
            headers={**HEADERS, "mcp-session-id": ids[0], "mcp-protocol-version": "2025-06-18"},
            json={"jsonrpc": "2.0", "id": 2, "method": "tools/list"},
        )
        assert first.status_code == 404  # evicted: the client must initialize again
        last = http.post(
            "/mcp",
            headers={**HEADERS, "mcp-session-id": ids[-1], "mcp-protocol-version": "2025-06-18"},
            json={"jsonrpc": "2.0", "id": 2, "method": "tools/list"},
        )
        assert last.status_code == 200


def test_stateless_mcp_has_no_stream_to_hold_open(ctx: FakeContext) -> None:
    with TestClient(create_app(ctx, mcp_stateless=True), base_url="http://127.0.0.1:8000") as http:
        for method in ("GET", "DELETE"):
            resp = http.request(method, "/mcp", headers=HEADERS)
            assert resp.status_code == 405, resp.text
            assert resp.headers["allow"] == "POST"
            assert resp.json()["error"]["code"] == "method_not_allowed"
        # POST still answers.
        resp = http.post("/mcp", headers=HEADERS, json=INIT)
        assert resp.status_code == 200


def test_405_answers_carry_allow(ctx: FakeContext) -> None:
    with TestClient(create_app(ctx), raise_server_exceptions=False) as http:
        for method, path, allowed in (
            ("GET", "/v1/intent", {"POST"}),
            ("PUT", "/mcp", {"GET", "POST", "DELETE"}),
            ("POST", "/healthz", {"GET"}),
        ):
            resp = http.request(method, path)
            assert resp.status_code == 405, (method, path)
            assert allowed <= {m.strip() for m in resp.headers["allow"].split(",")}
            assert resp.json()["error"]["code"] == "method_not_allowed"
