"""The MCP adapter: tools from the registry, structured answers, tool errors, transports."""

from __future__ import annotations

import base64
import json
import sys
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from mcp import Client, StdioServerParameters
from mcp_types import TextContent

from api.dispatch import PRIMITIVES
from api.mcp_server import INTENT_TOOL, build_server
from api.receipts import verify_answer
from api.rest import create_app
from store import address
from tests.api.adapter_helpers import (
    CELL_TOOL,
    CHART_TOOL,
    PNG,
    FakeContext,
    UvicornThread,
    bracket,
    clearing_cell,
    registered_test_primitives,
)

CELL = address.encode(23.36, 85.33)
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def ctx() -> Iterator[FakeContext]:
    with registered_test_primitives():
        yield FakeContext()


def _text(result: Any) -> str:
    block = result.content[0]
    assert isinstance(block, TextContent)
    return block.text


def _err(result: Any) -> dict[str, Any]:
    """The error body of a failed call: JSON text, and no structured content to mis-validate."""
    assert result.is_error
    assert result.structured_content is None
    return json.loads(_text(result))["error"]


def _with_client(
    ctx: FakeContext,
    body: Callable[[Client], Awaitable[None]],
    mode: str = "legacy",
    *,
    list_all: bool = False,
) -> None:
    """Run ``body`` against the server through an in-memory client session."""

    async def main() -> None:
        with anyio.fail_after(20):
            async with Client(build_server(ctx, list_all=list_all), mode=mode) as client:
                await body(client)

    anyio.run(main)


def test_tools_listed_with_schemas_and_read_only_annotations(ctx: FakeContext) -> None:
    async def body(client: Client) -> None:
        tools = {t.name: t for t in (await client.list_tools()).tools}
        expected = {f"earthmem_{name}" for name in PRIMITIVES} | {INTENT_TOOL}
        assert set(tools) == expected
        writes = {f"earthmem_{p.name}" for p in PRIMITIVES.values() if not p.read_only}
        assert writes == {
            f"earthmem_memory_{v}" for v in ("create", "update", "relate", "delete", "verify")
        }
        for name, tool in tools.items():
            ann = tool.annotations
            assert ann is not None
            # memory writes are not read-only (idempotent by operation_id); the rest are
            assert (ann.read_only_hint, ann.idempotent_hint, ann.open_world_hint) == (
                name not in writes,
                True,
                False,
            )
            assert tool.input_schema["type"] == "object"
            assert tool.output_schema is not None
            assert tool.output_schema["type"] == "object"
            assert tool.description
        decode = tools[f"earthmem_{CELL_TOOL}"]
        assert decode.input_schema["required"] == ["cell"]
        assert decode.input_schema["properties"]["cell"]["description"] == "cell64 to decode."
        assert {"cell", "lat", "lng", "receipt"} <= set((decode.output_schema or {})["properties"])
        intent = tools[INTENT_TOOL]
        assert "needs_intent_type" in (intent.description or "")
        assert {"type", "key", "window", "areas"} <= set(intent.input_schema["properties"])

    _with_client(ctx, body, list_all=True)  # every tool, as the tools primitive lists them


@pytest.mark.parametrize("mode", ["legacy", "auto"])
def test_call_answers_with_structured_signed_content(ctx: FakeContext, mode: str) -> None:
    async def body(client: Client) -> None:
        result = await client.call_tool(f"earthmem_{CELL_TOOL}", {"cell": CELL})
        assert not result.is_error
        doc = result.structured_content
        assert doc["cell"] == CELL
        assert verify_answer(json.loads(json.dumps(doc))).ok
        assert json.loads(_text(result)) == doc

    _with_client(ctx, body, mode)


def test_bad_input_is_a_tool_error_with_the_rest_code(ctx: FakeContext) -> None:
    async def body(client: Client) -> None:
        bad = await client.call_tool(f"earthmem_{CELL_TOOL}", {"cell": "zz.top"})
        assert bad.is_error
        assert _err(bad)["code"] == "invalid_cell"
        assert json.loads(_text(bad))["error"]["code"] == "invalid_cell"
        missing = await client.call_tool(f"earthmem_{CELL_TOOL}", {})
        assert missing.is_error
        assert _err(missing)["code"] == "invalid_argument"
        gone = await client.call_tool(f"earthmem_{CELL_TOOL}", {"cell": CELL, "missing": True})
        assert _err(gone) == {
            "code": "no_observation",
            "message": "nothing stored there",
            "details": {"nearest_before": 5},
        }
        unknown = await client.call_tool("earthmem_teleport", {})
        assert unknown.is_error
        assert _err(unknown)["code"] == "unknown_tool"

    _with_client(ctx, body)


def test_chart_comes_back_as_image_content(ctx: FakeContext) -> None:
    async def body(client: Client) -> None:
        result = await client.call_tool(f"earthmem_{CHART_TOOL}", {})
        assert not result.is_error
        images = [c for c in result.content if c.type == "image"]
        assert len(images) == 1
        assert images[0].mime_type == "image/png"
        assert base64.b64decode(images[0].data) == PNG

    _with_client(ctx, body)


def test_intent_tool_envelope_and_plan(ctx: FakeContext) -> None:
    async def body(client: Client) -> None:
        env = await client.call_tool(INTENT_TOOL, {"window": [1, 2]})
        assert not env.is_error
        assert env.structured_content["status"] == "needs_intent_type"
        assert env.structured_content["ignored_fields"] == ["window"]
        assert env.structured_content["intents"]["find_like"]["needs"] == ["key"]
        missing = await client.call_tool(INTENT_TOOL, {"type": "confirm", "cell": CELL})
        assert missing.is_error
        assert _err(missing)["code"] == "missing_fields"
        assert _err(missing)["details"]["missing"] == ["claim"]

    _with_client(ctx, body)


