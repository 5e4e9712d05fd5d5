"""The official MCP Inspector CLI (0.15 and 2.12) against ``earthmem serve`` over streamable HTTP,
with 1 worker (stateful sessions) and 2 workers (stateless).

What each run checks: tests/clients/inspector_checks.py (stdio: test_inspector.py).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.api.adapter_helpers import clearing_cell
from tests.clients.conftest import inspector, live_server
from tests.clients.inspector_checks import (
    VERSIONS,
    check_loop,
    check_tools,
)

pytestmark = pytest.mark.clients


@pytest.fixture(scope="module", params=[1, 2], ids=["http-1-worker", "http-2-workers"])
def http_server(request: pytest.FixtureRequest, data_dir: Path) -> Iterator[str]:
    with live_server(data_dir, request.param) as base:
        yield base + "/mcp"


@pytest.mark.parametrize("version", VERSIONS)
def test_inspector_over_http(
    version: str, http_server: str, tiny_store: Any, tmp_path: Path
) -> None:
    client = inspector(version)
    target = [http_server, "--transport", "http"]
    check_tools(client, target, tmp_path, clearing_cell(tiny_store.manifest))


@pytest.mark.parametrize("version", VERSIONS)
def test_agent_loop_over_http(
    version: str, http_server: str, tiny_store: Any, tmp_path: Path
) -> None:
    client = inspector(version)
    target = [http_server, "--transport", "http"]
    check_loop(client, target, tmp_path, clearing_cell(tiny_store.manifest))
