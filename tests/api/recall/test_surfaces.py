"""recall on every surface: REST, MCP (read-only annotations), the intent router, the CLI."""

from __future__ import annotations

import json
from typing import Any

import anyio
import pytest
from mcp import Client

from api.dispatch import run_intent
from api.mcp_server import build_server
from api.receipts import verify_answer
from tests.api.recall.conftest import Memory


def test_rest_route_needs_a_token(mem: Memory) -> None:
    from fastapi.testclient import TestClient

    from api.rest import create_app

    flood = mem.write("fields under water", "the paddy fields were flooded")
    with TestClient(create_app(mem.ctx, mount_mcp=False)) as client:
        anon = client.post("/v1/recall", json={"query": "paddy"})
        assert anon.status_code == 401
        assert anon.json()["error"]["code"] == "token_missing"
        auth = {"Authorization": f"Bearer {mem.token}"}
        got = client.post("/v1/recall", json={"query": "paddy", "explain": True}, headers=auth)
        assert got.status_code == 200, got.text
        body = got.json()
        assert [h["id"] for h in body["hits"]] == [flood["id"]]
        assert "_meta" in body
        assert verify_answer(body).ok
        bad = client.post("/v1/recall", json={"query": "x", "scopes": ["mars"]}, headers=auth)
        assert bad.status_code == 422
        assert bad.json()["error"]["code"] == "unknown_scope"
        assert "/v1/recall" in client.get("/openapi.json").json()["paths"]


def test_mcp_tool_is_read_only_and_answers(mem: Memory) -> None:
    flood = mem.write("fields under water", "the paddy fields were flooded")

    async def main() -> None:
        with anyio.fail_after(30):
            async with Client(build_server(mem.ctx, token=mem.token), mode="legacy") as client:
                tools = {t.name: t for t in (await client.list_tools()).tools}
                tool = tools["earthmem_recall"]
                assert tool.annotations is not None
                assert tool.annotations.read_only_hint is True
                assert tool.annotations.destructive_hint is False
                assert "SEED-FINDER" in (tool.description or "")
                assert "weak_match" in (tool.description or "")
                props = tool.input_schema["properties"]
                assert {
                    "query",
                    "near",
                    "asOf",
                    "asOfEventUID",
                    "maxTokens",
                    "minConfidence",
                } <= set(props)
                result = await client.call_tool("earthmem_recall", {"query": "paddy"})
                assert not result.is_error
                text = result.content[0].text  # type: ignore[union-attr]
                assert json.loads(text)["hits"][0]["id"] == flood["id"]

    anyio.run(main)


def test_intent_row_runs_recall(mem: Memory) -> None:
    flood = mem.write("fields under water", "the paddy fields were flooded")
    out = run_intent(mem.ctx, {"type": "recall", "query": "paddy", "limit": 3}, token=mem.token)
    assert out["plan"] == [{"primitive": "recall", "args": {"query": "paddy", "limit": 3}}]
    assert out["result"]["hits"][0]["id"] == flood["id"]


def test_cli_verb(mem: Memory, capsys: pytest.CaptureFixture[str], tiny_store: Any) -> None:
    from cli.main import main

    flood = mem.write("fields under water", "the paddy fields were flooded")
    base = ["--data", str(mem.ctx.data_dir), "--memory-url", mem.ctx.memory_url]
    lat, lng = mem.centre
    near = ["--near", f"{lat},{lng}", "--radius-m", "500"]
    assert main(["recall", "paddy", *near, "--token", mem.token, "--compact", *base]) == 0
    answer = json.loads(capsys.readouterr().out)
    assert [h["id"] for h in answer["hits"]] == [flood["id"]]
    assert answer["resolved"]["near"]["radius_m"] == 500
    assert main(["recall", "paddy", *base, "--token", ""]) == 2
    assert "token_missing" in capsys.readouterr().err
    assert main(["recall", "paddy", "--near", "Kanke Lake", "--radius-m", "1e9",
                 "--token", mem.token, *base]) == 2  # fmt: skip
    assert "radius_too_large" in capsys.readouterr().err
