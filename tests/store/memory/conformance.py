"""The memory store's conformance suite: one class, run against every backend.

The suite is :class:`MemoryStoreConformance` with the :class:`~tests.store.memory.conformance_ops.OperationsConformance`
mixin (tokens, export/import, concurrent writers); the items they write come from
:mod:`tests.store.memory.items`. A backend's test module subclasses :class:`MemoryStoreConformance` and
overrides the ``url`` fixture (a fresh, empty database per test). Every test
goes through the public :class:`~store.memory.interface.MemoryStore`
interface, except the tamper test, which rewrites rows behind the store's back
as an attacker with database access would.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
import sqlalchemy as sa

from store.errors import (
    InvalidCursor,
    InvalidDate,
    InvalidTransition,
    MemoryNotFound,
    OperationConflict,
    VersionConflict,
)
from store.memory import open_store
from store.memory.chain import verify_chain
from store.memory.digest import content_digest
from store.memory.interface import GENESIS_HASH, MemoryStore
from store.memory.model import Anchor, ItemFilter, ProjectHead
from tests.store.memory.conformance_ops import OperationsConformance
from tests.store.memory.items import T0, item_fields, meta, new_item, sign, verify

__all__ = ["MemoryStoreConformance"]


class MemoryStoreConformance(OperationsConformance):
    """Behaviour every :class:`MemoryStore` backend must have."""

    @pytest.fixture
    def url(self) -> str:
        raise NotImplementedError

    @pytest.fixture
    def store(self, url: str) -> Iterator[MemoryStore]:
        s = open_store(url)
        yield s
        s.close()

    # ------------------------------------------------------------------ schema

    def test_migrate_is_idempotent(self, store: MemoryStore) -> None:
        head = store.revision()
        assert head is not None
        assert store.migrate() == head
        assert store.revision() == head

    # ------------------------------------------------------------------ create / get

    def test_create_get_round_trip(self, store: MemoryStore) -> None:
        src = new_item(valid_from=T0, valid_to=T0 + dt.timedelta(days=1))
        r = store.create("p", src, meta(), sign_head=sign)
        assert r.item is not None
        assert not r.replayed
        assert r.item.id.startswith("mem_")
        assert len(r.item.id) == 30
        got = store.get("p", r.item.id)
        assert got == r.item
        assert item_fields(got) == item_fields(src)
        assert got.version == 1
        assert got.status == "active"
        assert got.project == "p"
        assert got.content_digest == content_digest(src)
        assert got.created_at == T0
        assert r.entry.seq == 1
        assert r.entry.prev_hash == GENESIS_HASH
        assert r.entry.action == "create"
        assert store.head("p") == ProjectHead("p", 1, r.entry.hash)
        assert verify(store.head("p"), store.history("p")[-1].head_signature or "")

    def test_get_missing_and_get_many_order(self, store: MemoryStore) -> None:
        a = store.create("p", new_item("a"), meta()).item
        b = store.create("p", new_item("b"), meta()).item
        assert a is not None
        assert b is not None
        assert store.get("p", "mem_nothing") is None
        got = store.get_many("p", [b.id, "mem_nothing", a.id])
        assert [x.id for x in got] == [b.id, a.id]

    def test_naive_time_is_a_typed_error(self, store: MemoryStore) -> None:
        with pytest.raises(InvalidDate):
            store.create("p", new_item(), meta(at=dt.datetime(2024, 1, 1)))
        assert store.head("p").seq == 0

    # ------------------------------------------------------------------ listing

    def test_list_pages_newest_first(self, store: MemoryStore) -> None:
        ids = []
        for i in range(7):
            r = store.create("p", new_item(f"n{i}"), meta(at=T0 + dt.timedelta(minutes=i // 2)))
            assert r.item is not None
            ids.append(r.item.id)
        seen: list[str] = []
        cursor = None
        pages = 0
        while True:
            page = store.list_items("p", ItemFilter(), limit=3, cursor=cursor)
            seen += [x.id for x in page.items]
            pages += 1
            cursor = page.next_cursor
            if cursor is None:
                break
        assert pages == 3
        assert seen == sorted(ids, key=lambda i: (store.get("p", i).created_at, i), reverse=True)  # type: ignore[union-attr]
        first = store.list_items("p", ItemFilter(), limit=3)
        with pytest.raises(InvalidCursor):
            store.list_items("p", ItemFilter(types=("bug",)), limit=3, cursor=first.next_cursor)
        with pytest.raises(InvalidCursor):
            store.list_items("q", ItemFilter(), limit=3, cursor=first.next_cursor)
        with pytest.raises(InvalidCursor):
            store.list_items("p", ItemFilter(), limit=3, cursor="not-a-cursor!")

    def test_list_filters(self, store: MemoryStore) -> None:
        def mk(title: str, **kw: Any) -> str:
            r = store.create("p", new_item(title, **kw), meta())
            assert r.item is not None
            return r.item.id

        far = Anchor("point", {"type": "Point"}, (-33.0, 151.0, -33.0, 151.0), "c2")
        a = mk("a")
        b = mk("b", type="bug", tags=("flood",), anchor=far)
        c = mk("c", tags=("river", "dry"), valid_from=T0, valid_to=T0 + dt.timedelta(days=2))
        d = mk("d", scope={"kind": "user", "value": "u1"}, actor="agent-2")
        none_anchor = Anchor("none", None, None)
        e = mk("e", type="decision", anchor=none_anchor)

        def ids(**kw: Any) -> set[str]:
            return {x.id for x in store.list_items("p", ItemFilter(**kw), limit=50).items}

        assert ids() == {a, b, c, d, e}
        assert ids(types=("bug", "decision")) == {b, e}
        assert ids(tags=("river",)) == {a, c, d, e}
        assert ids(tags=("river", "dry")) == {c}
        assert ids(bbox=(23.9, 88.9, 24.1, 89.1)) == {a, c, d}
        assert ids(bbox=(-34.0, 150.0, -32.0, 152.0)) == {b}
        assert ids(bbox=(-33.0, 151.0, -33.0, 151.0)) == {b}  # a point on the edge
        assert ids(bbox=(0.0, 0.0, 1.0, 1.0)) == set()
        assert ids(valid_at=T0 + dt.timedelta(days=1)) == {a, b, c, d, e}
        assert ids(valid_at=T0 + dt.timedelta(days=3)) == {a, b, d, e}
        assert ids(scope_kinds=("user",)) == {d}
        assert ids(actor="agent-2") == {d}
        later = store.create("p", new_item("later"), meta(at=T0 + dt.timedelta(hours=1))).item
        assert later is not None
        assert later.id not in ids(written_before=T0)
        assert later.id in ids(written_before=T0 + dt.timedelta(hours=1))

    def test_bbox_is_exact_at_float_edges(self, store: MemoryStore) -> None:
        box = (10.0, 20.0, 10.000000100, 20.0000001)
        r = store.create("p", new_item(anchor=Anchor("bbox", None, box)), meta())
        assert r.item is not None
        hit = ItemFilter(bbox=(10.0000001, 20.0, 11.0, 21.0))
        miss = ItemFilter(bbox=(10.000000101, 20.0, 11.0, 21.0))
        assert [x.id for x in store.list_items("p", hit, limit=5).items] == [r.item.id]
        assert store.list_items("p", miss, limit=5).items == ()

    # ------------------------------------------------------------------ supersession and changes

    def test_supersede_chain(self, store: MemoryStore) -> None:
        a = store.create("p", new_item("a"), meta(), sign_head=sign).item
        assert a is not None
        r = store.create("p", new_item("b"), meta(), supersedes=(a.id, 1), sign_head=sign)
        b = r.item
        assert b is not None
        assert b.supersedes_id == a.id
        old = store.get("p", a.id)
        assert old is not None
        assert old.status == "superseded"
        assert old.superseded_by == b.id
        assert old.version == 2
        assert [e.action for e in store.history("p")] == ["create", "supersede", "create"]
        assert r.entry == store.history("p")[-1]
        assert r.entry.item_id == b.id
        assert [(x.src_id, x.dst_id, x.kind) for x in store.relations("p", a.id)] == [
            (b.id, a.id, "supersedes")
        ]
        assert a.id not in {x.id for x in store.list_items("p", ItemFilter(), limit=10).items}
        head = store.head("p")
        with pytest.raises(InvalidTransition):
            store.create("p", new_item("c"), meta(), supersedes=(a.id, 2))
        with pytest.raises(VersionConflict):
            store.create("p", new_item("c"), meta(), supersedes=(b.id, 7))
        with pytest.raises(MemoryNotFound):
            store.create("p", new_item("c"), meta(), supersedes=("mem_missing", 1))
        assert store.head("p") == head
        assert len(store.list_items("p", ItemFilter(statuses=()), limit=10).items) == 2

    def test_change_and_transitions(self, store: MemoryStore) -> None:
        a = store.create("p", new_item(), meta()).item
        assert a is not None
        r = store.change(
            "p", a.id, 1, {"status": "potentially_stale"}, "stale", meta(actor="pipeline")
        )
        assert r.item is not None
        assert r.item.status == "potentially_stale"
        assert r.item.version == 2
        assert r.entry.action == "stale"
        assert r.entry.actor == "pipeline"
        r = store.change(
            "p",
            a.id,
            None,
            {"verdict": "corroborated", "verdict_facts": ("f1:x",)},
            "verify",
            meta(),
        )
        assert r.item is not None
        assert r.item.verdict == "corroborated"
        assert r.item.verdict_facts == ("f1:x",)
        assert r.item.content_digest == a.content_digest  # a verdict is not content
        r = store.change("p", a.id, 3, {"metadata": {"note": 2}}, "update", meta())
        assert r.item is not None
        assert r.item.content_digest != a.content_digest
        assert r.item.content_digest == content_digest(r.item)
        with pytest.raises(VersionConflict):
            store.change("p", a.id, 1, {"status": "active"}, "update", meta())
        with pytest.raises(InvalidTransition):
            store.change("p", a.id, None, {"status": "deleted"}, "delete", meta())  # no reason
        with pytest.raises(InvalidTransition):
            store.change("p", a.id, None, {"status": "superseded"}, "update", meta())
        with pytest.raises(InvalidTransition):
            store.change("p", a.id, None, {"title": "x"}, "update", meta())
        with pytest.raises(MemoryNotFound):
            store.change("p", "mem_missing", None, {"status": "active"}, "update", meta())
        r = store.change(
            "p", a.id, 4, {"status": "deleted", "deleted_reason": "wrong place"}, "delete", meta()
        )
        assert r.item is not None
        assert r.item.status == "deleted"
        assert r.item.deleted_reason == "wrong place"
        seq = store.head("p").seq
        with pytest.raises(InvalidTransition):
            store.change("p", a.id, None, {"status": "active"}, "update", meta())
        with pytest.raises(InvalidTransition):
            store.create("p", new_item(), meta(), supersedes=(a.id, 5))
        assert store.head("p").seq == seq
        assert store.list_items("p", ItemFilter(), limit=5).items == ()
        assert [
            x.status
            for x in store.list_items("p", ItemFilter(statuses=("deleted",)), limit=5).items
        ] == ["deleted"]

    def test_optimistic_versions_one_winner(self, store: MemoryStore) -> None:
        a = store.create("p", new_item(), meta()).item
        assert a is not None
        store.change("p", a.id, 1, {"metadata": {"by": "first"}}, "update", meta())
        with pytest.raises(VersionConflict):
            store.change("p", a.id, 1, {"metadata": {"by": "second"}}, "update", meta())
        got = store.get("p", a.id)
        assert got is not None
        assert got.metadata == {"by": "first"}
        assert got.version == 2

    # ------------------------------------------------------------------ relations

    def test_relations(self, store: MemoryStore) -> None:
        a = store.create("p", new_item("a"), meta()).item
        b = store.create("p", new_item("b"), meta()).item
        assert a is not None
        assert b is not None
        r1 = store.relate("p", a.id, b.id, "contradicts", meta())
        assert not r1.replayed
        assert r1.entry.action == "relate"
        r2 = store.relate("p", a.id, b.id, "contradicts", meta())
        assert r2.replayed
        assert r2.entry.seq == r1.entry.seq
        assert store.head("p").seq == r1.entry.seq
        rel = store.relations("p", b.id)
        assert [(x.src_id, x.dst_id, x.kind) for x in rel] == [(a.id, b.id, "contradicts")]
        with pytest.raises(MemoryNotFound):
            store.relate("p", a.id, "mem_missing", "refines", meta())
        with pytest.raises(InvalidTransition):
            store.relate("p", a.id, a.id, "refines", meta())
        with pytest.raises(InvalidTransition):
            store.relate("p", a.id, b.id, "supersedes", meta())
        c = store.create("p", new_item("c", related_memory_ids=(a.id, b.id)), meta()).item
        assert c is not None
        assert {(x.dst_id, x.kind) for x in store.relations("p", c.id)} == {
            (a.id, "related"),
            (b.id, "related"),
        }
        seq = store.head("p").seq
        with pytest.raises(MemoryNotFound):
            store.create("p", new_item("d", related_memory_ids=(a.id, "mem_missing")), meta())
        assert store.head("p").seq == seq

    # ------------------------------------------------------------------ history chain

    def test_history_chain_and_tamper_detection(self, store: MemoryStore) -> None:
        a = store.create("p", new_item("a"), meta(), sign_head=sign).item
        assert a is not None
        store.create("p", new_item("b"), meta(), supersedes=(a.id, 1), sign_head=sign)
        store.change(
            "p",
            a.id,
            None,
            {"status": "deleted", "deleted_reason": "x"},
            "delete",
            meta(),
            sign_head=sign,
        )
        store.create("p", new_item("c"), meta(), sign_head=sign)
        entries = store.history("p")
        assert [e.seq for e in entries] == [1, 2, 3, 4, 5]
        report = verify_chain(entries, verify_head=verify, require_signatures=True)
        assert report.ok, report.problems
        assert store.history("p", item_id=a.id)[0].seq == 1
        assert [e.seq for e in store.history("p", after_seq=3)] == [4, 5]

        # an attacker with database access rewrites entry 2 and recomputes every later hash
        from store.memory.chain import entry_content
        from store.memory.interface import entry_hash

        forged = []
        prev = entries[0].hash
        for e in entries[1:]:
            change = dict(e.change)
            if e.seq == 2:
                change["superseded_by"] = "mem_forged"
            e2 = dataclasses.replace(e, change=change, prev_hash=prev)
            e2 = dataclasses.replace(e2, hash=entry_hash(prev, entry_content(e2)))
            forged.append(e2)
            prev = e2.hash
        engine: sa.Engine = store.engine  # type: ignore[attr-defined]
        h = sa.table(
            "history",
            sa.column("project"),
            sa.column("seq"),
            sa.column("change", sa.JSON),
            sa.column("prev_hash"),
            sa.column("hash"),
        )
        with engine.begin() as conn:
            for e in forged:
                conn.execute(
                    h.update()
                    .where(h.c.project == "p", h.c.seq == e.seq)
                    .values(change=dict(e.change), prev_hash=e.prev_hash, hash=e.hash)
                )
        tampered = store.history("p")
        unsigned_check = verify_chain(tampered)
        assert unsigned_check.ok  # hashes alone are self-consistent again...
        report = verify_chain(tampered, verify_head=verify)
        assert not report.ok  # ...but the signed heads give the forgery away
        assert any("#2" in p and "signature" in p for p in report.problems)

    # ------------------------------------------------------------------ idempotency

    def test_operation_ids(self, store: MemoryStore) -> None:
        r1 = store.create("p", new_item(), meta("op-1", "d1"))
        r2 = store.create("p", new_item(), meta("op-1", "d1"))
        assert r2.replayed
        assert not r1.replayed
        assert r1.item is not None
        assert r2.item is not None
        assert r2.item.id == r1.item.id
        assert r2.entry == r1.entry
        assert len(store.history("p")) == 1
        with pytest.raises(OperationConflict):
            store.create("p", new_item("other"), meta("op-1", "d2"))
        assert len(store.history("p")) == 1
        assert len(store.list_items("p", ItemFilter(), limit=10).items) == 1
        r3 = store.create("q", new_item(), meta("op-1", "d1"))  # another project: its own key
        assert not r3.replayed
        r4 = store.change(
            "p", r1.item.id, 1, {"status": "potentially_stale"}, "stale", meta("op-2", "s")
        )
        r5 = store.change(
            "p", r1.item.id, 1, {"status": "potentially_stale"}, "stale", meta("op-2", "s")
        )
        assert r5.replayed
        assert r5.entry == r4.entry

    # ------------------------------------------------------------------ isolation

    def test_project_isolation(self, store: MemoryStore) -> None:
        a = store.create("A", new_item("secret flood"), meta(), sign_head=sign).item
        a2 = store.create("A", new_item("other"), meta()).item
        assert a is not None
        assert a2 is not None
        store.relate("A", a.id, a2.id, "refines", meta())
        store.create("B", new_item("b's own"), meta())
        assert store.get("B", a.id) is None
        assert store.get_many("B", [a.id]) == []
        assert a.id not in {
            x.id for x in store.list_items("B", ItemFilter(statuses=()), limit=50).items
        }
        assert all(x != a.id for x, _ in store.search_text("B", "secret", limit=10))
        assert store.relations("B", a.id) == []
        assert all(e.project == "B" for e in store.history("B"))
        assert len(store.history("B")) == 1
        assert store.head("B").seq == 1
        with pytest.raises(MemoryNotFound):
            store.create("B", new_item(), meta(), supersedes=(a.id, 1))
        with pytest.raises(MemoryNotFound):
            store.change(
                "B", a.id, None, {"status": "deleted", "deleted_reason": "x"}, "delete", meta()
            )
        with pytest.raises(MemoryNotFound):
            store.relate("B", a.id, a2.id, "related", meta())
        with pytest.raises(MemoryNotFound):
            store.create("B", new_item(related_memory_ids=(a.id,)), meta())
        got = store.get("A", a.id)
        assert got is not None
        assert got.status == "active"
        assert got.version == 1
        assert store.projects() == ["A", "B"]

    # ------------------------------------------------------------------ full text

    def test_search_text_ranks(self, store: MemoryStore) -> None:
        def mk(title: str, statement: str, details: str | None = None) -> str:
            r = store.create(
                "p", new_item(title, statement=statement, details=details, tags=("x",)), meta()
            )
            assert r.item is not None
            return r.item.id

        best = mk("Flooded paddy fields", "the paddy fields flooded after the monsoon")
        mid = mk("Road closure", "a road was closed", details="paddy nearby")
        mk("Forest canopy", "canopy intact")
        hits = store.search_text("p", "flooded paddy", limit=10)
        assert [i for i, _ in hits] == [best, mid]
        assert hits[0][1] > hits[1][1]
        assert store.search_text("p", "flooded paddy", limit=1) == hits[:1]
        assert store.search_text("p", '"( AND NOT ) * -- ;', limit=5) == []
        assert store.search_text("p", "", limit=5) == []
        assert [
            i for i, _ in store.search_text("p", "paddy", limit=5, where=ItemFilter(types=("bug",)))
        ] == []
        store.change(
            "p", best, None, {"status": "deleted", "deleted_reason": "dup"}, "delete", meta()
        )
        assert [i for i, _ in store.search_text("p", "flooded paddy", limit=10)] == [mid]

    def test_item_vectors(self, store: MemoryStore) -> None:
        def mk(title: str, **kw: Any) -> str:
            r = store.create("p", new_item(title, **kw), meta())
            assert r.item is not None
            return r.item.id

        a = mk("a", embedding=(1.0, 0.0, 0.5))
        b = mk("b", embedding=(0.0, 2.0, -0.25), type="bug")
        none = mk("none", embedding=None)
        other = mk("other", embedding=(1.0, 2.0))
        placeless = mk(
            "placeless",
            type="decision",
            anchor=Anchor("none", None, None),
            embedding=(0.5, 0.5, 0.5),
        )
        more = mk("more", embedding=(9.0, 9.0, 9.0))
        store.create("q", new_item("other project", embedding=(7.0, 7.0, 7.0)), meta())
        deleted = mk("deleted", embedding=(3.0, 3.0, 3.0))
        store.change(
            "p", deleted, None, {"status": "deleted", "deleted_reason": "x"}, "delete", meta()
        )

        got = store.item_vectors("p", ItemFilter())
        assert sorted(got.ids) == sorted([a, b, none, other, placeless, more])
        assert got.embeddings.dtype == np.float32
        assert got.embeddings.shape == (4, 3)
        assert (got.missing, got.other_dim) == (1, 1)
        row = {i: int(got.embedded[k]) for k, i in enumerate(got.ids)}
        assert row[none] == -1
        assert row[other] == -1
        assert got.embeddings[row[a]].tolist() == [1.0, 0.0, 0.5]
        assert got.embeddings[row[b]].tolist() == [0.0, 2.0, -0.25]
        k = got.ids.index(a)
        assert (got.lat[k], got.lng[k]) == pytest.approx((24.005, 89.005))
        k = got.ids.index(placeless)
        assert np.isnan(got.lat[k])
        assert np.isnan(got.lng[k])
        bugs = store.item_vectors("p", ItemFilter(types=("bug",)))
        assert bugs.ids == (b,)
        assert bugs.embeddings.shape == (1, 3)
        assert store.item_vectors("nobody", ItemFilter()).ids == ()
        assert store.item_vectors("nobody", ItemFilter()).embeddings.shape == (0, 0)
