"""The MCP Inspector CLI calls the memory read tools (recall, and by name with 0.15 the entity
tools) with a token, and is refused without one (a typed ``token_missing`` tool error).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.clients.conftest import inspector, live_server
from tests.clients.inspector_checks import (
    VERSIONS,
    memory_tools,
    stdio_target,
)

pytestmark = pytest.mark.clients


@pytest.fixture
def memory(tiny_store: Any, tmp_path: Path) -> tuple[str, str]:
    """A memory database with one item near the flood event, and a token of its project."""
    from api.context import ServiceContext
    from api.dispatch import call_primitive
    from api.memory.auth import issue_token

    url = f"sqlite:///{tmp_path / 'memory.sqlite'}"
    ctx = ServiceContext(tiny_store.data, memory_url=url)
    token = issue_token(ctx.memory(), "clients", ("read", "write"), actor="agent:clients")[0]
    centre = tiny_store.event("flood")["centre"]
    args = {
        "type": "observation",
        "title": "Embankment breached",
        "statement": "The river embankment breached after the storm.",
        "tags": ["flood"],
        "where": {"lat": float(centre["lat"]), "lng": float(centre["lng"])},
    }
    call_primitive(ctx, "memory_create", args, token=token)
    ctx.memory().close()
    return url, token


@pytest.mark.parametrize("with_token", [True, False], ids=["token", "no-token"])
@pytest.mark.parametrize("version", VERSIONS)
def test_memory_tools_over_stdio(
    version: str, with_token: bool, data_dir: Path, memory: tuple[str, str], tmp_path: Path
) -> None:
    client = inspector(version)
    url, token = memory
    env = ["-e", f"EARTHMEM_MEMORY_URL={url}"]
    if with_token:
        env += ["-e", f"EARTHMEM_TOKEN={token}"]
    target = stdio_target(client, data_dir)
    memory_tools(client, [*env, *target], tmp_path, with_token)


@pytest.mark.parametrize("with_token", [True, False], ids=["token", "no-token"])
def test_memory_tools_over_http(
    with_token: bool, data_dir: Path, memory: tuple[str, str], tmp_path: Path
) -> None:
    client = inspector("2.12")  # 0.15's CLI sends no headers: the token cannot reach HTTP
    url, token = memory
    with live_server(data_dir, 1, {"EARTHMEM_MEMORY_URL": url}) as base:
        target = [base + "/mcp", "--transport", "http"]
        if with_token:
            target += ["--header", f"Authorization: Bearer {token}"]
        memory_tools(client, target, tmp_path, with_token)
