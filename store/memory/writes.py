"""The write transactions' bodies: supersession, in-place changes, relations, replays.

Each ``*_body`` returns the function :meth:`SqlMemoryStore._write` runs inside
the write transaction, after the project's head is locked and a known
operation id has been handled; it checks versions and transitions, writes the
rows and appends history entries through a :class:`HeadWriter`.

Lifecycle (:data:`TRANSITIONS`): deleted items never change again; superseded
items can only be deleted (``create(supersedes=...)`` refuses them); a status
change to ``superseded`` happens only through ``create(supersedes=...)``; a
delete needs a reason.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

import sqlalchemy as sa

from store.errors import (
    InvalidTransition,
    MemoryNotFound,
    OperationConflict,
    TokenRefused,
    VersionConflict,
)
from store.memory.codec import (
    JsonText,
    entry_from_row,
    item_from_row,
    item_row,
    json_pair,
    jsonable,
    to_us,
)
from store.memory.digest import content_digest, new_item_id, rfc3339
from store.memory.group import Head, Job
from store.memory.interface import SignHead, WriteMeta, entry_hash
from store.memory.model import (
    HistoryEntry,
    MemoryItem,
    NewItem,
    ProjectHead,
    WriteResult,
)
from store.memory.prepared import RawTx
from store.memory.schema import history, items, operations, relations
from store.memory.tokens import refusal

__all__ = [
    "CHANGEABLE",
    "TRANSITIONS",
    "HeadWriter",
    "WriteBody",
    "change_body",
    "check_token",
    "create_body",
    "item_row_of",
    "load_item",
    "prior_result",
    "relate_body",
    "stored_result",
    "write_job",
]

TRANSITIONS: Mapping[str, frozenset[str]] = {
    "active": frozenset({"active", "potentially_stale", "deleted"}),
    "potentially_stale": frozenset({"active", "potentially_stale", "deleted"}),
    "superseded": frozenset({"superseded", "deleted"}),
    "deleted": frozenset(),
}
"""Status -> the statuses :meth:`SqlMemoryStore.change` may move it to."""

CHANGEABLE = frozenset({"status", "verdict", "verdict_facts", "deleted_reason", "metadata"})
"""Fields :meth:`SqlMemoryStore.change` may change in place."""


class HeadWriter:
    """Appends entries to one project's history inside one write transaction."""

    def __init__(
        self,
        tx: RawTx,
        project: str,
        seq: int,
        head_hash: str,
        meta: WriteMeta,
        sign_head: SignHead | None,
    ) -> None:
        self.tx, self.project, self.seq, self.hash = tx, project, seq, head_hash
        self.meta, self.sign_head = meta, sign_head
        self.start_seq = seq

    def append(self, item_id: str | None, action: str, change: Mapping[str, Any]) -> HistoryEntry:
        """Append one entry (hash-chained after the current head, head signed); return it."""
        seq = self.seq + 1
        at = rfc3339(self.meta.at)
        plain_change, change_text = json_pair(change)
        body = {
            "project": self.project,
            "seq": seq,
            "item_id": item_id,
            "action": action,
            "actor": self.meta.actor,
            "at": at,
            "change": plain_change,
            "request_id": self.meta.request_id,
            "operation_id": self.meta.operation_id,
        }
        new_hash = entry_hash(self.hash, body)
        head = ProjectHead(self.project, seq, new_hash)
        signature = self.sign_head(head) if self.sign_head is not None else None
        row = {
            **body,
            "at": to_us(self.meta.at),
            "prev_hash": self.hash,
            "hash": new_hash,
            "head_signature": signature,
        }
        self.tx.run(self.tx.p.entry, {**row, "change": change_text})
        self.seq, self.hash = seq, new_hash
        return entry_from_row(row)


def prior_result(tx: RawTx, project: str, meta: WriteMeta) -> WriteResult | None:
    """The stored result of ``meta.operation_id`` (replayed), None when it is new.

    Raises:
        OperationConflict: the operation id was applied with another request digest.
    """
    if meta.operation_id is None:
        return None
    applied, request_digest = tx.operation_digest(project, meta.operation_id)
    if not applied:
        return None
    if request_digest != meta.request_digest:
        raise OperationConflict(
            f"operation_id {meta.operation_id!r} was already applied with another request"
        )
    return stored_result(tx.conn, project, meta.operation_id)


def check_token(tx: RawTx, project: str, meta: WriteMeta) -> None:
    """Refuse the write unless ``meta.token_hash`` is a token of ``project`` that may write at
    ``meta.at`` (read in the write's own transaction: a revocation already committed counts).

    Raises:
        TokenRefused: with the API's code; a token of another project is ``token_invalid``.
    """
    assert meta.token_hash is not None
    record = tx.token(meta.token_hash)
    if record is not None and record.project != project:
        record = None  # another project's token is no token here
    refused = refusal(record, "write", meta.at)
    if refused is not None:
        raise TokenRefused(refused[1], code=refused[0])


