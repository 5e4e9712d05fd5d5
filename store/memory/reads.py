"""Item reads: the WHERE of a filter, reads by id and paged listings, of whole items or
of their briefs.

A brief (:class:`~store.memory.model.ItemBrief`) is what ranking and filtering
need of an item — kind, status, scope, who wrote it, confidence, importance, place,
valid time, title — without its body: reading one decodes the anchor's JSON only,
where a whole item decodes eight JSON columns. Recall ranks briefs and reads whole
items for the hits it returns.

Pure query builders and row readers over one open connection; the store's methods
(:meth:`~store.memory.sql.SqlMemoryStore.get_many`, ``get_briefs``, ``list_items``,
``list_briefs``) open the read transaction; a backend phrases the project and box
conditions (its hooks), :func:`conditions` the rest. The same SQL runs on SQLite and
PostgreSQL.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import sqlalchemy as sa

from store.errors import InvalidMemoryQuery
from store.memory.codec import decode_cursor, encode_cursor, from_us, to_us
from store.memory.digest import anchor_from_dict
from store.memory.model import ItemBrief, ItemFilter
from store.memory.schema import item_tags, items

__all__ = [
    "BRIEF_COLUMNS",
    "ReadPin",
    "brief_from_row",
    "conditions",
    "page_rows",
    "rows_by_id",
]

_C = items.c
BRIEF_COLUMNS = (
    _C.id,
    _C.project,
    _C.type,
    _C.title,
    _C.status,
    _C.scope_kind,
    _C.actor,
    _C.asserted_by,
    _C.confidence,
    _C.importance,
    _C.anchor,
    _C.valid_from,
    _C.valid_to,
    _C.superseded_by,
    _C.created_at,
)
"""The ``items`` columns a brief reads."""


def conditions(
    project_condition: sa.ColumnElement[bool],
    bbox_condition: Callable[[tuple[float, float, float, float]], sa.ColumnElement[bool]],
    where: ItemFilter,
) -> list[sa.ColumnElement[bool]]:
    """The WHERE conditions of a filter (the backend's project condition first; all AND-ed).

    Raises:
        InvalidMemoryQuery: an empty or reversed bbox.
    """
    c = items.c
    out: list[sa.ColumnElement[bool]] = [project_condition]
    if where.types:
        out.append(c.type.in_(where.types))
    if where.statuses:
        out.append(c.status.in_(where.statuses))
    for tag in dict.fromkeys(where.tags):
        out.append(sa.exists().where(item_tags.c.item_pk == c.pk, item_tags.c.tag == tag))
    if where.bbox is not None:
        s, w, n, e = where.bbox
        if not (s <= n and w <= e):
            raise InvalidMemoryQuery(f"bbox {where.bbox} is empty or reversed")
        out.append(bbox_condition(where.bbox))
        out += [c.min_lat <= n, c.max_lat >= s, c.min_lng <= e, c.max_lng >= w]
    if where.valid_at is not None:
        t = to_us(where.valid_at)
        out.append(sa.or_(c.valid_from.is_(None), c.valid_from <= t))
        out.append(sa.or_(c.valid_to.is_(None), c.valid_to >= t))
    if where.written_before is not None:
        out.append(c.created_at <= to_us(where.written_before))
    if where.scope_kinds:
        out.append(c.scope_kind.in_(where.scope_kinds))
    if where.actor is not None:
        out.append(c.actor == where.actor)
    return out


def brief_from_row(r: Mapping[str, Any]) -> ItemBrief:
    """A brief from a row of :data:`BRIEF_COLUMNS`."""
    vf, vt = r["valid_from"], r["valid_to"]
    return ItemBrief(
        id=r["id"],
        project=r["project"],
        type=r["type"],
        title=r["title"],
        status=r["status"],
        scope_kind=r["scope_kind"],
        actor=r["actor"],
        asserted_by=r["asserted_by"],
        confidence=r["confidence"],
        importance=r["importance"],
        anchor=anchor_from_dict(r["anchor"]),
        valid_from=None if vf is None else from_us(vf),
        valid_to=None if vt is None else from_us(vt),
        superseded_by=r["superseded_by"],
        created_at=from_us(r["created_at"]),
    )


def rows_by_id(
    conn: sa.Connection, columns: Sequence[Any], project: str, item_ids: Sequence[str]
) -> dict[str, Any]:
    """The project's rows among ``item_ids``, by id (``columns`` must hold id and project).

    Selected by id alone (unique): with the project in the WHERE as well, SQLite's
    planner takes the project index and scans every item of the project.
    """
    wanted = list(dict.fromkeys(item_ids))
    rows = conn.execute(sa.select(*columns).where(_C.id.in_(wanted))).all()
    return {r.id: r for r in rows if r.project == project}


def page_rows(
    conn: sa.Connection,
    columns: Sequence[Any],
    conditions: Sequence[sa.ColumnElement[bool]],
    *,
    limit: int,
    cursor: str | None,
    key: str,
) -> tuple[list[Any], str | None]:
    """One page of rows matching ``conditions``, newest first (``created_at``, then id), and
    the cursor of the next page (None at the end); ``key`` binds cursors to the listing.

    Raises:
        InvalidCursor: a cursor not issued for ``key``.
    """
    conds = list(conditions)
    if cursor is not None:
        created, last_id = decode_cursor(cursor, key)
        conds.append(
            sa.or_(_C.created_at < created, sa.and_(_C.created_at == created, _C.id < last_id))
        )
    q = (
        sa.select(*columns)
        .where(*conds)
        .order_by(_C.created_at.desc(), _C.id.desc())
        .limit(limit + 1)
    )
    rows = conn.execute(q).all()
    nxt = None
    if len(rows) > limit:
        last = rows[limit - 1]
        nxt = encode_cursor(last.created_at, last.id, key)
    return list(rows[:limit]), nxt


class ReadPin:
    """The connection (in its read transaction) a thread's reads share inside
    :meth:`~store.memory.interface.MemoryStore.reading`, if any."""

    def __init__(self) -> None:
        self._local = threading.local()

    @property
    def conn(self) -> sa.Connection | None:
        """This thread's pinned connection, or None."""
        conn: sa.Connection | None = getattr(self._local, "conn", None)
        return conn

    @contextlib.contextmanager
    def hold(self, conn: sa.Connection) -> Iterator[None]:
        """Pin ``conn`` for this thread during the block."""
        self._local.conn = conn
        try:
            yield
        finally:
            self._local.conn = None
