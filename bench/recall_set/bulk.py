"""The recall bench's bulk loader: the set's records as the rows the write path stores, fast.

:func:`bulk_load` inserts into SQLite, not through the API: the ``items``, ``item_tags``,
``relations`` and ``history`` rows (:func:`store.memory.codec.item_row`, real content
digests; the history entries the write path appends, hash-chained as
:func:`store.memory.interface.entry_hash` chains them, and the project's head), built by a
small pool of spawned processes (not forked: the caller may be multithreaded, and a fork
copies locks other threads hold) and inserted with ``executemany``, one transaction per
batch, the secondary indexes and the insert trigger dropped meanwhile; then FTS5 and the
R*Tree are filled from ``items`` as the trigger would have filled them and the indexes
recreated from their own SQL.
"""

from __future__ import annotations

import datetime as dt
import json
import multiprocessing
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa

from store import address
from store.facts import canonical_cbor, digest
from store.memory.codec import item_row, jsonable, to_us
from store.memory.digest import content_of, digest_of_content, new_item_id, rfc3339
from store.memory.interface import GENESIS_HASH
from store.memory.model import Anchor, NewItem
from store.memory.schema import history, items, relations
from store.memory.sql import SqlMemoryStore

__all__ = ["BATCH", "BulkLoad", "batches", "bulk_load"]

BATCH = 2000
"""Records per transaction of a load (and rows per batch of a copy)."""


def _day(text: str) -> dt.datetime:
    return dt.datetime.fromisoformat(text).replace(tzinfo=dt.UTC)


def _anchor(item: dict[str, Any]) -> Anchor:
    where = item.get("where")
    if not where:
        return Anchor(kind="none", geometry=None, bbox=None)
    if "lat" in where:
        lat, lng = float(where["lat"]), float(where["lng"])
        kind = "point"
        name = None
    else:
        lat, lng = float(item["centre"]["lat"]), float(item["centre"]["lng"])
        kind, name = "place", str(where["place"])
    cell = address.encode(lat, lng)
    d = 1e-4
    return Anchor(
        kind=kind,  # type: ignore[arg-type]
        geometry={"type": "Point", "coordinates": [lng, lat]},
        bbox=(lat - d, lng - d, lat + d, lng + d),
        cell=cell,
        place=name,
    )


def _new_item(item: dict[str, Any]) -> NewItem:
    start = item.get("valid_from") or item.get("valid_at")
    end = item.get("valid_to") or item.get("valid_at")
    return NewItem(
        type=item["type"],
        title=item["title"],
        statement=item["statement"],
        tags=tuple(item["tags"]),
        details=item.get("details"),
        confidence=0.6,
        importance=0.5,
        evidence=(),
        related_memory_ids=(),
        metadata={"bench_key": item["key"]},
        asserted_by="agent",
        applicability="current",
        scope={"kind": "project", "value": None},
        anchor=_anchor(item),
        valid_from=_day(start) if start else None,
        valid_to=_day(end) if end else None,
        claim=None,
        verdict=None,
        verdict_facts=(),
        actor="bench:bulk",
        session=None,
    )


def batches(it: Iterable[dict[str, Any]], n: int) -> Iterator[list[dict[str, Any]]]:
    batch: list[dict[str, Any]] = []
    for x in it:
        batch.append(x)
        if len(batch) >= n:
            yield batch
            batch = []
    if batch:
        yield batch


@dataclass(frozen=True)
class BulkLoad:
    """What :func:`bulk_load` wrote."""

    ids: dict[str, str]
    """Record key -> item id."""
    phase1_at: str
    """RFC 3339 instant after the last record before the first phase-2 record (after every
    record when there is none): what the set's ``asOf: "@phase1"`` stands for."""