def stored_result(conn: sa.Connection, project: str, operation_id: str) -> WriteResult:
    """The result an applied operation answered (``replayed=True``)."""
    op = conn.execute(
        sa.select(operations).where(
            operations.c.project == project, operations.c.operation_id == operation_id
        )
    ).one()
    entry = conn.execute(
        sa.select(history).where(history.c.project == project, history.c.seq == op.seq)
    ).one()
    item = item_row_of(conn, project, op.item_id) if op.item_id else None
    return WriteResult(
        item=item_from_row(item._mapping) if item is not None else None,
        entry=entry_from_row(entry._mapping),
        replayed=True,
    )


def write_job(
    project: str, meta: WriteMeta, sign_head: SignHead | None, body: WriteBody
) -> tuple[Job, Callable[[RawTx, BaseException], WriteResult]]:
    """The group-commit job of one write, and its recovery from a duplicate operation id.

    The job replays or rejects a known ``operation_id``, runs ``body`` from the
    project's head and records the operation; it returns the result and the new
    head. The recovery runs when a concurrent duplicate won the unique
    ``(project, operation_id)`` key: the stored result, or the original error.
    """

    def job(tx: RawTx, head: Head) -> tuple[WriteResult, Head]:
        if meta.token_hash is not None:
            check_token(tx, project, meta)
        prior = prior_result(tx, project, meta)
        if prior is not None:
            return prior, head
        writer = HeadWriter(tx, project, *head, meta, sign_head)
        result = body(tx, writer)
        if meta.operation_id is not None:
            tx.run(
                tx.p.operation,
                {
                    "project": project,
                    "operation_id": meta.operation_id,
                    "request_digest": meta.request_digest,
                    "item_id": result.item.id if result.item is not None else None,
                    "seq": result.entry.seq,
                    "at": to_us(meta.at),
                },
            )
        return result, (writer.seq, writer.hash)

    def recover(tx: RawTx, exc: BaseException) -> WriteResult:
        prior = prior_result(tx, project, meta) if meta.operation_id else None
        if prior is None:
            raise exc
        return prior

    return job, recover


def item_row_of(conn: sa.Connection, project: str, item_id: str) -> sa.Row[Any] | None:
    return conn.execute(
        sa.select(items).where(items.c.project == project, items.c.id == item_id)
    ).one_or_none()


def load_item(conn: sa.Connection, project: str, item_id: str) -> MemoryItem:
    row = item_row_of(conn, project, item_id)
    if row is None:
        raise MemoryNotFound(f"no memory {item_id!r} in this project")
    return item_from_row(row._mapping)


# ------------------------------------------------------------------ writes


WriteBody = Callable[[RawTx, "HeadWriter"], WriteResult]
"""A write transaction's body: runs in the open transaction, appends through the writer."""


def create_body(
    project: str,
    item: NewItem,
    meta: WriteMeta,
    supersedes: tuple[str, int] | None,
    digest_hex: str,
    content: Mapping[str, Any],
) -> WriteBody:
    """The transaction body of :meth:`SqlMemoryStore.create`."""

    def body(tx: RawTx, w: HeadWriter) -> WriteResult:
        conn = tx.conn
        wanted = list(dict.fromkeys(item.related_memory_ids))
        named = [*wanted, *([supersedes[0]] if supersedes else [])]
        rows = (
            {
                r.id: r
                for r in conn.execute(
                    sa.select(items.c.id, items.c.pk, items.c.status, items.c.version).where(
                        items.c.project == project, items.c.id.in_(named)
                    )
                )
            }
            if named
            else {}
        )
        missing = [i for i in wanted if i not in rows]
        if missing:
            raise MemoryNotFound(f"related memory {missing[0]!r} not found in this project")
        new_id = new_item_id(meta.at)
        at_us = to_us(meta.at)
        old_id: str | None = None
        if supersedes is not None:
            old_id, expected = supersedes
            old = rows.get(old_id)
            if old is None:
                raise MemoryNotFound(f"superseded memory {old_id!r} not found in this project")
            if old.status in ("deleted", "superseded"):
                raise InvalidTransition(
                    f"memory {old_id!r} is {old.status}: it cannot be superseded"
                )
            if old.version != expected:
                raise VersionConflict(
                    f"memory {old_id!r} is at version {old.version}, not {expected}"
                )
            conn.execute(
                items.update()
                .where(items.c.pk == old.pk)
                .values(
                    status="superseded",
                    superseded_by=new_id,
                    version=old.version + 1,
                    updated_at=at_us,
                )
            )
            w.append(
                old_id,
                "supersede",
                {"status": "superseded", "superseded_by": new_id, "version": old.version + 1},
            )
        texts: dict[str, JsonText] = {}
        row = item_row(
            item,
            item_id=new_id,
            project=project,
            at=meta.at,
            digest_hex=digest_hex,
            supersedes_id=old_id,
            texts=texts,
        )
        pk = tx.run(tx.p.item, {**row, **texts}).fetchone()[0]
        tx.run_many(
            tx.p.tag,
            [{"item_pk": pk, "tag": t, "project": project} for t in dict.fromkeys(item.tags)],
        )
        entry = w.append(
            new_id,
            "create",
            {"item": content, "content_digest": digest_hex, "supersedes_id": old_id},
        )
        edges = [(old_id, "supersedes")] if old_id else []
        edges += [(dst, "related") for dst in wanted]
        if edges:
            tx.run_many(
                tx.p.relation,
                [
                    {
                        "project": project,
                        "src_id": new_id,
                        "dst_id": dst,
                        "kind": kind,
                        "actor": meta.actor,
                        "created_at": at_us,
                        "seq": entry.seq,
                    }
                    for dst, kind in edges
                ],
            )
        return WriteResult(item=item_from_row(row), entry=entry)

    return body


