"""Concurrent memory writes over HTTP are handled at once and share the store's group commit.

A server that ran write requests one after the other (a handler blocking the event loop, a
lock held across a request, a store opened per request) would still answer every write, just
serially; what tells it apart is that concurrent writes never meet in the store. Here another
connection holds the SQLite write lock, so the first write's transaction waits for it: a
server that handles requests concurrently has all the others queued behind it by then, and
the eight writes commit in at most two transactions.
"""

from __future__ import annotations

import sqlite3
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
