"""A recall call checked and resolved: kinds, scopes, ``near``, both time axes, the rewrite.

Everything a lane or the engine needs is resolved once here, and every bad input is
a typed error naming what was wrong (codes in each function's Raises). What was
resolved (the near place, the instants, the rewrite) is reported in the answer.

``asOfEventUID`` names a history entry as our history identifies it: its ``seq``
(an integer or its decimal text), or an item id, meaning the entry that created
that item. It resolves to that entry's transaction time, used as ``asOf``.
"""

from __future__ import annotations

import datetime as dt
import time
from dataclasses import dataclass, field
from typing import Any

from api.context import ServiceContext
from api.errors import InvalidArgument, NotFound
from api.memory.anchors import resolve_anchor
from api.memory.auth import Caller
from api.memory.models import MAX_SEQ, PlaceIn
from api.memory.present import entry_out
from api.queries._common import parse_cell_arg, store_errors
from api.recall.core_lanes import box_around
from api.recall.dates import rewrite_query
from api.recall.lanes import NearPoint, RecallQuery
from api.recall.models import MAX_RADIUS_M, SCOPES, RecallIn
from store import address
from store.errors import InvalidDate
from store.memory.interface import MemoryStore
from store.memory.model import TYPES, ItemFilter
from store.tslot import parse_when

__all__ = [
    "CANDIDATES",
    "DEFAULT_SCOPES",
    "HIDDEN_STATUSES",
    "SCOPE_KINDS",
    "VISIBLE_STATUSES",
    "RecallPlan",
    "plan_recall",
]

CANDIDATES = 50
"""Candidates each lane proposes at most (or ``limit``, when larger): fusion ranks the
union, and every lane's cost grows with what it reads."""
DEFAULT_SCOPES = ("project", "personal")
"""Scopes read when ``scopes`` is omitted (the contract's default)."""
SCOPE_KINDS: dict[str, tuple[str, ...]] = {
    "project": ("project", "path"),
    "personal": ("user",),
    "team": ("team", "task"),
}
"""Recall scope -> the memory scope kinds it reads (``personal``: the caller's own only)."""
VISIBLE_STATUSES = ("active", "potentially_stale")
"""Statuses recalled by default."""
HIDDEN_STATUSES = ("superseded", "deleted")
"""Statuses recalled only with ``include_superseded``."""


@dataclass(frozen=True)
class RecallPlan:
    """A checked recall: the lanes' query plus what the engine and the payload apply."""

    query: RecallQuery
    actor: str
    """The caller's actor (``personal`` scope)."""
    scopes: tuple[str, ...]
    statuses: tuple[str, ...]
    """Statuses kept (judged as of ``asOf`` when it is set)."""
    sources: frozenset[str] = frozenset()
    min_confidence: float = 0.0
    has_primary_source: bool = False
    limit: int = 10
    fusion: str = "weighted"
    """``weighted`` or ``rrf``."""
    resolved: dict[str, Any] = field(default_factory=dict)
    notes: tuple[str, ...] = ()


def _instant(value: str, name: str, code: str = "invalid_date") -> dt.datetime:
    try:
        return parse_when(value)
    except InvalidDate as exc:
        raise InvalidArgument(
            f"{name} must be RFC 3339 or YYYY-MM-DD, got {value[:40]!r}",
            code=code,
            details={"field": name},
        ) from exc


def _kinds(args: RecallIn) -> tuple[str, ...]:
    kinds = tuple(dict.fromkeys(args.kinds or ()))
    unknown = [k for k in kinds if k not in TYPES]
    if unknown:
        raise InvalidArgument(
            f"unknown kinds {unknown[:10]}; valid: {', '.join(TYPES)}"[:400],
            code="unknown_kind",
            details={"unknown": unknown[:10], "valid": list(TYPES)},
        )
    return kinds