def change_body(
    project: str,
    item_id: str,
    expected_version: int | None,
    changes: Mapping[str, Any],
    action: str,
    meta: WriteMeta,
) -> WriteBody:
    """The transaction body of :meth:`SqlMemoryStore.change`."""

    def body(tx: RawTx, w: HeadWriter) -> WriteResult:
        conn = tx.conn
        cur = load_item(conn, project, item_id)
        if cur.status == "deleted":
            raise InvalidTransition(f"memory {item_id!r} is deleted: it cannot change")
        if expected_version is not None and cur.version != expected_version:
            raise VersionConflict(
                f"memory {item_id!r} is at version {cur.version}, not {expected_version}"
            )
        status = changes.get("status", cur.status)
        if status not in TRANSITIONS[cur.status]:
            raise InvalidTransition(f"memory {item_id!r}: {cur.status} -> {status} is not allowed")
        if status == "deleted" and not changes.get("deleted_reason"):
            raise InvalidTransition("a delete needs a reason (deleted_reason)")
        if changes.get("deleted_reason") is not None and status != "deleted":
            raise InvalidTransition("deleted_reason is only set by a delete")
        values: dict[str, Any] = {
            k: jsonable(list(v) if isinstance(v, tuple) else v) for k, v in changes.items()
        }
        new = dataclasses.replace(
            cur,
            status=status,
            verdict=changes.get("verdict", cur.verdict),
            verdict_facts=tuple(changes.get("verdict_facts", cur.verdict_facts)),
            metadata=changes.get("metadata", cur.metadata),
            deleted_reason=changes.get("deleted_reason", cur.deleted_reason),
        )
        record = dict(values)
        if "metadata" in changes:
            values["content_digest"] = record["content_digest"] = content_digest(new)
        version = cur.version + 1
        record["version"] = version
        conn.execute(
            items.update()
            .where(items.c.project == project, items.c.id == item_id)
            .values(**values, version=version, updated_at=to_us(meta.at))
        )
        entry = w.append(item_id, action, record)
        return WriteResult(item=load_item(conn, project, item_id), entry=entry)

    return body


def relate_body(project: str, src_id: str, dst_id: str, kind: str, meta: WriteMeta) -> WriteBody:
    """The transaction body of :meth:`SqlMemoryStore.relate`."""

    def body(tx: RawTx, w: HeadWriter) -> WriteResult:
        conn = tx.conn
        src = load_item(conn, project, src_id)
        load_item(conn, project, dst_id)
        if src.status == "deleted":
            raise InvalidTransition(f"memory {src_id!r} is deleted: it cannot change")
        edge = (
            relations.c.project == project,
            relations.c.src_id == src_id,
            relations.c.dst_id == dst_id,
            relations.c.kind == kind,
        )
        seq = conn.execute(sa.select(relations.c.seq).where(*edge)).scalar_one_or_none()
        if seq is not None:
            old = conn.execute(
                sa.select(history).where(history.c.project == project, history.c.seq == seq)
            ).one()
            return WriteResult(item=src, entry=entry_from_row(old._mapping), replayed=True)
        entry = w.append(src_id, "relate", {"dst_id": dst_id, "kind": kind})
        conn.execute(
            relations.insert().values(
                project=project,
                src_id=src_id,
                dst_id=dst_id,
                kind=kind,
                actor=meta.actor,
                created_at=to_us(meta.at),
                seq=entry.seq,
            )
        )
        return WriteResult(item=src, entry=entry)

    return body
