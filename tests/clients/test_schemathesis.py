"""schemathesis against a live ``earthmem serve``: no 5xx, every response fits the OpenAPI schema.

Bounded by ``EARTHMEM_FUZZ_SECONDS`` (``.ci/run`` gives it a couple of minutes;
``make fuzz`` runs longer). Without that variable and outside CI it is skipped.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from api.memory.auth import issue_token
from store.memory import open_store
from tests.clients.conftest import live_server

pytestmark = pytest.mark.fuzz

CI_SECONDS = 120


def _budget() -> int:
    seconds = os.environ.get("EARTHMEM_FUZZ_SECONDS")
    if seconds:
        return int(seconds)
    if os.environ.get("CI") == "true":
        return CI_SECONDS
    pytest.skip("set EARTHMEM_FUZZ_SECONDS (or run `make fuzz`) for the schemathesis run")


def _schemathesis() -> str:
    exe = Path(sys.executable).with_name("schemathesis")
    found = str(exe) if exe.is_file() else shutil.which("schemathesis")
    if found is None:
        message = "schemathesis is not installed (it is in the dev extra of pyproject.toml)"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)
    return found


MEMORY_ROUTES = {
    "/v1/recall": {"query": "flood"},
    "/v1/memory_neighbors": {"id": "place:1258526"},
    "/v1/memory_relations": {"id": "place:1258526"},
}


def _post(url: str, body: dict[str, object], token: str | None) -> tuple[int, dict[str, object]]:
    headers = {"Content-Type": "application/json"}
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    req = urllib.request.Request(url, json.dumps(body).encode(), headers, method="POST")
    try:
        with urllib.request.urlopen(req, timeout=60) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def _memory_routes_need_a_token(base: str, token: str) -> None:
    """The recall and entity routes are in the schema schemathesis reads; with the token
    they answer, without one a typed 401."""
    with urllib.request.urlopen(f"{base}/openapi.json", timeout=60) as resp:
        paths = json.loads(resp.read())["paths"]
    for route, body in MEMORY_ROUTES.items():
        assert route in paths, route
        status, answer = _post(base + route, body, token)
        assert status == 200, (route, answer)
        status, answer = _post(base + route, body, None)
        assert status == 401, (route, answer)
        assert answer["error"]["code"] == "token_missing", (route, answer)  # type: ignore[index]


@pytest.mark.parametrize("workers", [1, 2], ids=["1-worker", "2-workers"])
def test_generated_requests_get_no_5xx_and_fit_the_schema(
    workers: int, data_dir: Path, tmp_path: Path
) -> None:
    budget = _budget()
    exe = _schemathesis()
    # the memory tools too: a throwaway database and a token of its own project
    memory_url = f"sqlite:///{tmp_path / 'memory.sqlite'}"
    store = open_store(memory_url)
    token = issue_token(store, "fuzz", ("read", "write"))[0]
    store.close()
    env = {"EARTHMEM_MEMORY_URL": memory_url}
    with live_server(data_dir, workers, env) as base:
        _memory_routes_need_a_token(base, token)
        proc = subprocess.run(
            [
                exe,
                "run",
                f"{base}/openapi.json",
                "--header",
                f"Authorization: Bearer {token}",
                "--checks",
                "not_a_server_error,response_schema_conformance",
                "--max-time",
                str(budget // 2),  # the two worker counts share the budget
                "--request-timeout",
                "60",
                "--report",
                "junit",
                "--report-dir",
                str(tmp_path),
            ],
            capture_output=True,
            text=True,
            cwd=tmp_path,
            timeout=budget + 300,  # a bound for a hung run, not a speed goal
        )
    summary = proc.stdout[-4000:]
    print(summary)
    assert proc.returncode == 0, summary + proc.stderr[-2000:]
    assert "generated" in summary