def _scopes(args: RecallIn) -> tuple[str, ...]:
    scopes = tuple(dict.fromkeys(args.scopes)) if args.scopes is not None else DEFAULT_SCOPES
    unknown = [s for s in scopes if s not in SCOPES]
    if unknown or not scopes:
        raise InvalidArgument(
            f"unknown scopes {unknown[:3]}; valid: {', '.join(SCOPES)}"
            if unknown
            else "scopes is empty; give at least one of " + ", ".join(SCOPES),
            code="unknown_scope",
            details={"unknown": [str(u)[:64] for u in unknown[:3]], "valid": list(SCOPES)},
        )
    return scopes


def _near(ctx: ServiceContext, args: RecallIn) -> tuple[NearPoint | None, dict[str, Any] | None]:
    near = args.near
    if near is None:
        return None, None
    forms = [
        n
        for n, given in (
            ("place", near.place is not None),
            ("cell", near.cell is not None),
            ("lat+lng", near.lat is not None or near.lng is not None),
        )
        if given
    ]
    if len(forms) != 1:
        raise InvalidArgument(
            "near takes exactly one of place, cell or lat+lng (with radius_m)"
            + (f"; got {', '.join(forms)}" if forms else ""),
            code="invalid_near",
        )
    if not (near.radius_m > 0):
        raise InvalidArgument("near.radius_m must be above 0", code="invalid_near")
    if near.radius_m > MAX_RADIUS_M:
        raise InvalidArgument(
            f"near.radius_m {near.radius_m:g} is over the cap of {MAX_RADIUS_M:g} m",
            code="radius_too_large",
            details={"radius_m": near.radius_m, "max_radius_m": MAX_RADIUS_M},
        )
    if near.place is not None:
        anchor = resolve_anchor(ctx, PlaceIn.model_validate({"place": near.place}))
        assert anchor.cell is not None
        ref = parse_cell_arg(anchor.cell, "near.place")
        point = NearPoint(ref.lat, ref.lng, near.radius_m, place=anchor.place)
        report = {
            "place": near.place,
            "resolved_to": anchor.place,
            "cell": anchor.cell,
            "lat": ref.lat,
            "lng": ref.lng,
            "radius_m": near.radius_m,
            "resolution": dict(anchor.resolution or {}),
        }
        return point, report
    if near.cell is not None:
        ref = parse_cell_arg(near.cell, "near.cell")
        return NearPoint(ref.lat, ref.lng, near.radius_m), {
            "cell": ref.cell,
            "lat": ref.lat,
            "lng": ref.lng,
            "radius_m": near.radius_m,
        }
    if near.lat is None or near.lng is None:
        raise InvalidArgument("near takes lat and lng together", code="invalid_near")
    with store_errors():
        address.encode(near.lat, near.lng)  # the one lat/lng check
    return NearPoint(near.lat, near.lng, near.radius_m), {
        "lat": near.lat,
        "lng": near.lng,
        "radius_m": near.radius_m,
    }


def _event_time(store: MemoryStore, project: str, uid: str | int) -> tuple[dt.datetime, Any]:
    text = str(uid).strip()
    entries = []
    if isinstance(uid, int) or text.isdigit():
        seq = int(text)
        if not 1 <= seq <= MAX_SEQ:
            raise InvalidArgument(f"asOfEventUID seq {seq} is out of range", code="invalid_event")
        entries = store.history(project, after_seq=seq - 1, limit=1)
        entries = [e for e in entries if e.seq == seq]
    elif 0 < len(text) <= 128:
        entries = store.history(project, item_id=text, limit=1)
    if not entries:
        raise NotFound(
            f"asOfEventUID {text[:64]!r} names no history entry of this project",
            code="event_not_found",
        )
    entry = entries[0]
    return entry.at, {
        "seq": entry.seq,
        "item_id": entry.item_id,
        "action": entry_out(entry)["action"],
    }


