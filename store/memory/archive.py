"""The memory archive: a project's rows as plain records, and loading them back.

Format (``earthmem-memory-archive/1``): a sequence of ``{"table": name, "row":
{...}}`` records, JSON-safe (times as integer microseconds since the epoch, the
embedding as a list of floats). The first record is ``meta`` (format, project,
schema revision, history head); then ``items``, ``relations``, ``history`` (in
seq order), ``operations`` and ``tokens`` (hashes only, never secrets). The
``item_tags`` index is rebuilt from the items. Moving a project between
backends (SQLite to PostgreSQL) is an export from one store and an import
into the other.

Import is one transaction and idempotent: a record identical to a stored row
is counted as unchanged; a different row under the same key is an
:class:`~store.errors.ImportConflict`. The history must verify (each hash
recomputed, each ``prev_hash`` the previous entry's) and continue the target
project's chain; item content digests must match their content
(:class:`~store.errors.InvalidArchive` otherwise).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import sqlalchemy as sa

from store.errors import CanonicalFormError, ImportConflict, InvalidArchive
from store.memory.codec import from_us, item_from_row, jsonable, pack_vector, unpack_vector
from store.memory.digest import content_digest, rfc3339
from store.memory.interface import GENESIS_HASH, entry_hash
from store.memory.schema import history, item_tags, items, operations, projects, relations, tokens

__all__ = ["ARCHIVE_FORMAT", "TABLES", "export_rows", "import_rows"]

ARCHIVE_FORMAT = "earthmem-memory-archive/1"
"""The ``format`` of the ``meta`` record."""

TABLES: Mapping[str, sa.Table] = {
    "items": items,
    "relations": relations,
    "history": history,
    "operations": operations,
    "tokens": tokens,
}
"""Archived tables, in replay order."""

_KEYS: Mapping[str, tuple[str, ...]] = {
    "items": ("id",),
    "relations": ("project", "src_id", "dst_id", "kind"),
    "history": ("project", "seq"),
    "operations": ("project", "operation_id"),
    "tokens": ("id",),
}


def _columns(table: sa.Table) -> list[sa.Column[Any]]:
    return [c for c in table.c if c.name != "pk"]


def _record(name: str, row: Mapping[Any, Any]) -> dict[str, Any]:
    """A stored row as its archive record (JSON-safe)."""
    out = {c.name: row[c.name] for c in _columns(TABLES[name])}
    if name == "items":
        vec = unpack_vector(out["embedding"])
        out["embedding"] = list(vec) if vec is not None else None
    return jsonable(out)


def _db_row(name: str, rec: Mapping[str, Any]) -> dict[str, Any]:
    """An archive record as the row to insert (the embedding packed)."""
    out = dict(rec)
    if name == "items":
        vec = out.get("embedding")
        out["embedding"] = pack_vector(tuple(float(x) for x in vec) if vec is not None else None)
    return out


def export_rows(
    conn: sa.Connection, project: str, revision: str | None
) -> Iterator[dict[str, Any]]:
    """Every row of ``project`` as archive records (``meta`` first)."""
    head = conn.execute(
        sa.select(projects.c.head_seq, projects.c.head_hash).where(projects.c.project == project)
    ).one_or_none()
    yield {
        "table": "meta",
        "row": {
            "format": ARCHIVE_FORMAT,
            "project": project,
            "revision": revision,
            "head_seq": int(head.head_seq) if head else 0,
            "head_hash": str(head.head_hash) if head else GENESIS_HASH,
        },
    }
    order: Mapping[str, Sequence[str]] = {
        "items": ("created_at", "id"),
        "relations": ("seq", "src_id", "dst_id", "kind"),
        "history": ("seq",),
        "operations": ("seq", "operation_id"),
        "tokens": ("created_at", "id"),
    }
    for name, table in TABLES.items():
        q = (
            sa.select(*_columns(table))
            .where(table.c.project == project)
            .order_by(*(table.c[k] for k in order[name]))
        )
        for row in conn.execute(q):
            yield {"table": name, "row": _record(name, row._mapping)}


def _check_fields(name: str, rec: Mapping[str, Any]) -> None:
    want = {c.name for c in _columns(TABLES[name])}
    got = set(rec)
    if got != want:
        raise InvalidArchive(
            f"{name} record fields differ from the schema: missing {sorted(want - got)}, "
            f"unknown {sorted(got - want)}"
        )


def _verify_history(entries: list[dict[str, Any]]) -> None:
    """Recompute every hash and link of imported history (per project, seq order)."""
    last: dict[str, dict[str, Any]] = {}
    for e in entries:
        prev = last.get(e["project"])
        if prev is not None and (e["seq"] != prev["seq"] + 1 or e["prev_hash"] != prev["hash"]):
            raise InvalidArchive(f"history of {e['project']!r} is broken at seq {e['seq']}")
        if prev is None and e["seq"] == 1 and e["prev_hash"] != GENESIS_HASH:
            raise InvalidArchive(f"history of {e['project']!r} does not start at the genesis hash")
        body = {
            k: e[k]
            for k in ("project", "seq", "item_id", "action", "actor", "change", "request_id")
        }
        body["operation_id"] = e["operation_id"]
        body["at"] = rfc3339(from_us(e["at"]))
        if entry_hash(e["prev_hash"], body) != e["hash"]:
            raise InvalidArchive(f"history entry {e['project']!r} #{e['seq']} fails its hash")
        last[e["project"]] = e


def import_rows(
    conn: sa.Connection,
    records: Sequence[Mapping[str, Any]],
    *,
    lock_head: Callable[[sa.Connection, str], tuple[int, str]],
) -> dict[str, int]:
    """Load archive records on ``conn`` (the caller's transaction); return counts.

    Returns:
        ``{table: rows inserted, ..., "unchanged": rows already stored identically}``.

    Raises:
        InvalidArchive: malformed records, a history that does not verify, a content
            digest that does not match.
        ImportConflict: a record that differs from the stored row with the same key, or
            history that does not continue the stored chain of its project.
    """
    by_table: dict[str, list[dict[str, Any]]] = {name: [] for name in TABLES}
    for rec in records:
        if not isinstance(rec, Mapping) or not isinstance(rec.get("row"), Mapping):
            raise InvalidArchive("every record is {'table': ..., 'row': {...}}")
        name = rec.get("table")
        if name == "meta":
            fmt = rec["row"].get("format")
            if fmt != ARCHIVE_FORMAT:
                raise InvalidArchive(f"archive format {fmt!r}; this store reads {ARCHIVE_FORMAT}")
            continue
        if not isinstance(name, str) or name not in TABLES:
            raise InvalidArchive(f"unknown archive table {name!r}")
        row = jsonable(dict(rec["row"]))
        _check_fields(name, row)
        by_table[name].append(row)
    for it in by_table["items"]:
        try:
            ok = content_digest(item_from_row(_db_row("items", it))) == it["content_digest"]
        except (KeyError, TypeError, ValueError, IndexError, CanonicalFormError) as exc:
            raise InvalidArchive(f"item {it.get('id')!r} is malformed: {exc}") from exc
        if not ok:
            raise InvalidArchive(f"item {it['id']!r}: content digest does not match its content")
    by_table["history"].sort(key=lambda e: (e["project"], e["seq"]))
    try:
        _verify_history(by_table["history"])
    except (KeyError, TypeError, ValueError, CanonicalFormError) as exc:
        if isinstance(exc, InvalidArchive):
            raise
        raise InvalidArchive(f"malformed history record: {exc}") from exc
    project_names = sorted({r["project"] for rows in by_table.values() for r in rows})
    heads = {p: lock_head(conn, p) for p in project_names}
    counts = {name: 0 for name in TABLES}
    counts["unchanged"] = 0
    try:
        for name, rows in by_table.items():
            table = TABLES[name]
            for row in rows:
                key = _KEYS[name]
                stored = conn.execute(
                    sa.select(*_columns(table)).where(*(table.c[k] == row[k] for k in key))
                ).one_or_none()
                if stored is not None:
                    if _record(name, stored._mapping) != row:
                        raise ImportConflict(
                            f"{name} {[row[k] for k in key]} differs from the stored row"
                        )
                    counts["unchanged"] += 1
                    continue
                if name == "history":
                    seq, head_hash = heads[row["project"]]
                    if row["seq"] != seq + 1 or row["prev_hash"] != head_hash:
                        raise ImportConflict(
                            f"history of {row['project']!r} does not continue the stored chain "
                            f"(stored head #{seq}, imported entry #{row['seq']})"
                        )
                    heads[row["project"]] = (row["seq"], row["hash"])
                if name == "items":
                    pk = conn.execute(
                        items.insert().values(_db_row(name, row)).returning(items.c.pk)
                    ).scalar_one()
                    tags = list(dict.fromkeys(row["tags"]))
                    if tags:
                        conn.execute(
                            item_tags.insert(),
                            [{"item_pk": pk, "tag": t, "project": row["project"]} for t in tags],
                        )
                else:
                    conn.execute(table.insert().values(_db_row(name, row)))
                counts[name] += 1
        for p, (seq, head_hash) in heads.items():
            conn.execute(
                projects.update()
                .where(projects.c.project == p)
                .values(head_seq=seq, head_hash=head_hash)
            )
    except sa.exc.IntegrityError as exc:
        raise ImportConflict(f"an imported record collides with a stored row: {exc.orig}") from exc
    except sa.exc.OperationalError:
        raise
    except sa.exc.StatementError as exc:
        raise InvalidArchive(f"a record does not fit the schema: {exc.orig}") from exc
    return counts
