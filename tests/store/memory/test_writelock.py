"""The SQLite store's write lock between processes (store.memory.writelock).

Two stores opened on one file hold two descriptors of the lock file, so they meet
at the lock as two processes do.
"""

from __future__ import annotations

import fcntl
import os
import threading
from pathlib import Path

import pytest

from store.errors import MemoryBackendUnavailable
from store.memory.chain import verify_chain
from store.memory.model import ItemFilter
from store.memory.sqlite import SqliteMemoryStore
from tests.store.memory.items import meta, new_item, sign, verify


def _store(path: Path, timeout_s: float = 30.0) -> SqliteMemoryStore:
    store = SqliteMemoryStore(f"sqlite:///{path.as_posix()}", busy_timeout_s=timeout_s)
    store.migrate()
    return store


def test_two_stores_of_one_file_write_one_chain(tmp_path: Path) -> None:
    path = tmp_path / "memory.sqlite"
    stores = [_store(path), _store(path)]
    errors: list[BaseException] = []

    def writer(store: SqliteMemoryStore, w: int) -> None:
        try:
            for i in range(8):
                store.create("p", new_item(f"w{w}-{i}"), meta(f"op-{w}-{i}", "d"), sign_head=sign)
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(stores[w % 2], w)) for w in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    try:
        assert errors == []
        entries = stores[0].history("p")
        assert [e.seq for e in entries] == list(range(1, 49))
        assert verify_chain(entries, verify_head=verify, require_signatures=True).ok
        items = stores[1].list_items("p", ItemFilter(), limit=100).items
        assert len(items) == 48
        assert (tmp_path / "memory.sqlite-writer.lock").is_file()
    finally:
        for s in stores:
            s.close()


def test_a_lock_held_elsewhere_is_a_typed_error_after_the_timeout(tmp_path: Path) -> None:
    path = tmp_path / "memory.sqlite"
    store = _store(path, timeout_s=0.2)
    fd = os.open(f"{path}-writer.lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)  # another process's writer, stuck
        with pytest.raises(MemoryBackendUnavailable, match="write lock"):
            store.create("p", new_item("waits"), meta("op-1", "d"), sign_head=sign)
        assert store.head("p").seq == 0  # nothing stored
        fcntl.flock(fd, fcntl.LOCK_UN)
        written = store.create("p", new_item("waits"), meta("op-1", "d"), sign_head=sign)
        assert written.entry.seq == 1
        assert not written.replayed
    finally:
        os.close(fd)
        store.close()


def test_an_unwritable_lock_file_leaves_sqlites_lock_alone(tmp_path: Path) -> None:
    path = tmp_path / "memory.sqlite"
    Path(f"{path}-writer.lock").mkdir()  # cannot be opened as a file: no process lock
    store = _store(path)
    try:
        assert store.create("p", new_item("a"), meta("op-a", "d"), sign_head=sign).entry.seq == 1
        assert store.create("p", new_item("b"), meta("op-b", "d"), sign_head=sign).entry.seq == 2
    finally:
        store.close()
