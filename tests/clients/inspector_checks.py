"""What the MCP Inspector CLI tests run and check, shared by their modules (one per
transport and concern, so pytest-xdist spreads them over the workers).

For each client and transport: list the tools, call a good tool (the client validates its
structured content against the tool's output schema) and a bad one, whose error code and
message must reach the client's output; then the agent's loop (locate, read_cell, fact,
verify_receipt, and by name read_cells), each with a bad call and its error code.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from api.dispatch import core_primitives
from api.mcp_server import INTENT_TOOL
from store import address
from tests.clients.conftest import ROOT, Inspector, server_env

__all__ = [
    "VERSIONS",
    "check_loop",
    "check_tools",
    "first_json",
    "memory_tools",
    "run_client",
    "stdio_target",
]

VERSIONS = ("0.15", "2.12")


def run_client(client: Inspector, target: list[str], args: list[str], tmp: Path) -> tuple[int, str]:
    env = {**server_env(), "MCP_CATALOG_PATH": str(tmp / "catalog.json"), "HOME": str(tmp)}
    proc = subprocess.run(
        [*client.argv, *target, *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=180,  # a bound for a client that hangs, not a speed goal
        stdin=subprocess.DEVNULL,
    )
    return proc.returncode, proc.stdout + proc.stderr


def first_json(output: str) -> dict[str, Any]:
    """The first JSON document the client printed."""
    start = output.index("{")
    doc, _ = json.JSONDecoder().raw_decode(output[start:])
    assert isinstance(doc, dict)
    return doc


def stdio_target(client: Inspector, data: Path) -> list[str]:
    # 2.12 starts the server with a clean environment: pass the source tree explicitly.
    return [
        "-e",
        f"PYTHONPATH={ROOT}",
        sys.executable,
        "-m",
        "cli.main",
        "mcp",
        "--data",
        str(data),
    ]


def check_tools(client: Inspector, target: list[str], tmp: Path, cell: str) -> None:
    code, out = run_client(client, target, ["--method", "tools/list"], tmp)
    assert code == 0, out[-3000:]
    names = {t["name"] for t in first_json(out)["tools"]}
    # the lean list: the core set and the router; trajectory is not listed
    assert names == {f"earthmem_{p}" for p in core_primitives()} | {INTENT_TOOL}
    assert "earthmem_trajectory" not in names

    good = ["--method", "tools/call", "--tool-name", "earthmem_read_cell"]
    good += ["--tool-arg", f"cell={cell}"]
    code, out = run_client(client, target, good, tmp)
    assert code == 0, out[-3000:]
    result = first_json(out)
    assert not result.get("isError"), out[-3000:]
    answer = json.loads(result["content"][0]["text"])
    assert answer["cell"] == cell
    assert answer["receipt"]["signature"]

    if client.name == "inspector-0.15":
        # 0.15 calls a tool tools/list left out by name (2.12 refuses tools it was not shown)
        unlisted = ["--method", "tools/call", "--tool-name", "earthmem_trajectory"]
        unlisted += ["--tool-arg", f"cell={cell}", "--tool-arg", "band=ndvi"]
        code, out = run_client(client, target, unlisted, tmp)
        assert code == 0, out[-3000:]
        result = first_json(out)
        assert not result.get("isError"), out[-3000:]
        assert json.loads(result["content"][0]["text"])["cell"] == cell

    code, out = run_client(
        client, target, ["--method", "tools/call", "--tool-name", INTENT_TOOL], tmp
    )
    assert code == 0, out[-3000:]  # the needs_intent_type envelope fits IntentAnswer's schema

    bad = ["--method", "tools/call", "--tool-name", "earthmem_read_cell"]
    bad += ["--tool-arg", "cell=zz.top"]
    code, out = run_client(client, target, bad, tmp)
    assert "output schema" not in out, out[-3000:]
    result = first_json(out)
    assert result["isError"] is True, out[-3000:]
    error = json.loads(result["content"][0]["text"])["error"]
    assert error["code"] == "invalid_cell"
    assert "zz.top" in error["message"]


def _call(
    client: Inspector, target: list[str], tmp: Path, tool: str, **args: Any
) -> tuple[int, dict[str, Any], str]:
    """Call a tool with JSON-encoded arguments: exit code, the result document, the output."""
    call = ["--method", "tools/call", "--tool-name", tool]
    for k, v in args.items():
        call += ["--tool-arg", f"{k}={v if isinstance(v, str) else json.dumps(v)}"]
    code, out = run_client(client, target, call, tmp)
    assert "output schema" not in out, out[-3000:]
    return code, first_json(out), out


def _answer(client: Inspector, target: list[str], tmp: Path, tool: str, **args: Any) -> Any:
    code, result, out = _call(client, target, tmp, tool, **args)
    assert code == 0, out[-3000:]
    assert not result.get("isError"), out[-3000:]
    return json.loads(result["content"][0]["text"])


def _error(client: Inspector, target: list[str], tmp: Path, tool: str, **args: Any) -> Any:
    _, result, out = _call(client, target, tmp, tool, **args)
    assert result.get("isError") is True, out[-3000:]
    return json.loads(result["content"][0]["text"])["error"]


def check_loop(client: Inspector, target: list[str], tmp: Path, cell: str) -> None:
    """The agent's loop through the client: locate, read, cite (fact), verify, with bad calls.

    locate, read_cell, fact and verify_receipt are in the lean tools/list (both clients);
    read_cells is not: 2.12 refuses it, 0.15 calls it by name but sends its list arguments
    as strings (it converts arguments by the schemas of listed tools only), so its call is
    the bad one; the good calls of read_cells are the Python MCP SDK's (tests/api/loop)."""
    geo = address.decode(cell)
    loc = _answer(client, target, tmp, "earthmem_locate", lat=geo.lat, lng=geo.lng)
    assert loc["cell"] == cell
    assert len(loc["neighbours"]) == 8
    # every scalar band (0.15 sends an argument whose schema has no plain `type` as a string)
    read = _answer(client, target, tmp, "earthmem_read_cell", cell=cell)
    ndvi = next(v for v in read["values"] if v["band"] == "indices.ndvi")
    fid = ndvi["fact_id"]
    assert isinstance(fid, str)
    assert fid.startswith("f2:")
    # the fact resolves in the server's process (a fresh one per call over stdio)
    fact = _answer(client, target, tmp, "earthmem_fact", fact_id=fid)
    assert fact["fact"]["fact_id"] == fid
    assert fact["current_holds"] is True
    assert fact["fact"]["value"] == ndvi["value"]
    err = _error(client, target, tmp, "earthmem_fact", fact_id="f2:nope")
    assert err["code"] == "invalid_fact_id", err
    ok = _answer(client, target, tmp, "earthmem_verify_receipt", answer=read)
    assert ok["valid"] is True, ok
    assert ok["signed_by_this_server"] is True
    err = _error(client, target, tmp, "earthmem_verify_receipt", answer={"cell": cell})
    assert err["code"] == "invalid_answer", err
    if client.name == "inspector-0.15":
        values = [{**v, "value": -0.5} if v is ndvi else v for v in read["values"]]
        bad = _answer(
            client, target, tmp, "earthmem_verify_receipt", answer={**read, "values": values}
        )
        assert bad["valid"] is False
        assert bad["reason"] != "ok"
        # 0.15 calls read_cells by name, but converts the arguments only of listed tools:
        # the cells arrive as one string, and the error says which field is wrong
        err = _error(client, target, tmp, "earthmem_read_cells", cells=[cell], bands=["ndvi"])
        assert err["code"] == "invalid_argument", err
        assert {e["loc"][0] for e in err["details"]["errors"]} == {"cells", "bands"}


