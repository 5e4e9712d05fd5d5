"""Load the recall set into a memory store: through the API, or in bulk for the latency runs.

* :func:`load_api` — every item through the real write path: ``memory_create``
  (phase 1), then ``memory_update`` for the corrections (phase 2), called in
  process through :func:`api.dispatch.call_primitive` with a token from
  :func:`api.memory.auth.issue_token`, in a :class:`~api.context.ServiceContext`
  whose place manifest holds the demo sample's named features (so ``where:
  {place: "Kanke Lake"}`` resolves as it does for a user). Between the phases it
  records the instant the set's ``asOf: "@phase1"`` stands for. The context's
  write rate limit is lifted (the bench measures ranking, not the limiter).
* :func:`bulk_load` — not through the API, into SQLite: the ``items``, ``item_tags``,
  ``relations`` and ``history`` rows (:func:`store.memory.codec.item_row`, real
  content digests; the history entries the write path appends — a ``create`` per
  item, a ``supersede`` before the correction that replaces one — hash-chained
  as :func:`store.memory.interface.entry_hash` chains them, and the project's head),
  built by a small process pool and inserted with ``executemany``, one transaction
  per batch, the secondary indexes and the insert trigger dropped meanwhile; then
  FTS5 and the R*Tree are filled from ``items`` as the trigger would have filled
  them and the indexes recreated from their own SQL. So ``asOf`` reads the same
  history, and search the same index, a written store has. It records the instant
  before the first phase-2 record (what ``@phase1`` means for the bulk store).
* :func:`filler` — deterministic extra observations (the set's templates at
  invented places outside the demo area, 2019–2025) to grow a store to 10^4..10^6;
  :func:`set_and_filler` writes them after the set's phase 1 and before its phase
  2, so ``asOf: "@phase1"`` hides the corrections only and is judged from the
  history of every candidate.
"""

from __future__ import annotations

import datetime as dt
import json
import multiprocessing
import random
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import sqlalchemy as sa

from bench.recall_set.generate import SET_PATH, demo_features, read_set
from bench.recall_set.vocab import TOPICS
from store import address
from store.facts import canonical_cbor, digest
from store.memory.codec import item_row, jsonable, to_us
from store.memory.digest import content_of, digest_of_content, new_item_id, rfc3339
from store.memory.interface import GENESIS_HASH
from store.memory.model import Anchor, NewItem
from store.memory.schema import history, item_tags, items, projects, relations
from store.memory.sql import SqlMemoryStore

__all__ = [
    "BULK_PROJECT",
    "CREATE_FIELDS",
    "ApiLoad",
    "BulkLoad",
    "RecallSet",
    "bulk_load",
    "cached_sqlite",
    "copy_items",
    "filler",
    "keys_of",
    "load_api",
    "ranked_keys",
    "read_recall_set",
    "set_and_filler",
    "write_manifest",
]

CREATE_FIELDS = (
    "type",
    "title",
    "statement",
    "tags",
    "where",
    "valid_at",
    "valid_from",
    "valid_to",
)
"""The set's item fields that are memory_create arguments (the rest are labels)."""
_BATCH = 2000


@dataclass(frozen=True)
class RecallSet:
    """The parsed set."""

    meta: dict[str, Any]
    """The meta record."""
    items: tuple[dict[str, Any], ...]
    """Item records in write order (phase 1 first)."""
    queries: tuple[dict[str, Any], ...]
    """Query records."""


def read_recall_set(path: Path = SET_PATH) -> RecallSet:
    """The set at ``path`` (the committed file by default)."""
    recs = list(read_set(path))
    meta = next(r for r in recs if r["record"] == "meta")
    its = sorted((r for r in recs if r["record"] == "item"), key=lambda r: (r["phase"], r["key"]))
    qs = tuple(r for r in recs if r["record"] == "query")
    return RecallSet(meta, tuple(its), qs)


# --------------------------------------------------------------------------- through the API


@dataclass(frozen=True)
class ApiLoad:
    """A set written through the API."""

    ctx: Any
    """The :class:`~api.context.ServiceContext` (its memory store holds the set)."""
    token: str
    """A read-write token of :attr:`project`."""
    project: str
    """The project written to."""
    ids: dict[str, str]
    """Set key -> store item id."""
    phase1_at: str
    """RFC 3339 instant after phase 1 and before phase 2 (what ``@phase1`` means)."""
    seconds: float
    """Wall time of the writes."""


