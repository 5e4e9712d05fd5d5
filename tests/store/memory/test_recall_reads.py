"""The recall reads on both backends: SQLite and a real PostgreSQL."""

from __future__ import annotations

import pytest

from tests.store.memory.recall_conformance import RecallReadsConformance


class TestSqliteRecallReads(RecallReadsConformance):
    @pytest.fixture
    def url(self, sqlite_url: str) -> str:
        return sqlite_url


class TestPostgresRecallReads(RecallReadsConformance):
    @pytest.fixture
    def url(self, postgres_url: str) -> str:
        return postgres_url
