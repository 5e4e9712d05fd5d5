"""Schema migrations: a database at the previous revision that holds data is upgraded intact.

Both backends: the store is migrated to ``0001`` only (base tables, no full-text or
spatial index), written through (items, a supersession, a relation, a token, signed
history), then upgraded to the newest revision; everything reads back equal, the new
indexes find the old rows, and writing continues the same history chain.
"""

from __future__ import annotations

import datetime as dt

import pytest

from store.memory import open_store
from store.memory.chain import verify_chain
from store.memory.interface import WriteMeta
from store.memory.model import Anchor, ItemFilter, Token
from store.memory.sql import SqlMemoryStore
from tests.store.memory.items import T0, new_item, sign, verify


@pytest.fixture(params=["sqlite", "postgresql"])
def url(request: pytest.FixtureRequest) -> str:
    name = "sqlite_url" if request.param == "sqlite" else "postgres_url"
    return str(request.getfixturevalue(name))


def test_upgrade_keeps_data_and_indexes_it(url: str) -> None:
    store = open_store(url, migrate=False)
    assert isinstance(store, SqlMemoryStore)
    try:
        assert store.revision() is None
        assert store.migrate("0001") == "0001"
        far = Anchor("point", {"type": "Point"}, (-33.0, 151.0, -33.0, 151.0))
        a = store.create(
            "p", new_item("monsoon flood"), WriteMeta("x", T0, "op-1", "d"), sign_head=sign
        ).item
        assert a is not None
        b = store.create(
            "p",
            new_item("canopy cleared", anchor=far),
            WriteMeta("x", T0),
            supersedes=(a.id, 1),
            sign_head=sign,
        ).item
        assert b is not None
        c = store.create(
            "p",
            new_item("dry riverbed"),
            WriteMeta("x", T0 + dt.timedelta(seconds=1)),
            sign_head=sign,
        ).item
        assert c is not None
        store.relate("p", c.id, b.id, "contradicts", WriteMeta("x", T0), sign_head=sign)
        store.add_token(Token("tok", "p", ("read",), "x", None, T0, None), "t" * 64)
        before = {
            "items": [store.get("p", i) for i in (a.id, b.id, c.id)],
            "history": store.history("p"),
            "head": store.head("p"),
            "relations": store.relations("p", b.id),
            "tokens": store.list_tokens("p"),
        }
        store.close()

        store = open_store(url)  # upgrades to the newest revision
        assert isinstance(store, SqlMemoryStore)
        assert store.revision() == SqlMemoryStore.head_revision() != "0001"
        after = {
            "items": [store.get("p", i) for i in (a.id, b.id, c.id)],
            "history": store.history("p"),
            "head": store.head("p"),
            "relations": store.relations("p", b.id),
            "tokens": store.list_tokens("p"),
        }
        assert after == before
        # the new indexes cover the rows written before they existed
        assert [i for i, _ in store.search_text("p", "riverbed", limit=5)] == [c.id]
        assert [i for i, _ in store.search_text("p", "canopy", limit=5)] == [b.id]
        near = store.list_items("p", ItemFilter(bbox=(23.9, 88.9, 24.1, 89.1)), limit=10)
        assert [x.id for x in near.items] == [c.id]  # a is superseded (hidden)
        assert [
            x.id
            for x in store.list_items("p", ItemFilter(bbox=(-34, 150, -32, 152)), limit=5).items
        ] == [b.id]
        # and the store keeps working: idempotency records and the chain survive
        replay = store.create("p", new_item("monsoon flood"), WriteMeta("x", T0, "op-1", "d"))
        assert replay.replayed
        assert replay.item is not None
        assert replay.item.id == a.id
        d = store.create("p", new_item("new after upgrade"), WriteMeta("x", T0), sign_head=sign)
        assert d.entry.seq == before["head"].seq + 1
        assert d.entry.prev_hash == before["head"].hash
        assert verify_chain(store.history("p"), verify_head=verify, require_signatures=True).ok
        assert [i for i, _ in store.search_text("p", "upgrade", limit=5)] == [d.item.id]  # type: ignore[union-attr]
    finally:
        store.close()


def test_postgresql_full_text_index_has_no_pending_list(postgres_url: str) -> None:
    """Revision 0004: the GIN index is written directly (``fastupdate = off``), so rows
    written before (at 0003, the pending list on) were flushed into it and new rows never
    wait in an unsorted list every search scans; downgrading restores the default."""
    store = open_store(postgres_url, migrate=False)
    assert isinstance(store, SqlMemoryStore)

    def options() -> object:
        with store.engine.connect() as conn:
            return conn.exec_driver_sql(
                "SELECT reloptions FROM pg_class WHERE relname = 'items_search_gin'"
            ).scalar()

    def pending() -> int:
        with store.engine.connect() as conn:
            conn.exec_driver_sql("CREATE EXTENSION IF NOT EXISTS pgstattuple")
            n = conn.exec_driver_sql(
                "SELECT pending_tuples FROM pgstatginindex('items_search_gin')"
            ).scalar()
            conn.commit()
            return int(n or 0)

    try:
        store.migrate("0003")
        assert options() is None  # PostgreSQL's default: fastupdate on
        for i in range(5):
            store.create("p", new_item(f"monsoon flood {i}"), WriteMeta("x", T0))
        assert pending() > 0
        assert store.migrate() == SqlMemoryStore.head_revision()
        assert options() == ["fastupdate=off"]
        assert pending() == 0
        dry = store.create("p", new_item("dry riverbed"), WriteMeta("x", T0)).item
        assert dry is not None
        assert pending() == 0
        assert [i for i, _ in store.search_text("p", "riverbed", limit=10)] == [dry.id]
        assert len(store.search_text("p", "monsoon", limit=10)) == 5
    finally:
        store.close()
