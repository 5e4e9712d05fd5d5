"""Load the recall set into a memory store: through the API, or in bulk for the latency runs.

* :func:`load_api` — every item through the real write path: ``memory_create``
  (phase 1), then ``memory_update`` for the corrections (phase 2), called in
  process through :func:`api.dispatch.call_primitive` with a token from
  :func:`api.memory.auth.issue_token`, in a :class:`~api.context.ServiceContext`
  whose place manifest holds the demo sample's named features (so ``where:
  {place: "Kanke Lake"}`` resolves as it does for a user). Between the phases it
  records the instant the set's ``asOf: "@phase1"`` stands for. The context's
  write rate limit is lifted (the bench measures ranking, not the limiter).
* :func:`bulk_load` (:mod:`bench.recall_set.bulk`) — not through the API, into SQLite:
  the rows the write path stores, in bulk. It records the instant before the first
  phase-2 record (what ``@phase1`` means for the bulk store).
* :func:`filler` — deterministic extra observations (the set's templates at
  invented places outside the demo area, 2019–2025) to grow a store to 10^4..10^6;
  :func:`set_and_filler` writes them after the set's phase 1 and before its phase
  2, so ``asOf: "@phase1"`` hides the corrections only and is judged from the
  history of every candidate.
"""

from __future__ import annotations

import datetime as dt
import json
import random
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import sqlalchemy as sa

from bench.recall_set.bulk import BATCH, BulkLoad, batches, bulk_load
from bench.recall_set.generate import SET_PATH, demo_features, read_set
from bench.recall_set.vocab import TOPICS
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
            while chunk := cur.fetchmany(BATCH):
                yield from chunk

        if dst.backend == "postgresql":
            return _copy_pg(dst, rows, tables)
        n = 0
        with dst.write_tx() as conn:
            for table, names in tables:
                json_cols = [c.name for c in table.c if isinstance(c.type, sa.JSON)]
                for batch in batches(
                    (dict(zip(names, r, strict=True)) for r in rows(table.name, names)), BATCH
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
