"""The memory store's conformance suite, second part: tokens, export and import, concurrent writers.

Mixed into :class:`tests.store.memory.conformance.MemoryStoreConformance`, whose ``store`` and
``url`` fixtures these tests use.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import os
import subprocess
import sys
import textwrap
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from store.errors import (
    DuplicateToken,
    ImportConflict,
    InvalidArchive,
    TokenRefused,
)
from store.memory import open_store
from store.memory.chain import verify_chain
from store.memory.interface import MemoryStore
from store.memory.model import ItemFilter, Token
from tests.store.memory.items import REPO, T0, meta, new_item, sign, verify


class OperationsConformance:
    """Tokens, export/import and writers racing: behaviour every backend must have."""

    # ------------------------------------------------------------------ tokens

    def test_tokens(self, store: MemoryStore) -> None:
        t = Token("tok_1", "T", ("read", "write"), "agent-1", "ci", T0, T0 + dt.timedelta(days=90))
        store.add_token(t, "h" * 64)
        assert store.token_by_hash("h" * 64) == t
        assert store.token_by_hash("nope") is None
        with pytest.raises(DuplicateToken):
            store.add_token(dataclasses.replace(t, id="tok_2"), "h" * 64)
        store.add_token(Token("tok_3", "U", ("read",), "x", None, T0, None), "u" * 64)
        assert [x.id for x in store.list_tokens("T")] == ["tok_1"]
        assert [x.id for x in store.list_tokens()] == ["tok_1", "tok_3"]
        assert store.revoke_token("tok_1", T0 + dt.timedelta(days=1))
        assert store.revoke_token("tok_1", T0 + dt.timedelta(days=2))
        got = store.token_by_hash("h" * 64)
        assert got is not None
        assert got.revoked_at == T0 + dt.timedelta(days=1)
        assert not store.revoke_token("tok_missing", T0)
        assert store.projects() == ["T", "U"]

    def test_a_write_checks_its_token_in_its_own_transaction(self, store: MemoryStore) -> None:
        """A write carrying a token hash stores nothing unless, read in its transaction, the
        token is the project's, may write, and is neither revoked nor expired then."""
        day = dt.timedelta(days=1)
        tokens = {
            "w": Token("tok_w", "T", ("read", "write"), "a", None, T0, None),
            "r": Token("tok_r", "T", ("read",), "a", None, T0, None),
            "x": Token("tok_x", "T", ("read", "write"), "a", None, T0 - 2 * day, T0 - day),
            "o": Token("tok_o", "U", ("read", "write"), "a", None, T0, None),
        }
        for k, t in tokens.items():
            store.add_token(t, k * 64)

        def write(token_hash: str, op: str) -> Any:
            m = dataclasses.replace(meta(op, "d"), token_hash=token_hash)
            return store.create("T", new_item(op), m, sign_head=sign)

        assert write("w" * 64, "ok").item is not None
        refused = {
            "r" * 64: "insufficient_permission",
            "x" * 64: "token_expired",
            "o" * 64: "token_invalid",  # another project's token is no token here
            "n" * 64: "token_invalid",
        }
        store.revoke_token("tok_w", T0 - day)
        refused["w" * 64] = "token_revoked"
        for token_hash, code in refused.items():
            with pytest.raises(TokenRefused) as err:
                write(token_hash, f"op-{token_hash[0]}")
            assert err.value.code == code
        assert store.head("T").seq == 1  # only the first write
        assert len(store.list_items("T", ItemFilter(), limit=10).items) == 1
        with pytest.raises(TokenRefused):  # a replay of an applied operation is refused too
            write("w" * 64, "ok")

    # ------------------------------------------------------------------ archive

    def test_export_import_round_trip(self, store: MemoryStore, tmp_path: Path) -> None:
        a = store.create("p", new_item("a"), meta("op-a", "d"), sign_head=sign).item
        assert a is not None
        b = store.create("p", new_item("b"), meta(), supersedes=(a.id, 1), sign_head=sign).item
        assert b is not None
        store.relate("p", b.id, a.id, "refines", meta(), sign_head=sign)
        store.add_token(Token("tok_p", "p", ("read",), "x", None, T0, None), "p" * 64)
        store.create("other", new_item("not exported"), meta())
        records = list(store.export_project("p"))
        assert records[0]["table"] == "meta"
        json.dumps(records)  # JSON-safe
        target = open_store(f"sqlite:///{(tmp_path / 'target.sqlite').as_posix()}")
        try:
            dry = target.import_records(records, dry_run=True)
            assert dry["items"] == 2
            assert dry["history"] == 4
            assert dry["tokens"] == 1
            assert target.head("p").seq == 0
            assert target.get("p", a.id) is None
            assert target.import_records(records) == dry
            assert target.get("p", a.id) == store.get("p", a.id)
            assert target.get("p", b.id) == store.get("p", b.id)
            assert target.history("p") == store.history("p")
            assert target.head("p") == store.head("p")
            assert target.relations("p", a.id) == store.relations("p", a.id)
            assert target.list_tokens("p") == store.list_tokens("p")
            assert target.get("other", a.id) is None
            assert target.projects() == ["p"]
            again = target.import_records(records)
            assert again["unchanged"] == len(records) - 1
            assert again["items"] == 0
            replay = target.create("p", new_item("a"), meta("op-a", "d"))
            assert replay.replayed
            assert replay.item is not None
            assert replay.item.id == a.id
            target.create("p", new_item("continues"), meta(), sign_head=sign)
            assert verify_chain(target.history("p"), verify_head=verify).ok
            # a differing row under the same key: a conflict, nothing stored
            head = target.head("p")
            bad = [dict(r, row=dict(r["row"])) for r in records]
            for r in bad:
                if r["table"] == "items" and r["row"]["id"] == a.id:
                    r["row"]["title"] = "changed"
            with pytest.raises((ImportConflict, InvalidArchive)):
                target.import_records(bad)
            assert target.head("p") == head
        finally:
            target.close()
        # a tampered history is refused
        fresh = open_store(f"sqlite:///{(tmp_path / 'fresh.sqlite').as_posix()}")
        try:
            forged = [dict(r, row=dict(r["row"])) for r in records]
            next(r for r in forged if r["table"] == "history")["row"]["actor"] = "mallory"
            with pytest.raises(InvalidArchive):
                fresh.import_records(forged)
            assert fresh.projects() == []
        finally:
            fresh.close()

    # ------------------------------------------------------------------ concurrency

    def test_eight_threads_write_at_once(self, store: MemoryStore) -> None:
        base = store.create("p", new_item("counter"), meta()).item
        assert base is not None

        def work(t: int) -> list[int]:
            seqs = []
            for i in range(6):
                r = store.create(
                    "p", new_item(f"t{t}-{i}"), meta(f"op-{t}-{i}", "d"), sign_head=sign
                )
                seqs.append(r.entry.seq)
                r = store.change(
                    "p", base.id, None, {"metadata": {"t": t, "i": i}}, "update", meta()
                )
                seqs.append(r.entry.seq)
            return seqs

        with ThreadPoolExecutor(8) as pool:
            seqs = [s for got in pool.map(work, range(8)) for s in got]
        assert sorted(seqs) == list(range(2, 2 + 8 * 12))  # no seq lost, none twice
        entries = store.history("p", limit=10_000)
        assert [e.seq for e in entries] == list(range(1, 2 + 8 * 12))
        assert verify_chain(entries).ok
        counter = store.get("p", base.id)
        assert counter is not None
        assert counter.version == 1 + 8 * 6
        assert len(store.list_items("p", ItemFilter(), limit=1000).items) == 1 + 8 * 6

    def test_threads_send_the_same_operations_at_once(self, store: MemoryStore) -> None:
        """Eight threads send the same ten operations at once: each applied exactly once."""

        def work(t: int) -> list[tuple[str, bool, int]]:
            out = []
            for i in range(10):
                r = store.create(
                    "p", new_item(f"same-{i}"), meta(f"op-same-{i}", "d"), sign_head=sign
                )
                assert r.item is not None
                out.append((r.item.id, r.replayed, r.entry.seq))
            return out

        with ThreadPoolExecutor(8) as pool:
            results = list(pool.map(work, range(8)))
        for i in range(10):
            got = [r[i] for r in results]
            assert len({(item_id, seq) for item_id, _, seq in got}) == 1  # one item, one entry
            assert sorted(rep for _, rep, _ in got) == [False] + [True] * 7
        entries = store.history("p", limit=1000)
        assert [e.seq for e in entries] == list(range(1, 11))
        assert verify_chain(entries, verify_head=verify, require_signatures=True).ok
        assert len(store.list_items("p", ItemFilter(), limit=50).items) == 10

    def test_duplicate_operation_from_two_processes(
        self, store: MemoryStore, url: str, tmp_path: Path
    ) -> None:
        script = textwrap.dedent(
            """
            import json, os, sys, time
            sys.path.insert(0, sys.argv[3])
            from tests.store.memory.items import meta, new_item
            from store.memory import open_store
            store = open_store(sys.argv[1], migrate=False)
            go = sys.argv[2]
            open(go + "." + str(os.getpid()), "w").close()
            while not os.path.exists(go):
                time.sleep(0.001)
            out = []
            for i in range(5):
                r = store.create("p", new_item("dup"), meta("op-dup-%d" % i, "same"))
                out.append([r.item.id, r.replayed, r.entry.seq])
            print(json.dumps(out))
            """
        )
        go = tmp_path / "go"
        env = {**os.environ, "PYTHONPATH": str(REPO)}
        procs = [
            subprocess.Popen(
                [sys.executable, "-c", script, url, str(go), str(REPO)],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                env=env,
            )
            for _ in range(2)
        ]
        deadline = time.monotonic() + 120
        while len(list(tmp_path.glob("go.*"))) < 2 and time.monotonic() < deadline:
            if any(p.poll() is not None for p in procs):
                break
            time.sleep(0.01)
        go.touch()
        outs = []
        for p in procs:
            out, err = p.communicate(timeout=180)
            assert p.returncode == 0, err
            outs.append(json.loads(out))
        for i in range(5):
            (id1, rep1, seq1), (id2, rep2, seq2) = outs[0][i], outs[1][i]
            assert id1 == id2
            assert seq1 == seq2
            assert sorted([rep1, rep2]) == [False, True]  # exactly one applied
        assert len(store.history("p")) == 5
        assert len(store.list_items("p", ItemFilter(), limit=50).items) == 5
