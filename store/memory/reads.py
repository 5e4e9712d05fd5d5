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
conditions (its hooks), :func:`conditions` the rest. A filter is a shape (its
structure, :class:`FilterShape`) and its parameter values (:func:`filter_sql`), so
the statements of a shape are built and compiled once and run on the raw cursor
(:mod:`store.memory.readsql`). The same SQL runs on SQLite and PostgreSQL.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa

from store.errors import InvalidMemoryQuery
from store.memory.codec import decode_cursor, encode_cursor, from_us, to_us
from store.memory.model import ItemBrief, ItemFilter, built
from store.memory.readsql import ReadStatements, id_slots, pad
from store.memory.schema import item_tags, items

__all__ = [
    "BRIEF_COLUMNS",
    "FilterShape",
    "ReadPin",
    "bind",
    "brief_from_row",
    "conditions",
    "filter_sql",
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
    sa.type_coerce(_C.anchor, sa.Text()).label("anchor"),
    _C.valid_from,
    _C.valid_to,
    _C.superseded_by,
    _C.created_at,
)
"""The ``items`` columns a brief reads (the anchor as stored: its JSON is decoded when the
brief's :attr:`~store.memory.model.ItemBrief.anchor` is first asked for)."""


@dataclass(frozen=True)
class FilterShape:
    """The structure of a filter's WHERE (which conditions, how many values each list holds):
    the key its compiled statements are remembered by; the values are its parameters."""

    types: int = 0
    statuses: int = 0
    tags: int = 0
    bbox: bool = False
    valid_at: bool = False
    written_before: bool = False
    scope_kinds: int = 0
    actor: bool = False


def filter_sql(project: str, where: ItemFilter) -> tuple[FilterShape, dict[str, Any]]:
    """A filter's shape and the values of its parameters (``project`` among them).

    Raises:
        InvalidMemoryQuery: an empty or reversed bbox.
        InvalidDate: a naive ``valid_at`` or ``written_before``.
    """
    params: dict[str, Any] = {"project": project}
    tags = list(dict.fromkeys(where.tags))
    for name, values in (
        ("type", where.types),
        ("status", where.statuses),
        ("tag", tags),
        ("scope_kind", where.scope_kinds),
    ):
        for i, v in enumerate(values):
            params[f"{name}_{i}"] = v
    if where.bbox is not None:
        s, w, n, e = where.bbox
        if not (s <= n and w <= e):
            raise InvalidMemoryQuery(f"bbox {where.bbox} is empty or reversed")
        params.update(bbox_s=s, bbox_w=w, bbox_n=n, bbox_e=e)
    if where.valid_at is not None:
        params["valid_at"] = to_us(where.valid_at)
    if where.written_before is not None:
        params["written_before"] = to_us(where.written_before)
    if where.actor is not None:
        params["actor"] = where.actor
    shape = FilterShape(
        types=len(where.types),
        statuses=len(where.statuses),
        tags=len(tags),
        bbox=where.bbox is not None,
        valid_at=where.valid_at is not None,
        written_before=where.written_before is not None,
        scope_kinds=len(where.scope_kinds),
        actor=where.actor is not None,
    )
    return shape, params


def bind(name: str) -> sa.BindParameter[Any]:
    """A named parameter (its type taken from the column it is compared with)."""
    return sa.bindparam(name)


def _binds(name: str, n: int) -> list[sa.BindParameter[Any]]:
    return [bind(f"{name}_{i}") for i in range(n)]


def conditions(
    project_condition: sa.ColumnElement[bool],
    bbox_condition: Callable[[], sa.ColumnElement[bool]],
    shape: FilterShape,
) -> list[sa.ColumnElement[bool]]:
    """The WHERE conditions of a filter's shape (the backend's project and box conditions
    given; all AND-ed), over the parameters :func:`filter_sql` names."""
    c = items.c
    out: list[sa.ColumnElement[bool]] = [project_condition]
    if shape.types:
        out.append(c.type.in_(_binds("type", shape.types)))
    if shape.statuses:
        out.append(c.status.in_(_binds("status", shape.statuses)))
    for tag in _binds("tag", shape.tags):
        out.append(sa.exists().where(item_tags.c.item_pk == c.pk, item_tags.c.tag == tag))
    if shape.bbox:
        s, w, n, e = (bind(f"bbox_{k}") for k in "swne")
        out.append(bbox_condition())
        out += [c.min_lat <= n, c.max_lat >= s, c.min_lng <= e, c.max_lng >= w]
    if shape.valid_at:
        t = bind("valid_at")
        out.append(sa.or_(c.valid_from.is_(None), c.valid_from <= t))
        out.append(sa.or_(c.valid_to.is_(None), c.valid_to >= t))
    if shape.written_before:
        out.append(c.created_at <= sa.bindparam("written_before"))
    if shape.scope_kinds:
        out.append(c.scope_kind.in_(_binds("scope_kind", shape.scope_kinds)))
    if shape.actor:
        out.append(c.actor == sa.bindparam("actor"))
    return out