# --------------------------------------------------------------------------- transports


@pytest.mark.slow  # a subprocess: ~3-7 s of imports
def test_stdio_transport_lists_tools(tmp_path: Path) -> None:
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "cli.main", "mcp", "--data", str(tmp_path)],
        cwd=str(ROOT),
        env={"PYTHONPATH": str(ROOT)},
    )

    async def main() -> None:
        with anyio.fail_after(60):
            async with Client(params, mode="legacy") as client:
                names = {t.name for t in (await client.list_tools()).tools}
                assert INTENT_TOOL in names
                env = await client.call_tool(INTENT_TOOL, {})
                assert env.structured_content["status"] == "needs_intent_type"

    anyio.run(main)


def _sse_json(resp: httpx.Response) -> dict[str, Any]:
    if resp.headers["content-type"].startswith("application/json"):
        return resp.json()
    data = [ln[5:].strip() for ln in resp.text.splitlines() if ln.startswith("data:")]
    return json.loads(data[-1])


def test_streamable_http_on_the_rest_app_over_uvicorn(ctx: FakeContext) -> None:
    app = create_app(ctx)
    with UvicornThread(app) as base, httpx.Client(base_url=base, timeout=10) as http:
        headers = {"accept": "application/json, text/event-stream"}
        init = http.post(
            "/mcp",
            headers=headers,
            json={
                "jsonrpc": "2.0",
                "id": 1,
                "method": "initialize",
                "params": {
                    "protocolVersion": "2025-06-18",
                    "capabilities": {},
                    "clientInfo": {"name": "test", "version": "0"},
                },
            },
        )
        assert init.status_code == 200, init.text
        assert _sse_json(init)["result"]["serverInfo"]["name"] == "earthmem"
        session = {
            **headers,
            "mcp-session-id": init.headers["mcp-session-id"],
            "mcp-protocol-version": "2025-06-18",
        }
        note = http.post(
            "/mcp", headers=session, json={"jsonrpc": "2.0", "method": "notifications/initialized"}
        )
        assert note.status_code == 202
        listed = http.post(
            "/mcp", headers=session, json={"jsonrpc": "2.0", "id": 2, "method": "tools/list"}
        )
        assert listed.status_code == 200
        names = {t["name"] for t in _sse_json(listed)["result"]["tools"]}
        assert {f"earthmem_{CELL_TOOL}", INTENT_TOOL} <= names
        # REST answers on the same server.
        assert http.get("/healthz").json()["status"] == "ok"
        # A foreign Host header is refused (DNS-rebinding protection on loopback).
        evil = http.post("/mcp", headers={**headers, "host": "evil.example"}, json={})
        assert evil.status_code in (400, 403, 421)

        async def call() -> None:
            with anyio.fail_after(20):
                async with Client(f"{base}/mcp", mode="legacy") as client:
                    result = await client.call_tool(f"earthmem_{CELL_TOOL}", {"cell": CELL})
                    assert verify_answer(result.structured_content).ok

        anyio.run(call)


# --------------------------------------------------------------------------- real primitives (tiny sample)


@pytest.fixture(scope="module")
def store(request: pytest.FixtureRequest) -> Any:
    return request.getfixturevalue("tiny_store")


def test_real_tools_answer_over_an_in_memory_session(store: Any) -> None:
    from api.context import ServiceContext

    cell = clearing_cell(store.manifest)
    event = store.event("forest_clearing")

    async def main() -> None:
        with anyio.fail_after(60):
            async with Client(build_server(ServiceContext(store.data)), mode="legacy") as client:
                # The client validates each structured answer against the tool's output schema.
                traj = await client.call_tool(
                    "earthmem_trajectory", {"cell": cell, "band": "indices.ndvi"}
                )
                assert not traj.is_error
                window = bracket(traj.structured_content["valid_tslots"], event["start"])
                routed = await client.call_tool(
                    INTENT_TOOL,
                    {
                        "type": "did_change",
                        "cell": cell,
                        "band": "indices.ndvi",
                        "window": window,
                        "k": 3,
                    },
                )
                assert not routed.is_error
                answer = routed.structured_content
                assert answer["ignored_fields"] == ["k"]
                assert answer["result"]["significant"]
                assert answer["result"]["delta"] < -0.3
                assert verify_answer(json.loads(json.dumps(answer["result"]))).ok
                area = await client.call_tool(
                    "earthmem_area_over_time",
                    {
                        "geometry": event["geometry"],
                        "start_date": "2024-01-01",
                        "end_date": "2024-06-30",
                        "max_scenes": 4,
                    },
                )
                assert not area.is_error
                images = [c for c in area.content if c.type == "image"]
                assert len(images) == 1
                assert base64.b64decode(images[0].data).startswith(b"\x89PNG")
                assert verify_answer(area.structured_content).ok
                bad = await client.call_tool(
                    "earthmem_did_change",
                    {"cell": "nope", "band": "indices.ndvi", "window": [1, 2]},
                )
                assert bad.is_error
                assert _err(bad)["code"] == "invalid_cell"
                gap = await client.call_tool(
                    "earthmem_did_change",
                    {"cell": cell, "band": "indices.ndvi", "window": [window[0] + 1, window[1]]},
                )
                assert gap.is_error
                assert _err(gap)["code"] == "no_observation"
                near = await client.call_tool(
                    "earthmem_find_similar", {"cell64": cell, "k": 3, "mode": "hamming_then_rerank"}
                )
                assert not near.is_error
                assert near.structured_content["returned_k"] == 3

    anyio.run(main)
