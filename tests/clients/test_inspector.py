"""The official MCP Inspector CLI (0.15 and 2.12) against ``earthmem mcp`` over stdio.

What each run checks: tests/clients/inspector_checks.py (HTTP: test_inspector_http.py).
"""

from __future__ import annotations

import os
import subprocess
import sys
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


@pytest.mark.parametrize("version", VERSIONS)
def test_agent_loop_over_stdio(
    version: str, data_dir: Path, tiny_store: Any, tmp_path: Path
) -> None:
    client = inspector(version)
    target = stdio_target(client, data_dir)
    check_loop(client, target, tmp_path, clearing_cell(tiny_store.manifest))


def test_ci_runs_every_client() -> None:
    """Under CI=true nothing here may be skipped for want of an install."""
    if os.environ.get("CI") != "true":
        pytest.skip("only under CI=true")
    for version in VERSIONS:
        inspector(version)  # fails the run when a client is missing


def test_full_matrix_names_name_tests_that_exist() -> None:
    """Every id CI leaves to ``make clients-test`` is a test this directory collects (a
    renamed test or parameter would otherwise run in CI again, or a stale id hide nothing)."""
    from tests.clients.conftest import CLIENTS, FULL_MATRIX_ONLY, ROOT

    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "--collect-only",
            str(CLIENTS),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    ).stdout
    collected = {line.split("tests/clients/", 1)[1] for line in out.splitlines() if "::" in line}
    assert len(collected) > len(FULL_MATRIX_ONLY)
    assert not FULL_MATRIX_ONLY - collected, sorted(FULL_MATRIX_ONLY - collected)