def brief_from_row(r: Sequence[Any]) -> ItemBrief:
    """A brief from a row of :data:`BRIEF_COLUMNS` (in that order; the anchor kept as read)."""
    vf, vt = r[11], r[12]
    return built(
        ItemBrief,
        {
            "id": r[0],
            "project": r[1],
            "type": r[2],
            "title": r[3],
            "status": r[4],
            "scope_kind": r[5],
            "actor": r[6],
            "asserted_by": r[7],
            "confidence": r[8],
            "importance": r[9],
            "anchor_doc": r[10],
            "valid_from": None if vf is None else from_us(vf),
            "valid_to": None if vt is None else from_us(vt),
            "superseded_by": r[13],
            "created_at": from_us(r[14]),
        },
    )


def rows_by_id(
    reads: ReadStatements,
    conn: sa.Connection,
    columns: Sequence[sa.Column[Any] | sa.Label[Any]],
    project: str,
    item_ids: Sequence[str],
) -> dict[str, Sequence[Any]]:
    """The project's rows among ``item_ids``, by id (``columns`` must begin with id and
    project, in that order).

    Selected by id alone (unique): with the project in the WHERE as well, SQLite's
    planner takes the project index and scans every item of the project.
    """
    wanted = list(dict.fromkeys(item_ids))
    slots = id_slots(len(wanted))
    names = tuple(c.name for c in columns)

    def build() -> sa.Select[Any]:
        return sa.select(*columns).where(_C.id.in_(_binds("id", slots)))

    params = {f"id_{i}": v for i, v in enumerate(pad(wanted, slots))}
    rows = reads.rows(conn, ("by_id", names, slots), build, params)
    return {r[0]: r for r in rows if r[1] == project}


def page_rows(
    reads: ReadStatements,
    conn: sa.Connection,
    columns: Sequence[sa.Column[Any] | sa.Label[Any]],
    where: tuple[FilterShape, dict[str, Any]],
    conditions_of: Callable[[FilterShape], list[sa.ColumnElement[bool]]],
    *,
    limit: int,
    cursor: str | None,
    key: Callable[[], str],
) -> tuple[list[Sequence[Any]], str | None]:
    """One page of rows matching a filter (its shape and parameters; ``conditions_of`` its
    WHERE), newest first (``created_at``, then id), and the cursor of the next page (None at
    the end); ``key()`` gives the key binding cursors to the listing (computed only when a
    cursor is read or issued: recall reads one page of most listings). ``columns`` must
    begin with id and hold ``created_at``.

    Raises:
        InvalidCursor: a cursor not issued for ``key``.
    """
    shape, params = where
    params = {**params, "limit": limit + 1}
    if cursor is not None:
        params["cursor_created"], params["cursor_id"] = decode_cursor(cursor, key())
    names = tuple(c.name for c in columns)

    def build() -> sa.Select[Any]:
        conds = conditions_of(shape)
        if cursor is not None:
            created, last = bind("cursor_created"), bind("cursor_id")
            conds.append(
                sa.or_(_C.created_at < created, sa.and_(_C.created_at == created, _C.id < last))
            )
        return (
            sa.select(*columns)
            .where(*conds)
            .order_by(_C.created_at.desc(), _C.id.desc())
            .limit(sa.bindparam("limit", type_=sa.Integer()))
        )

    rows = reads.rows(conn, ("page", names, shape, cursor is not None), build, params)
    nxt = None
    if len(rows) > limit:
        last_row = rows[limit - 1]
        nxt = encode_cursor(last_row[names.index("created_at")], last_row[0], key())
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