def bulk_load(store: SqlMemoryStore, project: str, records: Iterable[dict[str, Any]]) -> BulkLoad:
    """Insert item records (set or :func:`filler` records) into a SQLite store, in bulk.

    Supersession (a record with ``supersedes``, after the record it replaces) is
    written as the store writes it: the old row ``superseded`` (version 2,
    ``superseded_by``), the new row ``supersedes_id``, a ``supersedes`` edge, and
    the history entries ``supersede`` (the old item) then ``create`` (the new one).
    Record ``n`` is written at 2025-06-01 + ``n`` ms.

    The rows are those the write path stores (:func:`store.memory.codec.item_row`,
    JSON columns as SQLAlchemy's JSON type writes them, ``json.dumps``), inserted with
    ``executemany`` on the raw connection, one transaction per :data:`BATCH` records,
    with the secondary indexes and the ``AFTER INSERT`` trigger dropped during the load.
    Then the search structures get what the trigger would have given the new rows —
    FTS5 and R*Tree filled from ``items`` in one statement each — and the indexes and
    the trigger are recreated from their own stored SQL (so the schema is the
    migration's, unchanged). A failed load restores them too; the cache marker is
    written only after a complete load, so a half-built file is rebuilt.

    Raises:
        ValueError: a store that is not SQLite (PostgreSQL stores are filled from a
            SQLite one with :func:`copy_items`).
    """
    if store.backend != "sqlite":
        raise ValueError("bulk_load writes SQLite stores; copy_items fills PostgreSQL")
    raw: Any = store.engine.raw_connection()
    try:
        cur = raw.cursor()
        cur.execute(f"PRAGMA cache_size=-{_CACHE_KIB}")
        kept = _drop_for_load(cur)
        try:
            cur.execute("SELECT coalesce(max(pk), 0) FROM items")
            first_pk = int(cur.fetchone()[0]) + 1
            loaded = _insert_rows(cur, project, records, first_pk)
            cur.execute("BEGIN IMMEDIATE")
            cols = "title, statement, details, tags_text"
            cur.execute(
                f"INSERT INTO items_fts(rowid, {cols}) SELECT pk, {cols} FROM items "
                "WHERE pk >= ? ORDER BY pk",
                (first_pk,),
            )
            cur.execute(
                "INSERT INTO items_rtree(pk, min_lat, max_lat, min_lng, max_lng) "
                "SELECT pk, min_lat, max_lat, min_lng, max_lng FROM items "
                "WHERE pk >= ? AND min_lat IS NOT NULL ORDER BY pk",
                (first_pk,),
            )
            cur.execute("COMMIT")
        finally:
            if raw.in_transaction:
                cur.execute("ROLLBACK")
            cur.execute("BEGIN IMMEDIATE")
            for sql in kept:
                cur.execute(sql)
            cur.execute("COMMIT")
        cur.close()
    finally:
        raw.close()
    return loaded


_CACHE_KIB = 256 * 1024
"""SQLite page cache of the loading connection (KiB): the load's pages stay in memory."""
_DROPPED_TABLES = ("items", "item_tags", "history", "relations")


def _drop_for_load(cur: Any) -> list[str]:
    """Drop the secondary indexes of the tables a load fills and the ``AFTER INSERT``
    trigger; their SQL, to recreate them after the load."""
    marks = ", ".join("?" for _ in _DROPPED_TABLES)
    cur.execute(
        "SELECT type, name, sql FROM sqlite_master WHERE sql IS NOT NULL AND "
        f"((type = 'index' AND tbl_name IN ({marks})) OR (type = 'trigger' AND name = ?))",
        (*_DROPPED_TABLES, "items_ai"),
    )
    found = cur.fetchall()
    cur.execute("BEGIN IMMEDIATE")
    for kind, name, _ in found:
        cur.execute(f'DROP {kind.upper()} "{name}"')
    cur.execute("COMMIT")
    return [sql for _, _, sql in found]


@dataclass(frozen=True)
class _Planned:
    """One record with what the load's order fixes: its instant, id, pk and history seqs."""

    rec: dict[str, Any]
    at: dt.datetime
    item_id: str
    pk: int
    old: str | None
    """The id of the item it supersedes."""
    seq: int
    """The seq of its ``create`` entry (``seq - 1`` is the ``supersede`` one when ``old``)."""


_ITEM_NAMES = [c.name for c in items.c]
_ITEM_JSON = {c.name for c in items.c if isinstance(c.type, sa.JSON)}
_HIST_NAMES = [c.name for c in history.c]
_REL_NAMES = [c.name for c in relations.c]


def _insert_sql(table: str, names: Sequence[str]) -> str:
    return f"INSERT INTO {table} ({', '.join(names)}) VALUES ({', '.join('?' * len(names))})"


def _entry_body(
    project: str, seq: int, item_id: str, action: str, change: dict[str, Any], at: dt.datetime
) -> dict[str, Any]:
    return {
        "project": project,
        "seq": seq,
        "item_id": item_id,
        "action": action,
        "actor": "bench:bulk",
        "at": rfc3339(at),
        "change": change,
        "request_id": None,
        "operation_id": None,
    }