MEMORY_CALLS = (
    ("earthmem_recall", ["query=embankment breached"]),
    ("earthmem_memory_neighbors", ["id=place:1258526"]),  # Ranchi: the gazetteer's, no manifest
    ("earthmem_memory_relations", ["id=place:1258526"]),
)


def memory_tools(client: Inspector, target: list[str], tmp: Path, with_token: bool) -> None:
    # 2.12 calls only tools tools/list names (the lean list has recall, not the entity tools);
    # 0.15 calls any tool by name
    calls = MEMORY_CALLS if client.name == "inspector-0.15" else MEMORY_CALLS[:1]
    for tool, tool_args in calls:
        call = ["--method", "tools/call", "--tool-name", tool]
        for a in tool_args:
            call += ["--tool-arg", a]
        code, out = run_client(client, target, call, tmp)
        assert "output schema" not in out, out[-3000:]
        result = first_json(out)
        assert "content" in result, out[-3000:]
        answer = json.loads(result["content"][0]["text"])
        if with_token:
            assert code == 0, out[-3000:]
            assert not result.get("isError"), out[-3000:]
            assert answer["receipt"]["signature"], tool
            if tool == "earthmem_recall":
                assert [h["item"]["title"] for h in answer["hits"]] == ["Embankment breached"]
        else:
            assert result["isError"] is True, out[-3000:]
            assert answer["error"]["code"] == "token_missing", (tool, answer)
