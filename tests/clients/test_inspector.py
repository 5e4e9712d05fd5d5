"""The official MCP Inspector CLI (0.15 and 2.12) against earthmem over stdio and HTTP.

For each client and transport (stdio; HTTP with 1 worker, stateful; HTTP with 2
workers, stateless): list the tools, call a good tool (the client validates its
structured content against the tool's output schema) and a bad one, whose
error code and message must reach the client's output.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from api.dispatch import core_primitives
from api.mcp_server import INTENT_TOOL
from tests.api.adapter_helpers import clearing_cell
from tests.clients.conftest import ROOT, Inspector, inspector, live_server, server_env

pytestmark = pytest.mark.clients

VERSIONS = ("0.15", "2.12")


@pytest.fixture(scope="module", params=[1, 2], ids=["http-1-worker", "http-2-workers"])
def http_server(request: pytest.FixtureRequest, data_dir: Path) -> Iterator[str]:
    with live_server(data_dir, request.param) as base:
        yield base + "/mcp"


def _run(client: Inspector, target: list[str], args: list[str], tmp: Path) -> tuple[int, str]:
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


def _first_json(output: str) -> dict[str, Any]:
    """The first JSON document the client printed."""
    start = output.index("{")
    doc, _ = json.JSONDecoder().raw_decode(output[start:])
    assert isinstance(doc, dict)
    return doc


def _stdio_target(client: Inspector, data: Path) -> list[str]:
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


def _check(client: Inspector, target: list[str], tmp: Path, cell: str) -> None:
    code, out = _run(client, target, ["--method", "tools/list"], tmp)
    assert code == 0, out[-3000:]
    names = {t["name"] for t in _first_json(out)["tools"]}
    # the lean list: the core set and the router; trajectory, not listed, is called below
    assert names == {f"earthmem_{p}" for p in core_primitives()} | {INTENT_TOOL}
    assert "earthmem_trajectory" not in names

    good = ["--method", "tools/call", "--tool-name", "earthmem_trajectory"]
    good += ["--tool-arg", f"cell={cell}", "--tool-arg", "band=ndvi"]
    code, out = _run(client, target, good, tmp)
    assert code == 0, out[-3000:]
    result = _first_json(out)
    assert not result.get("isError"), out[-3000:]
    answer = json.loads(result["content"][0]["text"])
    assert answer["cell"] == cell
    assert answer["receipt"]["signature"]

    code, out = _run(client, target, ["--method", "tools/call", "--tool-name", INTENT_TOOL], tmp)
    assert code == 0, out[-3000:]  # the needs_intent_type envelope fits IntentAnswer's schema

    bad = ["--method", "tools/call", "--tool-name", "earthmem_trajectory"]
    bad += ["--tool-arg", "cell=zz.top", "--tool-arg", "band=ndvi"]
    code, out = _run(client, target, bad, tmp)
    assert "output schema" not in out, out[-3000:]
    result = _first_json(out)
    assert result["isError"] is True, out[-3000:]
    error = json.loads(result["content"][0]["text"])["error"]
    assert error["code"] == "invalid_cell"
    assert "zz.top" in error["message"]


@pytest.mark.parametrize("version", VERSIONS)
def test_inspector_over_stdio(
    version: str, data_dir: Path, tiny_store: Any, tmp_path: Path
) -> None:
    client = inspector(version)
    _check(client, _stdio_target(client, data_dir), tmp_path, clearing_cell(tiny_store.manifest))


@pytest.mark.parametrize("version", VERSIONS)
def test_inspector_over_http(
    version: str, http_server: str, tiny_store: Any, tmp_path: Path
) -> None:
    client = inspector(version)
    target = [http_server, "--transport", "http"]
    _check(client, target, tmp_path, clearing_cell(tiny_store.manifest))


def test_ci_runs_every_client() -> None:
    """Under CI=true nothing here may be skipped for want of an install."""
    if os.environ.get("CI") != "true":
        pytest.skip("only under CI=true")
    for version in VERSIONS:
        inspector(version)  # fails the run when a client is missing