def _build(
    args: tuple[str, list[_Planned]],
) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]], list[tuple[Any, ...]], list[Any]]:
    """The rows of a batch but the history hashes (a pool worker's share of the load):
    item rows, tag rows, edges, and per history entry its row (``prev_hash`` and ``hash``
    unset) with the canonical CBOR of its body, which the chain hashes in order."""
    project, batch = args
    rows, tags, edges, entries = [], [], [], []
    for p in batch:
        item = _new_item(p.rec)
        content = content_of(item)
        digest_hex = digest_of_content(content)
        row = item_row(
            item,
            item_id=p.item_id,
            project=project,
            at=p.at,
            digest_hex=digest_hex,
            supersedes_id=p.old,
        )
        row["pk"] = p.pk
        rows.append(
            tuple(
                (_dumps(row[c]) if row[c] is not None else None) if c in _ITEM_JSON else row[c]
                for c in _ITEM_NAMES
            )
        )
        tags += [(p.pk, t, project) for t in dict.fromkeys(item.tags)]
        bodies = []
        if p.old is not None:
            change = {"status": "superseded", "superseded_by": p.item_id, "version": 2}
            bodies.append(_entry_body(project, p.seq - 1, p.old, "supersede", change, p.at))
            edge = {
                "project": project,
                "src_id": p.item_id,
                "dst_id": p.old,
                "kind": "supersedes",
                "actor": "bench:bulk",
                "created_at": row["created_at"],
                "seq": p.seq,
            }
            edges.append(tuple(edge[c] for c in _REL_NAMES))
        change = {"item": content, "content_digest": digest_hex, "supersedes_id": p.old}
        bodies.append(_entry_body(project, p.seq, p.item_id, "create", jsonable(change), p.at))
        for body in bodies:
            hrow = {**body, "at": to_us(p.at), "change": _dumps(body["change"])}
            hrow.update(prev_hash=None, hash=None, head_signature=None)
            entries.append((tuple(hrow[c] for c in _HIST_NAMES), canonical_cbor(body)))
    return rows, tags, edges, entries


def _plan(
    project: str, records: Iterable[dict[str, Any]], first_pk: int, state: dict[str, Any]
) -> Iterator[tuple[str, list[_Planned]]]:
    """Batches of planned records (ids, pks, seqs in load order); ``state`` collects the
    key -> id map, the record count and the ``@phase1`` instant."""
    base = dt.datetime(2025, 6, 1, tzinfo=dt.UTC)
    ids: dict[str, str] = state["ids"]
    seq, n = 0, 0
    for batch in batches(records, BATCH):
        out = []
        for rec in batch:
            at = base + dt.timedelta(milliseconds=n)
            if rec.get("phase") == 2 and state["phase1_at"] is None:
                state["phase1_at"] = at - dt.timedelta(microseconds=500)
            old = ids.get(rec["supersedes"]) if rec.get("supersedes") else None
            item_id = new_item_id(at)
            ids[rec["key"]] = item_id
            seq += 2 if old is not None else 1
            out.append(_Planned(rec, at, item_id, first_pk + n, old, seq))
            n += 1
        state["n"] = n
        yield project, out
    state["end"] = base + dt.timedelta(milliseconds=n)


def _insert_rows(
    cur: Any, project: str, records: Iterable[dict[str, Any]], first_pk: int
) -> BulkLoad:
    state: dict[str, Any] = {"ids": {}, "phase1_at": None, "n": 0}
    prev = bytes.fromhex(GENESIS_HASH)
    last_seq = 0
    hist_at = _HIST_NAMES.index("prev_hash"), _HIST_NAMES.index("hash")
    # close + join, not the context manager: Pool.__exit__ terminates the workers with
    # SIGTERM, which a process started with SIGTERM ignored (as pytest-xdist's workers were
    # seen to be) passes on through exec; its idle workers then never exit and the join
    # hangs (seen: a CI run of 4 workers stopped here for good)
    pool = multiprocessing.get_context("spawn").Pool(_WORKERS)
    try:
        for rows, tags, edges, entries in pool.imap(
            _build, _plan(project, records, first_pk, state)
        ):
            hist = []
            for hrow, body in entries:
                h = digest(prev + body)
                r = list(hrow)
                r[hist_at[0]], r[hist_at[1]] = prev.hex(), h.hex()
                hist.append(tuple(r))
                prev = h
            last_seq += len(entries)
            olds = [(e[_REL_NAMES.index("src_id")], e[_REL_NAMES.index("dst_id")]) for e in edges]
            cur.execute("BEGIN IMMEDIATE")
            cur.executemany(_insert_sql("items", _ITEM_NAMES), rows)
            cur.executemany("INSERT INTO item_tags (item_pk, tag, project) VALUES (?, ?, ?)", tags)
            cur.executemany(
                "UPDATE items SET status = 'superseded', superseded_by = ?, version = 2 "
                "WHERE id = ?",
                olds,
            )
            cur.executemany(_insert_sql("relations", _REL_NAMES), edges)
            cur.executemany(_insert_sql("history", _HIST_NAMES), hist)
            cur.execute("COMMIT")
    finally:
        pool.close()
        pool.join()

    if last_seq:
        cur.execute("BEGIN IMMEDIATE")
        cur.execute(
            "INSERT INTO projects (project, head_seq, head_hash) VALUES (?, ?, ?)",
            (project, last_seq, prev.hex()),
        )
        cur.execute("COMMIT")
    phase1_at = state["phase1_at"] or state.get("end") or dt.datetime(2025, 6, 1, tzinfo=dt.UTC)
    return BulkLoad(state["ids"], rfc3339(phase1_at))


_WORKERS = 2
"""Processes building a load's rows (the chain's hashes and the inserts stay in order in
the loading process)."""


def _dumps(value: Any) -> str:
    """A JSON column's text as SQLAlchemy's JSON type writes it (``json.dumps``)."""
    return json.dumps(value)
