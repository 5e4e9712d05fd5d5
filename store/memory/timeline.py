"""Reads recall needs beyond listing: an item's state as of a transaction time, the
relations of many items at once, and items nearest an instant of valid time.

Pure query builders and row readers over one open connection; the store's methods
(:meth:`~store.memory.sql.SqlMemoryStore.states_as_of`, ...) open the read
transaction. The same SQL runs on SQLite and PostgreSQL.

An item's state as of ``T`` is derived from the history (no extra column): its
status is the one its last entry at or before ``T`` left it in (``create`` leaves
it ``active``; ``supersede``, ``delete``, ``stale`` and ``verify`` entries record the
status they set). So an item superseded or deleted after ``T`` shows as it was at
``T``, and an item created after ``T`` has no state at all.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa

from store.memory.codec import relation_from_row, to_us
from store.memory.model import Relation
from store.memory.reads import FilterShape, bind
from store.memory.readsql import ReadStatements, id_slots, pad
from store.memory.schema import history, items, relations

__all__ = ["StateAsOf", "nearest_valid", "relations_of", "states_as_of"]

_CHUNK = 500
"""Ids per ``IN (...)`` list (well under every driver's parameter limit)."""


@dataclass(frozen=True)
class StateAsOf:
    """What an item was at a transaction time."""

    status: str
    """The status its last entry at or before the time left it in."""
    superseded_by: str | None
    """Its successor, when the supersession is at or before the time."""
    seq: int
    """The last entry's seq."""


def _chunks(ids: Sequence[str]) -> list[list[str]]:
    unique = list(dict.fromkeys(ids))
    return [unique[i : i + _CHUNK] for i in range(0, len(unique), _CHUNK)]


def states_as_of(
    reads: ReadStatements,
    conn: sa.Connection,
    project: str,
    item_ids: Sequence[str],
    as_of: dt.datetime,
) -> dict[str, StateAsOf]:
    """Each item's state as of ``as_of`` (items with no entry by then are left out).

    One statement per chunk of ids, compiled once per padded id count
    (:func:`~store.memory.readsql.id_slots`) and run on the read transaction's cursor.
    """
    t = to_us(as_of)
    h = history.c
    out: dict[str, StateAsOf] = {}
    for chunk in _chunks(item_ids):
        slots = id_slots(len(chunk))

        def build(slots: int = slots) -> sa.Select[Any]:
            return (
                sa.select(h.item_id, h.seq, h.action, h.change)
                .where(
                    h.project == bind("project"),
                    h.item_id.in_([bind(f"id_{i}") for i in range(slots)]),
                    h.at <= sa.bindparam("at", type_=sa.BigInteger()),
                    h.action != sa.literal_column("'relate'"),
                )
                .order_by(h.item_id, h.seq)
            )

        params: dict[str, Any] = {f"id_{i}": v for i, v in enumerate(pad(chunk, slots))}
        params.update(project=project, at=t)
        for item_id, seq, action, change in reads.rows(conn, ("as_of", slots), build, params):
            prev = out.get(item_id)
            status = prev.status if prev is not None else "active"
            successor = prev.superseded_by if prev is not None else None
            change = change if isinstance(change, dict) else {}
            if action == "create":
                status, successor = "active", None
            elif isinstance(change.get("status"), str):
                status = change["status"]
            if action == "supersede":
                successor = change.get("superseded_by")
            out[item_id] = StateAsOf(status, successor, int(seq))
    return out


def relations_of(
    conn: sa.Connection,
    project: str,
    item_ids: Sequence[str],
    kinds: Sequence[str],
    written_before: dt.datetime | None = None,
) -> list[Relation]:
    """Every relation of ``kinds`` from or to any of ``item_ids`` (both directions)."""
    r = relations.c
    out: list[Relation] = []
    seen: set[tuple[str, str, str]] = set()
    for chunk in _chunks(item_ids):
        conds: list[sa.ColumnElement[bool]] = [
            r.project == project,
            r.kind.in_(list(kinds)),
            sa.or_(r.src_id.in_(chunk), r.dst_id.in_(chunk)),
        ]
        if written_before is not None:
            conds.append(r.created_at <= to_us(written_before))
        for row in conn.execute(sa.select(relations).where(*conds).order_by(r.seq)):
            key = (row.src_id, row.dst_id, row.kind)
            if key not in seen:
                seen.add(key)
                out.append(relation_from_row(row._mapping))
    return out


def _without(params: Mapping[str, Any], name: str) -> dict[str, Any]:
    return {k: v for k, v in params.items() if k != name}


COVER_WALK = 8
"""A covering walk reads at most this many times ``limit`` index entries (see
:func:`nearest_valid`)."""


def _distance() -> Any:
    c = items.c
    t = sa.bindparam("t", type_=sa.BigInteger())
    before = sa.case((c.valid_from.is_not(None) & (c.valid_from > t), c.valid_from - t), else_=0)
    after = sa.case((c.valid_to.is_not(None) & (c.valid_to < t), t - c.valid_to), else_=0)
    return (before + after).label("distance")


def nearest_valid(
    reads: ReadStatements,
    conn: sa.Connection,
    where: tuple[FilterShape, Mapping[str, Any]],
    conditions: Callable[[FilterShape], list[sa.ColumnElement[bool]]],
    at: dt.datetime,
    limit: int,
) -> list[tuple[str, int]]:
    """``[(item id, distance in microseconds)]`` of items with a valid time, nearest ``at``
    first, ties by id (0: the valid time covers ``at``; an open end counts as unbounded);
    ``where``: the filter's shape and parameters, ``conditions`` its WHERE.

    Four bounded walks of the valid-time indexes (migration 0003), each with ``LIMIT``:
    items starting after ``at`` (ascending start), items ending before it (descending
    end), and the items covering it (all at distance 0), among the :data:`COVER_WALK` x ``limit`` latest
    starts at or before ``at`` and (for items with no start) the as many earliest ends at
    or after it. So the cost is bounded by ``limit``, not by the project's size; the price
    is that when more items cover ``at`` than those walks reach, a long-running item that
    started long before may be left out (the recall engine still scores the valid time of
    every candidate another lane proposes).
    """
    shape, filter_params = where
    params = {**filter_params, "t": to_us(at), "limit": limit, "walk": max(limit, 1) * COVER_WALK}
    c = items.c
    t = sa.bindparam("t", type_=sa.BigInteger())
    lim = sa.bindparam("limit", type_=sa.Integer())
    walk = sa.bindparam("walk", type_=sa.Integer())
    project = bind("project")

    def outer(*extra: sa.ColumnElement[bool]) -> sa.Select[Any]:
        return sa.select(c.id, _distance()).where(*conditions(shape), *extra)

    def after() -> sa.Select[Any]:
        return outer(c.valid_from > t).order_by(c.valid_from, c.id).limit(lim)

    def before() -> sa.Select[Any]:
        return outer(c.valid_to < t).order_by(c.valid_to.desc(), c.id).limit(lim)

    # the walks read index entries only (each index holds both ends), in the index's own
    # order (no sort before the LIMIT); rows are read for the items that cover ``at``
    def cover_started() -> sa.Select[Any]:
        starts = (
            sa.select(c.pk.label("pk"), c.valid_to.label("end"))
            .where(c.project == project, c.valid_from <= t)
            .order_by(c.valid_from.desc(), c.valid_to.desc(), c.pk.desc())
            .limit(walk)
            .subquery()
        )
        return (
            sa.select(c.id, _distance())
            .select_from(starts.join(items, items.c.pk == starts.c.pk))
            .where(*conditions(shape), sa.or_(starts.c.end.is_(None), starts.c.end >= t))
        )

    def cover_open() -> sa.Select[Any]:
        ends = (
            sa.select(c.pk.label("pk"), c.valid_from.label("start"))
            .where(c.project == project, c.valid_to >= t)
            .order_by(c.valid_to, c.valid_from, c.pk)
            .limit(walk)
            .subquery()
        )
        return (
            sa.select(c.id, _distance())
            .select_from(ends.join(items, items.c.pk == ends.c.pk))
            .where(*conditions(shape), ends.c.start.is_(None))
        )

    found: dict[str, int] = {}
    for build in (after, before, cover_started, cover_open):
        # the walks by one end take ``limit``, the covering walks ``walk``
        used = _without(params, "limit" if build in (cover_started, cover_open) else "walk")
        for i, d in reads.rows(conn, ("nearest_valid", build.__name__, shape), build, used):
            found[str(i)] = int(d)
    ranked = sorted(found.items(), key=lambda x: (x[1], x[0]))
    return ranked[:limit]
