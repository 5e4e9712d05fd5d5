"""The conformance suite on the embedded backend (SQLite), plus its own specifics."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from store.errors import InvalidMemoryUrl, MemoryBackendUnavailable
from store.memory import default_url, open_store
from store.memory.sqlite import SqliteMemoryStore
from tests.store.memory.conformance import MemoryStoreConformance


class TestSqlite(MemoryStoreConformance):
    @pytest.fixture
    def url(self, sqlite_url: str) -> str:
        return sqlite_url


def test_default_url_creates_the_file_on_first_use(tmp_path: Path) -> None:
    url = default_url(tmp_path / "data")
    assert url.startswith("sqlite:///")
    assert url.endswith("/data/memory.sqlite")
    store = open_store(url)
    try:
        assert isinstance(store, SqliteMemoryStore)
        assert (tmp_path / "data" / "memory.sqlite").exists()
        mode = (
            sqlite3.connect(tmp_path / "data" / "memory.sqlite")
            .execute("PRAGMA journal_mode")
            .fetchone()
        )
        assert mode == ("wal",)
    finally:
        store.close()


def test_bad_urls_are_typed_errors(tmp_path: Path) -> None:
    """A URL no backend takes is the input's mistake (invalid_memory_url: HTTP 422, CLI exit 2);
    a database that cannot be created is the environment's (memory_backend_unavailable)."""
    with pytest.raises(InvalidMemoryUrl):
        open_store("mysql://x/y")
    with pytest.raises(InvalidMemoryUrl):
        open_store("sqlite://")
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(MemoryBackendUnavailable):
        open_store(f"sqlite:///{blocker}/sub/memory.sqlite")
