"""The recall bench's instrument: the labelled set, its bulk loader and its metrics.

The set is regenerated and compared byte for byte with the committed file; every
paraphrase is checked against the rule that it shares no content word with its
relevant items; the bulk loader's rows are found by the store's own full-text
and place indexes (SQLite, and PostgreSQL through the copy the bench uses).
No timing is asserted.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

import pytest

from bench.recall_set.generate import (
    CASES,
    SET_PATH,
    generate,
    item_text,
    render,
    shares_content_word,
)
from bench.recall_set.load import (
    bulk_load,
    copy_items,
    filler,
    keys_of,
    read_recall_set,
    set_and_filler,
)
from bench.recall_set.metrics import hidden_shown, ndcg_at, recall_at
from store.memory import open_store
from store.memory.chain import verify_chain
from store.memory.model import ItemFilter
from store.memory.sql import SqlMemoryStore


def test_generator_is_deterministic_and_the_committed_set_is_its_output() -> None:
    first = render(generate())
    assert render(generate()) == first
    assert SET_PATH.read_text(encoding="utf-8") == first, (
        "bench/recall_set/recall_set.jsonl differs from the generator: the committed set "
        "precedes tuning; regenerate only on purpose (python -m bench.recall_set.generate)"
    )


def test_every_paraphrase_shares_no_content_word_with_its_relevant_items() -> None:
    rset = read_recall_set()
    by_key = {it["key"]: it for it in rset.items}
    paraphrases = [q for q in rset.queries if q["case"] == "paraphrase"]
    assert len(paraphrases) >= 15
    for q in paraphrases:
        texts = [t for k in q["relevant"] for t in item_text(by_key[k])]
        assert shares_content_word(q["query"], texts) == set(), q


def test_the_paraphrase_rule_catches_shared_words_and_their_forms() -> None:
    assert shares_content_word("flooded paddy", ["The paddy was under water"]) == {
        ("paddy", "paddy")
    }
    assert shares_content_word("flooding", ["a flood"]) == {("flooding", "flood")}
    assert shares_content_word("the submerged rice", ["paddy under water at the field"]) == set()


def test_the_set_covers_every_case_type_with_consistent_labels() -> None:
    rset = read_recall_set()
    assert 300 <= len(rset.items) <= 1000
    assert len(rset.queries) >= 100
    counts = {c: sum(q["case"] == c for q in rset.queries) for c in CASES}
    assert all(n >= 15 for n in counts.values()), counts
    assert rset.meta["cases"] == counts
    keys = {it["key"] for it in rset.items}
    superseded = {it["supersedes"] for it in rset.items if it.get("supersedes")}
    for q in rset.queries:
        assert set(q["relevant"]) <= keys
        assert set(q["hidden"]) <= keys
        assert all(g in (1, 2) for g in q["relevant"].values())
        if q.get("asOf") is None:
            assert not superseded & set(q["relevant"]), q["key"]
        if q["case"] == "supersession":
            assert set(q["hidden"]) <= superseded
            assert q["hidden"]
    as_of = [q for q in rset.queries if q.get("asOf")]
    assert as_of
    assert all(q["asOf"] == "@phase1" and q["hidden"] for q in as_of)
    names = [q for q in rset.queries if q["case"] == "name"]
    assert any("reservoir north-east of the town" in q["query"] for q in names)


def test_metrics_on_known_rankings() -> None:
    rel = {"a": 2, "b": 1}
    assert ndcg_at(["a", "b", "x"], rel) == pytest.approx(1.0)
    assert ndcg_at(["x", "b", "a"], rel) < ndcg_at(["b", "a", "x"], rel) < 1.0
    assert ndcg_at([], rel) == 0.0
    assert recall_at(["x", "a", "a"], rel) == 0.5
    assert hidden_shown(["a", "h"], ["h", "z"]) == 1
    assert hidden_shown([f"x{i}" for i in range(10)] + ["h"], ["h"]) == 0  # 11th: not shown
    assert hidden_shown(["a"] * 10 + ["h"], ["h"]) == 1  # duplicates collapse: h is 2nd


def _check_history(store: Any, ids: dict[str, str], phase1_at: str) -> None:
    """The bulk load's history is the write path's: a verifying chain ending at the head,
    and ``@phase1`` before the corrections (the superseded item active then, its successor
    not yet written)."""
    rset = read_recall_set()
    entries = store.history("bench", limit=10**6)
    assert verify_chain(entries).ok
    assert store.head("bench").seq == entries[-1].seq == len(entries)
    assert store.head("bench").hash == entries[-1].hash
    fix = next(r for r in rset.items if r.get("supersedes"))
    old, new = ids[fix["supersedes"]], ids[fix["key"]]
    at = dt.datetime.fromisoformat(phase1_at.replace("Z", "+00:00"))
    then = store.states_as_of("bench", [old, new], at)
    assert then[old].status == "active"
    assert new not in then
    now = store.states_as_of("bench", [old, new], at + dt.timedelta(days=1))
    assert now[old].status == "superseded"
    assert now[old].superseded_by == new


def _check_bulk(store: Any, ids: dict[str, str]) -> None:
    rset = read_recall_set()
    keys = keys_of(ids)
    by_key = {it["key"]: it for it in rset.items}
    for q in [q for q in rset.queries if q["case"] == "keyword"][:5]:
        found = {keys.get(i) for i, _ in store.search_text("bench", q["query"], limit=10)}
        assert set(q["relevant"]) <= found, q
    sup = next(q for q in rset.queries if q["case"] == "supersession")
    (old,) = sup["hidden"]
    new = next(k for k, g in sup["relevant"].items() if g == 2)
    found = {keys.get(i) for i, _ in store.search_text("bench", sup["query"], limit=20)}
    assert new in found
    assert old not in found
    item = store.get("bench", ids[old])
    assert item.status == "superseded"
    assert item.superseded_by == ids[new]
    assert [r.kind for r in store.relations("bench", ids[new])] == ["supersedes"]
    # the place index holds the rows too
    target = by_key[next(iter(rset.queries[30]["relevant"]))]
    lat, lng = target["where"]["lat"], target["where"]["lng"]
    box = (lat - 1e-3, lng - 1e-3, lat + 1e-3, lng + 1e-3)
    page = store.list_items("bench", ItemFilter(bbox=box), limit=200)
    assert ids[target["key"]] in {it.id for it in page.items}


def test_bulk_load_is_found_by_search_text_on_sqlite(sqlite_url: str) -> None:
    rset = read_recall_set()
    store = open_store(sqlite_url)
    try:
        assert isinstance(store, SqlMemoryStore)
        loaded = bulk_load(store, "bench", set_and_filler(rset, len(rset.items) + 300))
        ids = loaded.ids
        assert len(ids) == len(rset.items) + 300
        _check_bulk(store, {k: v for k, v in ids.items() if not k.startswith("f")})
        _check_history(store, ids, loaded.phase1_at)
    finally:
        store.close()


def _schema(store: SqlMemoryStore) -> list[tuple[Any, ...]]:
    with store.engine.connect() as conn:
        return [
            tuple(r)
            for r in conn.exec_driver_sql(
                "SELECT type, name, tbl_name, sql FROM sqlite_master ORDER BY type, name"
            )
        ]


def _search_rows(store: SqlMemoryStore, sql: str) -> list[tuple[Any, ...]]:
    with store.engine.connect() as conn:
        return [tuple(r) for r in conn.exec_driver_sql(sql)]


def test_bulk_load_leaves_the_schema_and_the_search_index_as_row_writes_would(
    tmp_path: Path,
) -> None:
    """The bulk loader drops the secondary indexes and the insert trigger and fills FTS5
    and the R*Tree itself: afterwards the schema is the migration's, the full-text index
    checks against its content table, and both indexes hold what row-by-row inserts
    (through the triggers: :func:`copy_items` into another SQLite store) give them."""
    rset = read_recall_set()
    bulk = open_store(f"sqlite:///{(tmp_path / 'bulk.sqlite').as_posix()}")
    rows = open_store(f"sqlite:///{(tmp_path / 'rows.sqlite').as_posix()}")
    try:
        assert isinstance(bulk, SqlMemoryStore)
        assert isinstance(rows, SqlMemoryStore)
        before = _schema(bulk)
        bulk_load(bulk, "bench", set_and_filler(rset, len(rset.items) + 200))
        assert _schema(bulk) == before
        with bulk.engine.connect() as conn:  # raises when the index and the rows disagree
            conn.exec_driver_sql(
                "INSERT INTO items_fts(items_fts, rank) VALUES ('integrity-check', 1)"
            )
        assert copy_items(bulk, rows, "bench") == len(rset.items) + 200
        for sql in (
            "SELECT pk, min_lat, max_lat, min_lng, max_lng FROM items_rtree ORDER BY pk",
            "SELECT rowid FROM items_fts WHERE items_fts MATCH 'flood OR road' ORDER BY rowid",
            "SELECT count(*) FROM items_fts_docsize",
        ):
            assert _search_rows(bulk, sql) == _search_rows(rows, sql), sql
        assert _search_rows(bulk, "SELECT count(*) FROM items_rtree")[0][0] > len(rset.items)
        for q in rset.queries[:20]:
            assert bulk.search_text("bench", q["query"], limit=10) == rows.search_text(
                "bench", q["query"], limit=10
            ), q["key"]
    finally:
        bulk.close()
        rows.close()


def test_copy_to_postgresql_keeps_the_bulk_load_searchable(
    sqlite_url: str, postgres_url: str
) -> None:
    rset = read_recall_set()
    src = open_store(sqlite_url)
    dst = open_store(postgres_url)
    try:
        assert isinstance(src, SqlMemoryStore)
        assert isinstance(dst, SqlMemoryStore)
        loaded = bulk_load(src, "bench", set_and_filler(rset, len(rset.items) + 50))
        ids = loaded.ids
        assert copy_items(src, dst, "bench") == len(rset.items) + 50
        _check_bulk(dst, {k: v for k, v in ids.items() if not k.startswith("f")})
        _check_history(dst, ids, loaded.phase1_at)
    finally:
        src.close()
        dst.close()


def test_filler_is_deterministic_and_outside_the_demo_area(tmp_path: Path) -> None:
    a, b = list(filler(200)), list(filler(200))
    assert a == b
    assert all(abs(r["where"]["lat"] - 23.36) >= 0.03 for r in a)
