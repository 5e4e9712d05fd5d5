"""The store reads recall relies on, run against every backend (like the conformance suite).

A backend's test module subclasses :class:`RecallReadsConformance` and overrides the
``url`` fixture. Everything goes through the public
:class:`~store.memory.interface.MemoryStore` interface.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator

import pytest

from store.errors import InvalidMemoryQuery
from store.memory import open_store
from store.memory.interface import MemoryStore
from store.memory.model import ItemFilter
from tests.store.memory.conformance import T0, meta, new_item

H = dt.timedelta(hours=1)


class RecallReadsConformance:
    """search_text on natural language, states as of a time, relations of many, valid time."""

    @pytest.fixture
    def url(self) -> str:
        raise NotImplementedError

    @pytest.fixture
    def store(self, url: str) -> Iterator[MemoryStore]:
        s = open_store(url)
        yield s
        s.close()

    def _mk(self, store: MemoryStore, title: str, at: dt.datetime = T0, **kw: object) -> str:
        r = store.create("p", new_item(title, **kw), meta(at=at))
        assert r.item is not None
        return r.item.id

    def test_natural_language_queries_never_error(self, store: MemoryStore) -> None:
        flood = self._mk(store, "Flooded paddy fields", statement="the paddy flooded")
        self._mk(store, "Road closure", statement="a road was closed")
        for query in (
            "What happened to the paddy?! (flooded, maybe) -- OR NOT AND",
            'paddy" NEAR(a b) col:x ^start *',
            "paddy's  \u00e9t\u00e9 \U0001f30a \x00 \\ ' ; DROP TABLE items",
            "a" * 5000 + " paddy",
        ):
            hits = store.search_text("p", query, limit=5)
            assert hits, query
            assert hits[0][0] == flood, query
        assert store.search_text("p", "the of and", limit=5) is not None  # stopwords only
        assert store.search_text("p", "?!.,;:", limit=5) == []

    def test_states_as_of_follow_the_history(self, store: MemoryStore) -> None:
        old = self._mk(store, "old", at=T0)
        new = store.create("p", new_item("new"), meta(at=T0 + 2 * H), supersedes=(old, 1)).item
        assert new is not None
        gone = self._mk(store, "gone", at=T0 + H)
        store.change(
            "p", gone, None, {"status": "deleted", "deleted_reason": "dup"}, "delete",
            meta(at=T0 + 3 * H),
        )  # fmt: skip
        ids = [old, new.id, gone]
        before = store.states_as_of("p", ids, T0 + H)
        assert {i: s.status for i, s in before.items()} == {old: "active", gone: "active"}
        assert before[old].superseded_by is None
        after = store.states_as_of("p", ids, T0 + 4 * H)
        assert after[old].status == "superseded"
        assert after[old].superseded_by == new.id
        assert after[new.id].status == "active"
        assert after[gone].status == "deleted"
        assert store.states_as_of("p", ids, T0 - H) == {}
        assert store.states_as_of("other", ids, T0 + 4 * H) == {}  # projects never mix
        assert store.states_as_of("p", [], T0) == {}

    def test_relations_of_many_both_directions(self, store: MemoryStore) -> None:
        a, b, c, d = (self._mk(store, t) for t in "abcd")
        store.relate("p", a, b, "refines", meta(at=T0 + H))
        store.relate("p", c, a, "contradicts", meta(at=T0 + 2 * H))
        store.relate("p", c, d, "related", meta(at=T0 + 3 * H))
        kinds = ("refines", "contradicts", "related")
        edges = {(r.src_id, r.dst_id, r.kind) for r in store.relations_of("p", [a], kinds)}
        assert edges == {(a, b, "refines"), (c, a, "contradicts")}
        assert len(store.relations_of("p", [a, c], kinds)) == 3
        assert store.relations_of("p", [a], ("related",)) == []
        early = store.relations_of("p", [a], kinds, written_before=T0 + H)
        assert [(r.src_id, r.dst_id) for r in early] == [(a, b)]
        assert store.relations_of("other", [a], kinds) == []

    def test_nearest_valid_orders_by_distance(self, store: MemoryStore) -> None:
        day = dt.timedelta(days=1)
        covers = self._mk(store, "covers", valid_from=T0 - day, valid_to=T0 + day)
        soon = self._mk(store, "soon", valid_from=T0 + 3 * day, valid_to=T0 + 4 * day)
        past = self._mk(store, "past", valid_from=T0 - 10 * day, valid_to=T0 - 9 * day)
        open_end = self._mk(store, "open", valid_from=T0 - 30 * day, valid_to=None)
        self._mk(store, "timeless")
        got = store.nearest_valid("p", T0, limit=10)
        assert [i for i, _ in got] == [*sorted([covers, open_end]), soon, past]
        assert dict(got)[soon] == int(3 * day / dt.timedelta(microseconds=1))
        assert store.nearest_valid("p", T0, limit=1, where=ItemFilter(types=("bug",))) == []
        with pytest.raises(InvalidMemoryQuery):
            store.nearest_valid("p", T0, limit=0)
