"""Real servers writing at once: `earthmem serve --workers 2` on SQLite, and two servers on one
PostgreSQL, each sent the same operation ids concurrently — every operation applied exactly once."""

from __future__ import annotations

import concurrent.futures
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from api.memory.auth import issue_token
from api.receipts import Signer
from store.memory import open_store
from store.memory.model import ItemFilter

REPO = Path(__file__).resolve().parents[3]


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def _serve(data: Path, memory_url: str, workers: int, log: Path) -> Iterator[str]:
    port = _port()
    env = {**os.environ, "PYTHONPATH": str(REPO), "EARTHMEM_MEMORY_URL": memory_url}
    cmd = [sys.executable, "-m", "cli.main", "serve", "--data", str(data), "--port", str(port)]
    cmd += ["--workers", str(workers), "--no-access-log"]
    with log.open("wb") as out:
        proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            assert proc.poll() is None, log.read_text()[-2000:]
            try:
                if httpx.get(url + "/healthz", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline, "server did not start"
            time.sleep(0.3)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()


def _data(tiny_store: Any, root: Path) -> Path:
    data = root / "data"
    data.mkdir()
    for name in ("cube.icechunk", "inventory", "knn"):
        (data / name).symlink_to(tiny_store.data / name, target_is_directory=True)
    (data / "sample").symlink_to(tiny_store.sample, target_is_directory=True)
    Signer.load_or_create(data)  # the servers share one receipt key, as replicas are given one
    return data


def _burst(urls: list[str], token: str, n_ops: int, tiny_store: Any) -> list[dict[str, Any]]:
    ev = tiny_store.event("flood")["centre"]

    def one(job: tuple[str, int]) -> dict[str, Any]:
        url, i = job
        body = {
            "type": "observation",
            "title": f"report {i}",
            "statement": "fields under water",
            "tags": ["flood"],
            "where": {"lat": ev["lat"], "lng": ev["lng"]},
            "operation_id": f"op-{i}",
        }
        headers = {"Authorization": f"Bearer {token}"}
        r = httpx.post(url + "/v1/memory_create", json=body, headers=headers, timeout=120)
        assert r.status_code == 200, r.text
        return dict(r.json()["result"])

    jobs = [(url, i) for i in range(n_ops) for url in urls for _ in range(2)]
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        return list(pool.map(one, jobs))


def _check_once(memory_url: str, project: str, answers: list[dict[str, Any]], n_ops: int) -> None:
    by_op: dict[str, set[str]] = {}
    for a in answers:
        by_op.setdefault(a["item"]["title"], set()).add(a["item"]["id"])
    assert len(by_op) == n_ops
    assert all(len(ids) == 1 for ids in by_op.values())  # every copy answered the same item
    assert sum(not a["replayed"] for a in answers) == n_ops  # exactly one applied per op
    store = open_store(memory_url)
    try:
        items = store.list_items(project, ItemFilter(), limit=200).items
        assert len(items) == n_ops
        history = store.history(project)
        assert [e.seq for e in history] == list(range(1, n_ops + 1))
    finally:
        store.close()


@pytest.mark.slow
def test_two_workers_on_sqlite_apply_each_operation_once(tiny_store: Any, tmp_path: Path) -> None:
    data = _data(tiny_store, tmp_path)
    url = f"sqlite:///{tmp_path / 'memory.sqlite'}"
    store = open_store(url)
    token = issue_token(store, "ranchi", ("read", "write"))[0]
    store.close()
    with _serve(data, url, 2, tmp_path / "serve.log") as api:
        answers = _burst([api], token, 6, tiny_store)
    _check_once(url, "ranchi", answers, 6)


@pytest.mark.slow
def test_two_servers_on_one_postgresql_apply_each_operation_once(
    tiny_store: Any, tmp_path: Path, postgres_url: str
) -> None:
    data = _data(tiny_store, tmp_path)
    store = open_store(postgres_url)
    token = issue_token(store, "ranchi", ("read", "write"))[0]
    store.close()
    with (
        _serve(data, postgres_url, 1, tmp_path / "a.log") as a,
        _serve(data, postgres_url, 1, tmp_path / "b.log") as b,
    ):
        answers = _burst([a, b], token, 6, tiny_store)
    _check_once(postgres_url, "ranchi", answers, 6)
