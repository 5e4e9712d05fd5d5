"""Group commit on both backends: concurrent writers share a transaction, each write alone.

One writer holds the batch open (its head signer waits) while the others queue;
the next batch then holds all of them: good writes to two projects, a pair with
the same operation id, one with a known operation id but another request, one
that fails after its item row was inserted (its signer raises), and one naming
a related memory that does not exist. Every good write must land, the
duplicates must answer the same item and entry, the failures must leave nothing
behind, and both projects' chains must verify.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from store.errors import MemoryNotFound, OperationConflict, TokenRefused
from store.memory import open_store
from store.memory.chain import verify_chain
from store.memory.model import ItemFilter, ProjectHead, Token, WriteResult
from store.memory.sql import SqlMemoryStore
from tests.store.memory.items import T0, meta, new_item, sign, verify


class SignerDown(Exception):
    """The failure injected into one write of the batch, after its item row is written."""


class GroupCommitConformance:
    @pytest.fixture
    def url(self) -> str:
        raise NotImplementedError

    @pytest.fixture
    def store(self, url: str) -> Iterator[SqlMemoryStore]:
        s = open_store(url)
        assert isinstance(s, SqlMemoryStore)
        yield s
        s.close()

    def test_one_batch_of_concurrent_writers(self, store: SqlMemoryStore) -> None:
        store.create("p", new_item("before"), meta("op-known", "digest-a"), sign_head=sign)
        entered, go = threading.Event(), threading.Event()

        def holding(head: ProjectHead) -> str:
            entered.set()
            assert go.wait(60)
            return sign(head)

        def failing(head: ProjectHead) -> str:
            raise SignerDown("signer down")

        results: dict[str, WriteResult | BaseException] = {}

        def write(name: str, project: str, signer: Callable[[ProjectHead], str], **kw: Any) -> None:
            item = kw.pop("item", new_item(name))
            try:
                results[name] = store.create(project, item, meta(**kw), sign_head=signer)
            except Exception as exc:
                results[name] = exc

        start = store.group.stats()
        leader = threading.Thread(target=write, args=("leader", "p", holding))
        leader.start()
        assert entered.wait(60)
        plans: list[tuple[str, str, Callable[[ProjectHead], str], dict[str, Any]]] = [
            ("good-1", "p", sign, {"op": "op-1", "digest": "d1"}),
            ("dup-a", "p", sign, {"op": "op-dup", "digest": "dd"}),
            ("broken", "p", failing, {"op": "op-broken", "digest": "db"}),
            ("dup-b", "p", sign, {"op": "op-dup", "digest": "dd"}),
            ("conflict", "p", sign, {"op": "op-known", "digest": "digest-b"}),
            (
                "dangling",
                "p",
                sign,
                {"item": new_item("dangling", related_memory_ids=("mem_nothing",))},
            ),
            ("other-project", "q", sign, {"op": "op-1", "digest": "d1"}),
            ("good-2", "p", sign, {}),
        ]
        others = []
        for name, project, signer, kw in plans:  # queued in this order, one after the other
            queued = store.group.queued
            t = threading.Thread(target=write, args=(name, project, signer), kwargs=kw)
            t.start()
            others.append(t)
            deadline = time.monotonic() + 60
            while store.group.queued == queued and time.monotonic() < deadline:
                time.sleep(0.005)
        assert store.group.queued == len(plans)  # all waiting behind the leader's batch
        go.set()
        for t in [leader, *others]:
            t.join(60)
        stats = store.group.stats()  # the leader's batch, then all the others in one
        assert (stats.submitted - start.submitted, stats.batches - start.batches) == (9, 2)
        assert (stats.writes - start.writes, stats.largest) == (9, len(plans))

        assert isinstance(results["broken"], SignerDown)
        assert isinstance(results["conflict"], OperationConflict)
        assert isinstance(results["dangling"], MemoryNotFound)
        landed = {n: r for n, r in results.items() if isinstance(r, WriteResult)}
        assert set(landed) == {"leader", "good-1", "dup-a", "dup-b", "other-project", "good-2"}
        a, b = landed["dup-a"], landed["dup-b"]
        assert a.item == b.item
        assert a.entry == b.entry
        assert (a.replayed, b.replayed) == (False, True)

        titles = {i.title for i in store.list_items("p", ItemFilter(statuses=()), limit=100).items}
        assert titles == {"before", "leader", "good-1", "dup-a", "good-2"}
        for name in ("leader", "good-1", "dup-a", "good-2"):
            r = landed[name]
            assert r.item is not None
            assert store.get("p", r.item.id) == r.item
        assert [x.title for x in store.list_items("q", ItemFilter(), limit=10).items] == [
            "other-project"
        ]

        entries = store.history("p")
        assert [e.seq for e in entries] == [1, 2, 3, 4, 5]  # no gap where "broken" failed
        assert [e.item_id for e in entries[1:]] == [
            landed[n].item.id  # type: ignore[union-attr]
            for n in ("leader", "good-1", "dup-a", "good-2")
        ]
        report = verify_chain(entries, verify_head=verify, require_signatures=True)
        assert report.ok, report.problems
        head = store.head("p")
        assert (head.seq, head.hash) == (entries[-1].seq, entries[-1].hash)
        q_entries = store.history("q")
        assert verify_chain(q_entries, verify_head=verify, require_signatures=True).ok
        assert store.head("q").seq == len(q_entries) == 1

        again = store.create("p", new_item("dup-a"), meta("op-dup", "dd"), sign_head=sign)
        assert again.replayed
        assert again.item == a.item
        assert again.entry == a.entry
        broken = store.create("p", new_item("broken"), meta("op-broken", "db"), sign_head=sign)
        assert not broken.replayed
        assert broken.entry.seq == 6

    def test_tokens_in_one_batch_each_checked_and_a_revocation_seen_next(
        self, store: SqlMemoryStore
    ) -> None:
        """A batch reads a token once (RawTx.token): writes with other tokens in the same
        batch are still judged by their own, and a revocation committed after the batch
        refuses the next write (its transaction reads the token again)."""
        day = dt.timedelta(days=1)
        for token_hash, tok in {
            "w": Token("tok_w", "p", ("read", "write"), "a", None, T0, None),
            "r": Token("tok_r", "p", ("read",), "a", None, T0, None),
            "o": Token("tok_o", "q", ("read", "write"), "a", None, T0, None),
            "v": Token("tok_v", "p", ("read", "write"), "a", None, T0 - day, None),
        }.items():
            store.add_token(tok, token_hash * 64)
        store.revoke_token("tok_v", T0 - day)
        entered, go = threading.Event(), threading.Event()

        def holding(head: ProjectHead) -> str:
            entered.set()
            assert go.wait(60)
            return sign(head)

        results: dict[str, WriteResult | BaseException] = {}

        def write(name: str, token: str, signer: Callable[[ProjectHead], str] = sign) -> None:
            m = dataclasses.replace(meta(f"op-{name}", "d"), token_hash=token * 64)
            try:
                results[name] = store.create("p", new_item(name), m, sign_head=signer)
            except Exception as exc:
                results[name] = exc

        leader = threading.Thread(target=write, args=("leader", "w", holding))
        leader.start()
        assert entered.wait(60)
        others = []
        for name, token in (("w1", "w"), ("r", "r"), ("o", "o"), ("v", "v"), ("w2", "w")):
            queued = store.group.queued
            t = threading.Thread(target=write, args=(name, token))
            t.start()
            others.append(t)
            deadline = time.monotonic() + 60
            while store.group.queued == queued and time.monotonic() < deadline:
                time.sleep(0.005)
        assert store.group.queued == 5  # one batch after the leader's
        go.set()
        for t in [leader, *others]:
            t.join(60)
        codes = {n: getattr(r, "code", "ok") for n, r in results.items()}
        assert codes == {
            "leader": "ok",
            "w1": "ok",
            "r": "insufficient_permission",
            "o": "token_invalid",
            "v": "token_revoked",
            "w2": "ok",
        }
        assert store.head("p").seq == 3
        store.revoke_token("tok_w", T0 - day)
        write("after", "w")
        refused = results["after"]
        assert isinstance(refused, TokenRefused)
        assert refused.code == "token_revoked"
        assert store.head("p").seq == 3


class TestSqliteGroupCommit(GroupCommitConformance):
    @pytest.fixture
    def url(self, sqlite_url: str) -> str:
        return sqlite_url


class TestPostgresGroupCommit(GroupCommitConformance):
    @pytest.fixture
    def url(self, postgres_url: str) -> str:
        return postgres_url
