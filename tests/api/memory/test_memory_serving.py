"""Serving memory writes: concurrent HTTP writes share the store's group commit; the warm-up
loads the memory backend.

A server that ran write requests one after the other (a handler blocking the event loop, a
lock held across a request, a store opened per request) would still answer every write, just
serially; what tells it apart is that concurrent writes never meet in the store. Here another
connection holds the SQLite write lock, so the first write's transaction waits for it: a
server that handles requests concurrently has all the others queued behind it by then, and
the eight writes commit in at most two transactions.
"""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx

from api.context import ServiceContext
from api.memory.auth import issue_token
from api.receipts import Signer
from api.rest import create_app
from store.memory.sqlite import SqliteMemoryStore
from tests.api.adapter_helpers import UvicornThread

WRITERS = 8
REPO = Path(__file__).resolve().parents[3]


def _body(k: int) -> dict[str, Any]:
    return {
        "type": "observation",
        "title": f"water on the road #{k}",
        "statement": "the embankment road was under water",
        "tags": ["flood"],
        "where": {"lat": 23.3 + k * 1e-3, "lng": 85.3},
        "operation_id": f"http-concurrency-{k}",
    }


def test_concurrent_http_writes_share_one_group_commit(tmp_path: Path) -> None:
    db = tmp_path / "memory.sqlite"
    data = tmp_path / "data"
    data.mkdir()
    ctx = ServiceContext(data, signer=Signer.generate(), memory_url=f"sqlite:///{db}")
    store = ctx.memory()
    assert isinstance(store, SqliteMemoryStore)
    token = issue_token(store, "ranchi", ("read", "write"), actor="agent:test")[0]
    headers = {"Authorization": f"Bearer {token}"}
    before = store.group.stats()

    with UvicornThread(create_app(ctx, mount_mcp=False)) as url:
        clients = [httpx.Client(base_url=url, headers=headers, timeout=60) for _ in range(WRITERS)]
        holder = sqlite3.connect(db, isolation_level=None)
        holder.execute("BEGIN IMMEDIATE")  # another writer holds the database
        try:
            with ThreadPoolExecutor(WRITERS) as pool:
                sent = [
                    pool.submit(clients[k].post, "/v1/memory_create", json=_body(k))
                    for k in range(WRITERS)
                ]
                # Wait (bounded) until every write reached the store; a serial server never gets
                # past the first, which waits for the lock held here.
                deadline = time.monotonic() + 20
                while (
                    store.group.stats().submitted - before.submitted < WRITERS
                    and time.monotonic() < deadline
                ):
                    time.sleep(0.01)
                holder.execute("ROLLBACK")
                answers = [f.result() for f in sent]
        finally:
            holder.close()
            for client in clients:
                client.close()

    assert [a.status_code for a in answers] == [200] * WRITERS, [a.text for a in answers]
    ids = {a.json()["result"]["item"]["id"] for a in answers}
    assert len(ids) == WRITERS
    after = store.group.stats()
    assert after.writes - before.writes == WRITERS
    assert after.batches - before.batches <= 2, after  # serially: one transaction per write


def test_warm_up_loads_the_memory_backend_and_creates_no_database(tmp_path: Path) -> None:
    # In a fresh interpreter: this one has imported the backends already.
    data = tmp_path / "data"
    data.mkdir()
    script = (
        "import sys\n"
        "from api.context import ServiceContext\n"
        "from api.receipts import Signer\n"
        f"ctx = ServiceContext({str(data)!r}, signer=Signer.generate())\n"
        "assert 'store.memory.sqlite' not in sys.modules\n"
        "ctx.warm()\n"
        "assert 'store.memory.sqlite' in sys.modules\n"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    env.pop("EARTHMEM_MEMORY_URL", None)
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=REPO, env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert not (data / "memory.sqlite").exists()
