"""The MCP Inspector CLI writes and reads memories with a token, and is refused without one.

Over stdio (Inspector 0.15 and 2.12) the server's user is ``EARTHMEM_TOKEN`` in the
environment the Inspector starts ``earthmem mcp`` with; over streamable HTTP
(Inspector 2.12, the one whose CLI sends headers: 0.15's has no header option) each
request carries ``Authorization: Bearer ...``. Each path calls
``earthmem_memory_create`` then ``earthmem_memory_get`` on what it wrote, and a
call without a token answers a typed tool error (``isError``, ``token_missing``)
that stores nothing. The data directory is a throwaway one whose cube is the tiny
sample's (linked) and whose memory database is its own.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from api.context import ServiceContext
from api.memory.auth import issue_token
from tests.clients.conftest import Inspector, inspector, live_server
from tests.clients.inspector_checks import VERSIONS, first_json, run_client, stdio_target

pytestmark = pytest.mark.clients

PROJECT = "inspector"


@pytest.fixture(scope="module")
def memory_data(tiny_store: Any, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """A data directory with the tiny cube linked in, its own memory database and a token."""
    data = tmp_path_factory.mktemp("inspector_memory") / "data"
    data.mkdir()
    for name in ("cube.icechunk", "inventory", "knn"):
        if (tiny_store.data / name).exists():
            (data / name).symlink_to(tiny_store.data / name, target_is_directory=True)
    ctx = ServiceContext(data)
    token = issue_token(ctx.memory(), PROJECT, ("read", "write"))[0]
    ctx.memory().close()
    return data, token


@pytest.fixture(scope="module")
def memory_http(memory_data: tuple[Path, str]) -> Iterator[str]:
    with live_server(memory_data[0], 1) as base:
        yield base + "/mcp"


def _create_args(client: Inspector, title: str) -> list[str]:
    args = ["--method", "tools/call", "--tool-name", "earthmem_memory_create"]
    # a decision needs no place: every argument is a string or an array, which both
    # Inspector versions turn into JSON from the tool's input schema
    for pair in (
        "type=decision",
        f"title={title}",
        "statement=memories written by an outside MCP client carry the caller's token",
        'tags=["inspector", "auth"]',
    ):
        args += ["--tool-arg", pair]
    return args


def _answer(out: str) -> dict[str, Any]:
    result = first_json(out)
    assert not result.get("isError"), out[-3000:]
    answer = json.loads(result["content"][0]["text"])
    assert isinstance(answer, dict)
    return answer


def _error(out: str) -> dict[str, Any]:
    result = first_json(out)
    assert result.get("isError") is True, out[-3000:]
    error = json.loads(result["content"][0]["text"])["error"]
    assert isinstance(error, dict)
    return error


def _write_read_refuse(
    client: Inspector, with_token: list[str], without_token: list[str], tmp: Path, title: str
) -> None:
    code, out = run_client(client, with_token, _create_args(client, title), tmp)
    assert code == 0, out[-3000:]
    created = _answer(out)["result"]["item"]
    assert created["title"] == title
    assert created["id"].startswith("mem_")

    get = ["--method", "tools/call", "--tool-name", "earthmem_memory_get"]
    code, out = run_client(client, with_token, [*get, "--tool-arg", f"id={created['id']}"], tmp)
    assert code == 0, out[-3000:]
    got = _answer(out)["result"]["item"]
    assert (got["id"], got["title"], got["version"]) == (created["id"], title, created["version"])

    _, out = run_client(client, without_token, _create_args(client, title + " (anonymous)"), tmp)
    error = _error(out)
    assert error["code"] == "token_missing"
    _, out = run_client(client, without_token, [*get, "--tool-arg", f"id={created['id']}"], tmp)
    assert _error(out)["code"] == "token_missing"


def _titles(data: Path) -> list[str]:
    store = ServiceContext(data).memory()
    try:
        return sorted(e.change["item"]["title"] for e in store.history(PROJECT) if e.item_id)
    finally:
        store.close()


@pytest.mark.parametrize("version", VERSIONS)
def test_memory_tools_over_stdio_with_earthmem_token(
    version: str, memory_data: tuple[Path, str], tmp_path: Path
) -> None:
    data, token = memory_data
    client = inspector(version)
    plain = stdio_target(client, data)
    with_token = ["-e", f"EARTHMEM_TOKEN={token}", *plain]
    title = f"stdio write by inspector {version}"
    _write_read_refuse(client, with_token, plain, tmp_path, title)
    titles = _titles(data)
    assert title in titles  # stored once, and the anonymous call stored nothing
    assert titles.count(title) == 1
    assert not any("anonymous" in t for t in titles)


def test_memory_tools_over_http_with_authorization_header(
    memory_http: str, memory_data: tuple[Path, str], tmp_path: Path
) -> None:
    data, token = memory_data
    client = inspector("2.12")
    plain = [memory_http, "--transport", "http"]
    with_token = [*plain, "--header", f"Authorization: Bearer {token}"]
    title = "http write by inspector 2.12"
    _write_read_refuse(client, with_token, plain, tmp_path, title)
    titles = _titles(data)
    assert titles.count(title) == 1
    assert not any("anonymous" in t for t in titles)