def write_manifest(path: Path) -> Path:
    """A place manifest with the demo sample's named features (what where_is resolves)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"features": demo_features()}))
    return path


def _args(item: dict[str, Any]) -> dict[str, Any]:
    args = {k: item[k] for k in CREATE_FIELDS if item.get(k) is not None}
    args["metadata"] = {"bench_key": item["key"]}
    args["operation_id"] = f"recall-set-{item['key']}"
    return args


def load_api(
    rset: RecallSet, workdir: Path, *, memory_url: str | None = None, project: str = "recallbench"
) -> ApiLoad:
    """Write the set through ``memory_create`` / ``memory_update`` (see the module docstring)."""
    from api.context import ServiceContext
    from api.dispatch import call_primitive
    from api.limiter import RateLimiter
    from api.memory.auth import issue_token
    from api.receipts import Signer

    data = workdir / "data"
    data.mkdir(parents=True, exist_ok=True)
    ctx = ServiceContext(
        data,
        signer=Signer.generate(),
        manifest_path=write_manifest(workdir / "manifest.json"),
        memory_url=memory_url or f"sqlite:///{(workdir / 'memory.sqlite').resolve()}",
    )
    ctx.write_limiter = RateLimiter(rate=1e9, burst=10**9)
    token, _ = issue_token(ctx.memory(), project, ("read", "write"), actor="bench:recall-set")
    ids: dict[str, str] = {}
    versions: dict[str, int] = {}
    phase1_at = ""
    t0 = time.perf_counter()
    for item in rset.items:
        if item["phase"] == 2 and not phase1_at:
            time.sleep(0.002)
            phase1_at = dt.datetime.now(dt.UTC).isoformat().replace("+00:00", "Z")
            time.sleep(0.002)
        args = _args(item)
        if item.get("supersedes"):
            old = item["supersedes"]
            args.update(id=ids[old], expected_version=versions[old])
            answer = call_primitive(ctx, "memory_update", args, token=token)
        else:
            answer = call_primitive(ctx, "memory_create", args, token=token)
        written = answer["result"]["item"]
        ids[item["key"]] = written["id"]
        versions[item["key"]] = int(written["version"])
    if not phase1_at:
        phase1_at = dt.datetime.now(dt.UTC).isoformat().replace("+00:00", "Z")
    return ApiLoad(ctx, token, project, ids, phase1_at, time.perf_counter() - t0)


# --------------------------------------------------------------------------- bulk


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


def _batches(it: Iterable[dict[str, Any]], n: int) -> Iterator[list[dict[str, Any]]]:
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
    ``executemany`` on the raw connection, one transaction per :data:`_BATCH` records,
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
    for batch in _batches(records, _BATCH):
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
    with multiprocessing.get_context("fork").Pool(_WORKERS) as pool:
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


_SYLLABLES = ("ba", "ko", "ri", "ma", "tu", "le", "sa", "no", "pi", "da", "gu", "he", "ja", "ro")


def filler(n: int, seed: int = 7) -> Iterator[dict[str, Any]]:
    """``n`` extra observations: the set's templates at invented places outside the demo area."""
    rng = random.Random(seed)
    names = sorted(
        {
            "".join(rng.choice(_SYLLABLES) for _ in range(3)).capitalize() + " " + kind
            for kind in ("field", "toli", "pond", "road")
            for _ in range(300)
        }
    )
    for i in range(n):
        topic = TOPICS[rng.randrange(len(TOPICS))]
        facet = topic.facets[rng.randrange(len(topic.facets))]
        place = rng.choice(names)
        lat = 23.36 + rng.choice((-1, 1)) * rng.uniform(0.03, 0.5)
        lng = 85.33 + rng.choice((-1, 1)) * rng.uniform(0.03, 0.5)
        day = dt.date(2019, 1, 1) + dt.timedelta(days=rng.randrange(7 * 365))
        yield {
            "key": f"f{i:07d}",
            "type": "observation",
            "title": facet.title.format(place=place),
            "statement": facet.statement.format(place=place, date=day.isoformat()),
            "tags": list(topic.tags),
            "where": {"lat": round(lat, 6), "lng": round(lng, 6)},
            "valid_at": day.isoformat(),
        }


def set_and_filler(rset: RecallSet, total: int) -> Iterator[dict[str, Any]]:
    """The set's phase-1 items, then filler up to ``total`` records, then its phase-2 items
    (so the filler is older than the corrections, as a project's past is)."""
    yield from (r for r in rset.items if r.get("phase", 1) != 2)
    yield from filler(max(0, total - len(rset.items)))
    yield from (r for r in rset.items if r.get("phase", 1) == 2)


def keys_of(ids: dict[str, str]) -> dict[str, str]:
    """Item id -> set key (the inverse of a load's key -> id map)."""
    return {v: k for k, v in ids.items()}


