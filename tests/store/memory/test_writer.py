"""The group commit's connection (store.memory.writer): kept between SQLite batches,
replaced after a batch that failed outside its savepoints or after a fork; PostgreSQL
takes one from the pool for each batch."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from store.memory import open_store
from store.memory import writer as writer_module
from store.memory.chain import verify_chain
from store.memory.prepared import RawTx
from store.memory.sql import SqlMemoryStore
from tests.store.memory.items import meta, new_item, sign, verify


def _store(url: str) -> Iterator[SqlMemoryStore]:
    s = open_store(url)
    assert isinstance(s, SqlMemoryStore)
    yield s
    s.close()


@pytest.fixture
def sqlite_store(sqlite_url: str) -> Iterator[SqlMemoryStore]:
    yield from _store(sqlite_url)


@pytest.fixture
def postgres_store(postgres_url: str) -> Iterator[SqlMemoryStore]:
    yield from _store(postgres_url)


def _chain_verifies(store: SqlMemoryStore, project: str) -> None:
    report = verify_chain(store.history(project), verify_head=verify, require_signatures=True)
    assert report.ok, report.problems


def test_sqlite_batches_share_one_connection(sqlite_store: SqlMemoryStore) -> None:
    sqlite_store.create("p", new_item("one"), meta("op-1", "d1"), sign_head=sign)
    kept = sqlite_store._batch_conn.get()
    sqlite_store.create("p", new_item("two"), meta("op-2", "d2"), sign_head=sign)
    assert sqlite_store._batch_conn.get() is kept
    assert not kept.in_transaction()  # idle between batches: no read snapshot held
    assert sqlite_store.head("p").seq == 2


def test_a_failed_batch_replaces_the_connection(
    sqlite_store: SqlMemoryStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    sqlite_store.create("p", new_item("before"), meta("op-0", "d0"), sign_head=sign)
    kept = sqlite_store._batch_conn.get()

    def head_write_fails(self: RawTx, project: str, seq: int, head_hash: str) -> None:
        raise OSError("disk gone")  # outside every job's savepoint: the batch rolls back

    with monkeypatch.context() as m:
        m.setattr(RawTx, "move_head", head_write_fails)
        with pytest.raises(OSError, match="disk gone"):
            sqlite_store.create("p", new_item("lost"), meta("op-1", "d1"), sign_head=sign)
    assert kept.closed
    written = sqlite_store.create("p", new_item("after"), meta("op-1", "d1"), sign_head=sign)
    assert not written.replayed  # the failed batch stored nothing, its operation id included
    assert sqlite_store._batch_conn.get() is not kept
    assert [e.seq for e in sqlite_store.history("p")] == [1, 2]
    _chain_verifies(sqlite_store, "p")


def test_a_forked_child_opens_its_own_connection(
    sqlite_store: SqlMemoryStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    sqlite_store.create("p", new_item("parent"), meta("op-1", "d1"), sign_head=sign)
    inherited = sqlite_store._batch_conn.get()
    sqlite_store.head("p")  # a read: leaves the parent's idle connection in the pool
    idle = {id(r.dbapi_connection) for r in list(sqlite_store.engine.pool._pool.queue)}  # type: ignore[attr-defined]
    assert idle
    monkeypatch.setattr(writer_module, "_INHERITED", [])
    monkeypatch.setattr(writer_module.os, "getpid", lambda: -42)  # as a child sees it
    sqlite_store.create("p", new_item("child"), meta("op-2", "d2"), sign_head=sign)
    child = sqlite_store._batch_conn.get()
    assert child is not inherited
    assert id(child.connection.dbapi_connection) not in idle  # a pool of its own, not the parent's
    assert [inherited] == writer_module._INHERITED
    assert not inherited.closed  # left alone: the parent's, not the child's to close
    _chain_verifies(sqlite_store, "p")
    sqlite_store._batch_conn.close()  # as the child itself
    assert child.closed
    assert not inherited.closed
    inherited.close()  # one process plays both: the parent's close


def test_postgres_batches_take_pool_connections(postgres_store: SqlMemoryStore) -> None:
    assert not postgres_store._batch_conn.keep
    postgres_store.create("p", new_item("one"), meta("op-1", "d1"), sign_head=sign)
    postgres_store.create("p", new_item("two"), meta("op-2", "d2"), sign_head=sign)
    assert postgres_store._batch_conn._conn is None  # nothing kept between batches
    assert postgres_store.engine.pool.checkedout() == 0  # type: ignore[attr-defined]
    _chain_verifies(postgres_store, "p")
