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
from store.memory import open_store, textsearch
from store.memory import sqlite as sqlite_backend
from store.memory.interface import MemoryStore
from store.memory.model import Anchor, ItemFilter
from tests.store.memory.items import T0, meta, new_item

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

    def test_briefs_are_the_items_ranking_reads(self, store: MemoryStore) -> None:
        day = dt.timedelta(days=1)
        a = self._mk(store, "a", at=T0, valid_from=T0 - day, valid_to=T0 + day)
        b = self._mk(store, "b", at=T0 + H, scope={"kind": "user", "value": "me"})
        new = store.create("p", new_item("c"), meta(at=T0 + 2 * H), supersedes=(a, 1)).item
        assert new is not None
        whole = {i.id: i for i in store.get_many("p", [a, b, new.id])}
        briefs = store.get_briefs("p", [new.id, "mem_missing", a, b, a])
        assert [x.id for x in briefs] == [new.id, a, b]  # the order asked, missing left out
        for x in briefs:
            item = whole[x.id]
            for name in ("project", "type", "title", "status", "actor", "asserted_by"):
                assert getattr(x, name) == getattr(item, name), name
            for name in ("confidence", "importance", "anchor", "valid_from", "valid_to"):
                assert getattr(x, name) == getattr(item, name), name
            assert x.superseded_by == item.superseded_by
            assert x.created_at == item.created_at
            assert x.scope_kind == item.scope["kind"]
        assert briefs[1].superseded_by == new.id
        assert briefs[1].valid_from == T0 - day
        assert store.get_briefs("other", [a, b]) == []  # projects never mix
        assert store.get_briefs("p", []) == []
        # a listing of briefs: the items' order, filter and cursors
        flt = ItemFilter()
        items_pages, briefs_pages = [], []
        for pages, listing in ((items_pages, store.list_items), (briefs_pages, store.list_briefs)):
            cursor = None
            while True:
                page = listing("p", flt, limit=1, cursor=cursor)
                pages.append([x.id for x in page.items])
                cursor = page.next_cursor
                if cursor is None:
                    break
        assert briefs_pages == items_pages == [[new.id], [b]]  # superseded hidden by default
        with pytest.raises(InvalidMemoryQuery):
            store.list_briefs("p", flt, limit=0)

    def test_reading_is_one_snapshot(self, store: MemoryStore) -> None:
        a = self._mk(store, "before")
        with store.reading():
            head = store.head("p")
            assert [x.id for x in store.get_briefs("p", [a])] == [a]
            later = self._mk(store, "later", at=T0 + H)  # another transaction commits
            assert store.head("p") == head  # not seen inside the block
            assert store.get_briefs("p", [later]) == []
            with store.reading():  # nested: the same snapshot
                assert store.get_many("p", [later]) == []
        assert store.head("p").seq == head.seq + 1
        assert [x.id for x in store.get_briefs("p", [later])] == [later]

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

    def test_search_text_prefers_items_holding_every_word(self, store: MemoryStore) -> None:
        # the lone word, repeated in the title (weighted most), outranks the pair by bm25 /
        # ts_rank; holding every word of the query comes first all the same
        lone = self._mk(store, "quokka quokka quokka")
        both = self._mk(store, "a note", details="a long note: " + "words " * 30 + "quokka wombat")
        other = self._mk(store, "wombat seen")
        assert [i for i, _ in store.search_text("p", "quokka wombat", limit=1)] == [both]
        got = [i for i, _ in store.search_text("p", "quokka wombat", limit=10)]
        assert got[0] == both
        assert set(got) == {lone, both, other}
        assert store.search_text("other", "quokka wombat", limit=10) == []

    def test_search_text_ranks_a_bounded_number_of_matches(
        self, store: MemoryStore, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        monkeypatch.setattr(textsearch, "SCAN_CAP", 3)
        common = [self._mk(store, f"zebra herd {n}") for n in range(8)]
        rare = self._mk(store, "okapi alone")
        # only the common word: one pass of at most SCAN_CAP (= 3) matches, none repeated
        got = [i for i, _ in store.search_text("p", "zebra", limit=2)]
        assert len(got) == 2
        assert set(got) <= set(common)
        assert len(store.search_text("p", "zebra", limit=5)) == 5  # limit above the cap
        # no item holds both: the rare word's items are found whatever the common one
        # matches, and items holding only the common word are not proposed
        assert [i for i, _ in store.search_text("p", "zebra okapi", limit=3)] == [rare]

    def test_nearest_valid_matches_a_full_scan(self, store: MemoryStore) -> None:
        day = dt.timedelta(days=1)
        spans: dict[str, tuple[dt.datetime | None, dt.datetime | None]] = {}
        for n in range(24):
            start = T0 + (n - 12) * 3 * day
            end = start + (n % 4) * day if n % 5 else None
            spans[self._mk(store, f"span {n}", valid_from=start, valid_to=end)] = (start, end)
        until = T0 + 2 * day
        spans[self._mk(store, "open start", valid_from=None, valid_to=until)] = (None, until)
        self._mk(store, "timeless")
        store.create("q", new_item("elsewhere", valid_from=T0, valid_to=T0), meta())

        def distance(span: tuple[dt.datetime | None, dt.datetime | None]) -> int:
            start, end = span
            d = dt.timedelta(0)
            if start is not None and start > T0:
                d += start - T0
            if end is not None and end < T0:
                d += T0 - end
            return int(d / dt.timedelta(microseconds=1))

        want = sorted(((i, distance(sp)) for i, sp in spans.items()), key=lambda x: (x[1], x[0]))
        dist = dict(want)
        for limit in (1, 3, 7, 12):
            # the nearest distances, each item's own; which of the items tied at the cut
            # come back is the index walk's choice
            got = store.nearest_valid("p", T0, limit=limit)
            assert [d for _, d in got] == [d for _, d in want[:limit]]
            assert all(dist[i] == d for i, d in got)
            assert len(set(got)) == limit
        assert store.nearest_valid("p", T0, limit=40) == want

    @pytest.mark.parametrize("seeks", [2000, 0])
    def test_search_text_within_a_box(
        self, store: MemoryStore, monkeypatch: pytest.MonkeyPatch, seeks: int
    ) -> None:
        # SQLite looks the box's few candidates up one by one, or (more than BOX_SEEKS of
        # them) reads the matches and tests each: the same answer either way
        monkeypatch.setattr(sqlite_backend, "BOX_SEEKS", seeks)
        box = (10.0, 10.0, 10.01, 10.01)
        here = Anchor("bbox", {"type": "Polygon", "coordinates": []}, box, "c2")
        inside = [self._mk(store, f"zebra crossing {n}", anchor=here) for n in range(3)]
        self._mk(store, "zebra elsewhere")
        self._mk(store, "giraffe here", anchor=here)
        got = store.search_text("p", "zebra", limit=10, where=ItemFilter(bbox=box))
        assert sorted(i for i, _ in got) == sorted(inside)
        assert store.search_text("q", "zebra", limit=10, where=ItemFilter(bbox=box)) == []

    def test_embeddings_are_filled_in_only_where_missing(self, store: MemoryStore) -> None:
        bare = [self._mk(store, f"bare {n}", embedding=None) for n in range(3)]
        kept = self._mk(store, "has one")
        store.create("q", new_item("elsewhere", embedding=None), meta())
        head = store.head("p")
        assert [i.id for i in store.unembedded("p", after=None, limit=10)] == sorted(bare)
        first = store.unembedded("p", after=None, limit=2)
        rest = store.unembedded("p", after=first[-1].id, limit=10)
        assert [i.id for i in first + rest] == sorted(bare)
        assert store.set_embeddings("p", {bare[0]: (1.0, 2.0), kept: (9.0, 9.0)}) == 1
        assert store.set_embeddings("p", {bare[0]: (5.0, 5.0)}) == 0  # never overwritten
        assert (
            store.set_embeddings(
                "p", {i.id: (0.5,) for i in store.unembedded("q", after=None, limit=5)}
            )
            == 0
        )
        got = store.get("p", bare[0])
        assert got is not None
        assert got.embedding == (1.0, 2.0)
        assert got.version == 1
        again = store.get("p", kept)
        assert again is not None
        assert again.embedding == (0.25, -1.5, 3.0)
        assert store.head("p") == head  # not a write: no history entry
        assert len(store.unembedded("q", after=None, limit=5)) == 1
        assert sorted(i.id for i in store.unembedded("p", after=None, limit=10)) == sorted(bare[1:])

    def test_one_read_shape_answers_each_calls_values(self, store: MemoryStore) -> None:
        # the hot reads are compiled once per shape (store.memory.readsql): the same shape
        # run again with other values must answer for those values, never the first call's
        box_a, box_b = (10.0, 10.0, 10.01, 10.01), (20.0, 20.0, 20.01, 20.01)
        at_a = Anchor("bbox", {"type": "Polygon", "coordinates": []}, box_a, "ca")
        at_b = Anchor("bbox", {"type": "Polygon", "coordinates": []}, box_b, "cb")
        a = [self._mk(store, f"alpha {n}", at=T0 + n * H, anchor=at_a) for n in range(3)]
        b = self._mk(store, "beta", anchor=at_b, type="decision")
        ids = [*a, b]

        def listed(where: ItemFilter, limit: int = 10) -> list[str]:
            return [x.id for x in store.list_briefs("p", where, limit=limit).items]

        assert listed(ItemFilter(bbox=box_a)) == a[::-1]
        assert listed(ItemFilter(bbox=box_b)) == [b]
        assert listed(ItemFilter(types=("decision",))) == [b]
        assert listed(ItemFilter(types=("observation",))) == a[::-1]
        assert listed(ItemFilter(bbox=box_a), limit=1) == [a[2]]
        page = store.list_briefs("p", ItemFilter(bbox=box_a), limit=2)
        rest = store.list_briefs("p", ItemFilter(bbox=box_a), limit=2, cursor=page.next_cursor)
        assert [x.id for x in page.items + rest.items] == a[::-1]
        assert rest.next_cursor is None
        for n in range(1, len(ids) + 1):  # id lists of every length (padded shapes)
            assert [x.id for x in store.get_briefs("p", ids[:n][::-1])] == ids[:n][::-1]
            assert [x.id for x in store.get_many("p", ids[:n])] == ids[:n]
        assert store.get_briefs("q", ids) == []
        assert store.get_many("q", ids) == []
        assert {i for i, _ in store.search_text("p", "alpha", limit=10)} == set(a)
        assert [i for i, _ in store.search_text("p", "beta", limit=10)] == [b]
        assert len(store.search_text("p", "alpha", limit=2)) == 2
        assert store.search_text("q", "alpha", limit=10) == []
        assert store.head("p").seq == 4
        assert store.head("q").seq == 0
