"""The official MCP Inspector CLI (0.15 and 2.12) against ``earthmem mcp`` over stdio.

What each run checks: tests/clients/inspector_checks.py (HTTP: test_inspector_http.py).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from tests.api.adapter_helpers import clearing_cell
from tests.clients.conftest import inspector
from tests.clients.inspector_checks import (
    VERSIONS,
    check_loop,
    check_tools,
    stdio_target,
)

pytestmark = pytest.mark.clients


@pytest.mark.parametrize("version", VERSIONS)
def test_inspector_over_stdio(
    version: str, data_dir: Path, tiny_store: Any, tmp_path: Path
) -> None:
    client = inspector(version)
    target = stdio_target(client, data_dir)
    check_tools(client, target, tmp_path, clearing_cell(tiny_store.manifest))
    check_loop(client, target, tmp_path, clearing_cell(tiny_store.manifest))


def test_ci_runs_every_client() -> None:
    """Under CI=true nothing here may be skipped for want of an install."""
    if os.environ.get("CI") != "true":
        pytest.skip("only under CI=true")
    for version in VERSIONS:
        inspector(version)  # fails the run when a client is missing


def test_full_matrix_names_name_tests_that_exist() -> None:
    """Every id CI leaves to ``make clients-test`` names a test and parameters that exist
    (a renamed test would otherwise run in CI again, or a stale id hide nothing)."""
    from tests.clients.conftest import CLIENTS, FULL_MATRIX_ONLY

    for entry in FULL_MATRIX_ONLY:
        path, _, rest = entry.partition("::")
        name, _, params = rest.partition("[")
        text = (CLIENTS / path).read_text()
        assert f"def {name}(" in text, entry
        for part in params.rstrip("]").split("-"):
            assert part in VERSIONS or part in text, entry