def ranked_keys(ranked: Sequence[str], keys: dict[str, str]) -> list[str]:
    """Item ids in rank order as set keys (ids outside the set kept as themselves)."""
    return [keys.get(i, i) for i in ranked]


# --------------------------------------------------------------------------- cached stores


def cached_sqlite(rset: RecallSet, total: int, cache_dir: Path) -> tuple[str, dict[str, str], str]:
    """A bulk-loaded SQLite store of the set plus filler (``total`` items), built once.

    Kept under ``cache_dir`` with a marker written only after a complete load
    (a killed build is redone). Recall and ``search_text`` never write, so the
    cached file is used in place.

    Returns:
        The store's URL, the set's key -> item id map and the ``@phase1`` instant.
    """
    from store.memory.sqlite import SqliteMemoryStore

    path = cache_dir / f"recall_v{_CACHE_VERSION}_n{total}.sqlite"
    marker = path.with_suffix(".ids.json")
    url = f"sqlite:///{path.resolve()}"
    if marker.exists() and path.exists():
        kept = json.loads(marker.read_text())
        return url, kept["ids"], kept["phase1_at"]
    cache_dir.mkdir(parents=True, exist_ok=True)
    for p in (path, marker, Path(f"{path}-wal"), Path(f"{path}-shm")):
        p.unlink(missing_ok=True)
    store = SqliteMemoryStore(url, synchronous="NORMAL")
    try:
        store.migrate()
        loaded = bulk_load(store, BULK_PROJECT, set_and_filler(rset, total))
    finally:
        store.close()
    wanted = {r["key"] for r in rset.items}
    set_ids = {k: v for k, v in loaded.ids.items() if k in wanted}
    marker.write_text(json.dumps({"ids": set_ids, "phase1_at": loaded.phase1_at}))
    return url, set_ids, loaded.phase1_at


_CACHE_VERSION = 2
"""Bumped when the cached stores' contents change (2: history entries, filler before phase 2)."""
BULK_PROJECT = "recallbench"
"""The project bulk loads write."""


def copy_items(src: SqlMemoryStore, dst: SqlMemoryStore, project: str) -> int:
    """Copy a project's items, tags, relations, history and head from a SQLite ``src`` into
    ``dst``.

    The rows are read back as stored (content digests and hashes included), so another
    store gets the same items as the cached SQLite one without recomputing them. Into
    PostgreSQL the rows go with ``COPY ... FROM STDIN`` (psycopg) in one transaction,
    keeping the source's primary keys (the ``pk`` sequence is moved past them); into
    another SQLite store, through Core inserts. Either way the destination's own
    search structures are maintained by its triggers, generated column and indexes.

    Returns:
        The number of items copied.
    """
    tables = [(t, [c.name for c in t.c]) for t in (items, item_tags, relations, history, projects)]
    raw = src.engine.raw_connection()
    try:
        cur = raw.cursor()

        def rows(table: str, names: list[str]) -> Iterator[tuple[Any, ...]]:
            cur.execute(f"SELECT {', '.join(names)} FROM {table} WHERE project = ?", (project,))
            while chunk := cur.fetchmany(_BATCH):
                yield from chunk

        if dst.backend == "postgresql":
            return _copy_pg(dst, rows, tables)
        n = 0
        with dst.write_tx() as conn:
            for table, names in tables:
                json_cols = [c.name for c in table.c if isinstance(c.type, sa.JSON)]
                for batch in _batches(
                    (dict(zip(names, r, strict=True)) for r in rows(table.name, names)), _BATCH
                ):
                    for r in batch:
                        for c in json_cols:
                            r[c] = json.loads(r[c]) if r[c] is not None else None
                    n += len(batch) if table is items else 0
                    conn.execute(table.insert(), batch)
        return n
    finally:
        raw.close()


def _copy_pg(dst: SqlMemoryStore, rows: Any, tables: list[tuple[sa.Table, list[str]]]) -> int:
    n = 0
    pg: Any = dst.engine.raw_connection()
    try:
        with pg.cursor() as cur:
            for table, names in tables:
                with cur.copy(f"COPY {table.name} ({', '.join(names)}) FROM STDIN") as cp:
                    for r in rows(table.name, names):
                        cp.write_row(r)
                        n += table is items
            cur.execute(
                "SELECT setval(pg_get_serial_sequence('items', 'pk'), "
                "(SELECT coalesce(max(pk), 1) FROM items))"
            )
        pg.commit()
        with pg.cursor() as cur:
            cur.execute("ANALYZE")
        pg.commit()
    finally:
        pg.close()
    return n
