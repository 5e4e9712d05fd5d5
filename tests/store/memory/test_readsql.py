"""The compiled read shapes refuse a builder and values that disagree (store.memory.readsql)."""

from __future__ import annotations

from pathlib import Path

import pytest
import sqlalchemy as sa

from store.memory.readsql import id_slots, pad
from store.memory.schema import projects
from store.memory.sqlite import SqliteMemoryStore


def test_a_shape_must_use_exactly_the_values_given(tmp_path: Path) -> None:
    store = SqliteMemoryStore(f"sqlite:///{tmp_path / 'm.sqlite'}")
    store.migrate()
    p = projects.c
    reads = store.read_statements

    def build() -> sa.Select[tuple[int]]:
        return sa.select(p.head_seq).where(p.project == sa.bindparam("project"))

    try:
        with store.engine.connect() as conn, conn.begin():
            assert reads.rows(conn, ("t", 1), build, {"project": "p"}) == []
            with pytest.raises(ValueError, match="does not use"):
                reads.rows(conn, ("t", 2), build, {"project": "p", "extra": 1})
            with pytest.raises(ValueError, match="needs"):
                reads.rows(conn, ("t", 3), build, {})
    finally:
        store.close()


def test_id_lists_are_padded_to_a_few_shapes() -> None:
    assert [id_slots(n) for n in (1, 2, 3, 4, 5, 9, 500)] == [1, 2, 4, 4, 8, 16, 512]
    assert pad(["a", "b", "c"], 4) == ["a", "b", "c", "c"]