def plan_recall(
    ctx: ServiceContext, store: MemoryStore, args: RecallIn, caller: Caller
) -> RecallPlan:
    """The checked, resolved recall.

    Raises:
        InvalidArgument: ``unknown_kind``, ``unknown_scope``, ``invalid_near``,
            ``radius_too_large``, ``invalid_cell``, ``invalid_date`` (``at``, ``asOf``),
            ``invalid_current_date``, ``conflicting_time_anchors``, ``invalid_event``,
            ``invalid_query`` (an empty query).
        NotFound: ``place_not_found`` (near.place), ``event_not_found`` (asOfEventUID).
    """
    if not args.query.strip():
        raise InvalidArgument("query is empty", code="invalid_query")
    notes: list[str] = []
    resolved: dict[str, Any] = {}
    kinds, scopes = _kinds(args), _scopes(args)
    if args.asOfEventUID is not None and (args.asOf is not None or args.at is not None):
        raise InvalidArgument(
            "asOfEventUID excludes asOf and at: give at most one of the three",
            code="conflicting_time_anchors",
        )
    at = _instant(args.at, "at") if args.at is not None else None
    as_of = _instant(args.asOf, "asOf") if args.asOf is not None else None
    if args.asOfEventUID is not None:
        as_of, event = _event_time(store, caller.project, args.asOfEventUID)
        resolved["asOfEvent"] = event
    text = args.query
    if args.currentDate is not None:
        now = _instant(args.currentDate, "currentDate", "invalid_current_date")
        if not args.rewriteQuery:
            notes.append("currentDate is used only with rewriteQuery: true; ignored")
        else:
            rw = rewrite_query(args.query, now)
            if rw is None:
                notes.append("rewriteQuery: no date phrase found in the query")
            else:
                text = rw.query
                report: dict[str, Any] = {
                    "phrase": rw.phrase,
                    "resolved": _iso(rw.at),
                    "query": rw.query,
                    "granularity": rw.granularity,
                    "currentDate": _iso(now),
                }
                if at is None and args.asOfEventUID is None:
                    at = rw.at
                    report["filled"] = "at"
                else:
                    report["filled"] = None
                    notes.append("the date phrase did not fill at: at (or asOfEventUID) is set")
                resolved["rewrite"] = report
    elif args.rewriteQuery:
        notes.append("rewriteQuery needs currentDate (the caller's now); nothing rewritten")
    near, near_report = _near(ctx, args)
    if near_report is not None:
        resolved["near"] = near_report
    statuses = VISIBLE_STATUSES + (HIDDEN_STATUSES if args.include_superseded else ())
    where = ItemFilter(
        types=kinds,
        bbox=box_around(near.lat, near.lng, near.radius_m) if near is not None else None,
        statuses=() if as_of is not None else statuses,  # as of a time: judged from history
        written_before=as_of,
        scope_kinds=tuple(k for s in scopes for k in SCOPE_KINDS[s]),
    )
    resolved.update(
        {"at": _iso(at), "asOf": _iso(as_of), "kinds": list(kinds), "scopes": list(scopes)}
    )
    query = RecallQuery(
        project=caller.project,
        text=text,
        where=where,
        at=at,
        as_of=as_of,
        near=near,
        anchor_ids=(args.anchor,) if args.anchor else (),
        anchor_depth=args.anchorDepth,
        no_graph=args.noGraph,
        candidates=max(CANDIDATES, args.limit),
        deadline=(
            time.monotonic() + args.embedDeadlineMs / 1000
            if args.embedDeadlineMs is not None
            else None
        ),
    )
    return RecallPlan(
        query=query,
        actor=caller.actor,
        scopes=scopes,
        statuses=statuses,
        sources=frozenset(args.source or ()),
        min_confidence=args.minConfidence,
        has_primary_source=args.hasPrimarySource,
        limit=args.limit,
        fusion=args.fusion,
        resolved=resolved,
        notes=tuple(notes),
    )


def _iso(t: dt.datetime | None) -> str | None:
    return None if t is None else t.astimezone(dt.UTC).isoformat().replace("+00:00", "Z")
