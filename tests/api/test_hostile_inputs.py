"""Inputs nobody here wrote: deep JSON on every route and transport, lines that are not JSON-RPC."""

from __future__ import annotations

import json
import os
import selectors
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from fastapi.testclient import TestClient
from mcp import Client
from mcp_types import TextContent

from api.dispatch import PRIMITIVES
from api.jsonbody import MAX_JSON_DEPTH, TooDeep, json_depth, load_json
from api.mcp_server import INTENT_TOOL, build_server
from api.rest import create_app
from tests.api.adapter_helpers import CELL_TOOL, FakeContext, registered_test_primitives

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def ctx() -> Iterator[FakeContext]:
    with registered_test_primitives():
        yield FakeContext()


@pytest.fixture
def client(ctx: FakeContext) -> TestClient:
    return TestClient(create_app(ctx), raise_server_exceptions=False)


def _nested(depth: int) -> str:
    return "[" * depth + "]" * depth


def test_json_depth_counts_without_recursing() -> None:
    assert json_depth(1) == 0
    assert json_depth({"a": [1, {"b": []}]}) == 4
    deep: Any = []
    for _ in range(50_000):  # far deeper than the interpreter could recurse
        deep = [deep]
    assert json_depth(deep) == MAX_JSON_DEPTH + 1  # stops counting past the limit
    with pytest.raises(TooDeep) as err:
        load_json(_nested(100_000))
    assert (err.value.code, err.value.status) == ("json_too_deep", 400)
    assert load_json(b'{"a": [[1, 2]]}') == {"a": [[1, 2]]}


@pytest.mark.parametrize("depth", [MAX_JSON_DEPTH + 1, 990, 100_000])
def test_deep_json_is_a_typed_400_on_every_post_route(client: TestClient, depth: int) -> None:
    routes = [f"/v1/{name}" for name in PRIMITIVES] + ["/v1/intent", "/v1/no_such_route"]
    body = '{"cell": ' + _nested(depth) + "}"
    for route in routes:
        for headers in ({"content-type": "application/json"}, {}):
            resp = client.post(route, content=body, headers=headers)
            assert resp.status_code == 400, (route, resp.text[:200])
            assert resp.json()["error"]["code"] == "json_too_deep", route


def test_deep_json_chunked_body_is_a_typed_400(client: TestClient) -> None:
    body = ('{"type": "did_change", "cell": ' + _nested(5000) + "}").encode()
    resp = client.post(
        "/v1/intent",
        content=iter([body[:100], body[100:]]),  # no Content-Length: streamed in chunks
        headers={"content-type": "application/json"},
    )
    assert resp.status_code == 400, resp.text[:200]
    assert resp.json()["error"]["code"] == "json_too_deep"


def test_nesting_within_the_bound_still_reaches_the_route(client: TestClient) -> None:
    resp = client.post(f"/v1/{CELL_TOOL}", json={"cell": json.loads(_nested(MAX_JSON_DEPTH - 1))})
    assert resp.status_code == 422, resp.text  # the model's answer, not the depth rule
    assert resp.json()["error"]["code"] == "invalid_argument"


def test_deep_tool_arguments_are_a_tool_error(ctx: FakeContext) -> None:
    async def main() -> None:
        with anyio.fail_after(20):
            async with Client(build_server(ctx)) as mcp:
                deep = json.loads(_nested(MAX_JSON_DEPTH + 5))
                for tool in (f"earthmem_{CELL_TOOL}", INTENT_TOOL):
                    result = await mcp.call_tool(tool, {"cell": deep})
                    assert result.is_error
                    assert result.structured_content is None
                    block = result.content[0]
                    assert isinstance(block, TextContent)
                    assert json.loads(block.text)["error"]["code"] == "json_too_deep"

    anyio.run(main)


class _Stdio:
    """``earthmem mcp`` in a subprocess, one JSON-RPC line at a time."""

    def __init__(self, data: Path) -> None:
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "cli.main", "mcp", "--data", str(data)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env=env,
        )
        self.selector = selectors.DefaultSelector()
        assert self.proc.stdout is not None
        self.selector.register(self.proc.stdout, selectors.EVENT_READ)

    def send(self, line: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(line.encode() + b"\n")
        self.proc.stdin.flush()

    def reply(self, wait: float = 60.0) -> dict[str, Any]:
        # A generous bound so a silent server fails the test instead of hanging it.
        assert self.selector.select(timeout=wait), "no reply from earthmem mcp"
        assert self.proc.stdout is not None
        return json.loads(self.proc.stdout.readline())

    def close(self) -> None:
        self.proc.kill()
        self.proc.wait(timeout=10)


def test_stdio_answers_every_line(tmp_path: Path) -> None:
    server = _Stdio(tmp_path)
    try:
        server.send(
            json.dumps(
                {
                    "jsonrpc": "2.0",
                    "id": 1,
                    "method": "initialize",
                    "params": {
                        "protocolVersion": "2025-06-18",
                        "capabilities": {},
                        "clientInfo": {"name": "test", "version": "0"},
                    },
                }
            )
        )
        assert server.reply()["result"]["serverInfo"]["name"] == "earthmem"
        server.send(json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"}))
        server.send("this is not json")
        garbage = server.reply()
        assert garbage["id"] is None
        assert garbage["error"]["code"] == -32700
        server.send("{" * 100_000)
        assert server.reply()["error"]["code"] == -32700
        deep = '{"jsonrpc": "2.0", "id": 7, "method": "tools/list", "params": {"x": %s}}'
        server.send(deep % _nested(250))  # JSON, but deeper than the SDK reads: id kept
        nested = server.reply()
        assert (nested["id"], nested["error"]["code"]) == (7, -32600)
        server.send(deep % _nested(5000))  # deeper than Python parses: a parse error
        too_deep = server.reply()
        assert (too_deep["id"], too_deep["error"]["code"]) == (None, -32700)
        server.send(json.dumps({"jsonrpc": "2.0", "id": 8}))  # neither request nor response
        shapeless = server.reply()
        assert (shapeless["id"], shapeless["error"]["code"]) == (8, -32600)
        server.send(json.dumps({"jsonrpc": "2.0", "id": 9, "method": "tools/list"}))
        listed = server.reply()
        assert listed["id"] == 9  # the session still works after the bad lines
        assert INTENT_TOOL in {t["name"] for t in listed["result"]["tools"]}
    finally:
        server.close()
