"""The conformance suite on the server backend (a real PostgreSQL the session starts)."""

from __future__ import annotations

from pathlib import Path

import pytest

from store.memory import open_store
from store.memory.interface import WriteMeta
from store.memory.postgres import PostgresMemoryStore
from tests.store.memory.conformance import MemoryStoreConformance
from tests.store.memory.items import T0, new_item


class TestPostgres(MemoryStoreConformance):
    @pytest.fixture
    def url(self, postgres_url: str) -> str:
        return postgres_url


def test_move_a_project_from_sqlite_to_postgres(postgres_url: str, sqlite_url: str) -> None:
    src = open_store(sqlite_url)
    dst = open_store(postgres_url)
    try:
        assert isinstance(dst, PostgresMemoryStore)
        a = src.create("p", new_item("a"), WriteMeta("x", T0, "op-1", "d")).item
        assert a is not None
        src.create("p", new_item("b"), WriteMeta("x", T0), supersedes=(a.id, 1))
        counts = dst.import_records(list(src.export_project("p")))
        assert counts["items"] == 2
        assert counts["history"] == 3
        assert dst.get("p", a.id) == src.get("p", a.id)
        assert dst.history("p") == src.history("p")
        assert [i for i, _ in dst.search_text("p", "b", limit=5)] == [
            i for i, _ in src.search_text("p", "b", limit=5)
        ]
    finally:
        src.close()
        dst.close()


def test_unreachable_server_is_a_typed_error(tmp_path: Path) -> None:
    from store.errors import MemoryBackendUnavailable

    with pytest.raises(MemoryBackendUnavailable):
        open_store("postgresql://postgres@127.0.0.1:1/nothing")
