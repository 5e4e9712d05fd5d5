"""What agents and people recorded about a located place, for ask and what_is_here.

Consulted only when the caller presents a token that may read (the dispatch passes its
:class:`~api.memory.auth.Caller`); without one the answer says memory was not
consulted. The items are the caller's project's only, ``active`` now (superseded,
deleted and potentially stale ones are left out), anchored within
:data:`CONSULT_RADIUS_M` of the located point or linked to the located named feature
(:mod:`api.recall.entities`), best first by :func:`rank` (importance, confidence,
recency), at most :data:`MAX_CONSULTED`. Each is cited by id with its corroboration
verdict and the cube fact ids behind it, and one sentence sums them up: "two
observations near Jumar River report ...; the NDWI record corroborates one of them".
"""

from __future__ import annotations

import datetime as dt
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from api.memory.present import head_out, memory_state
from api.recall.entities import (
    MAX_SCAN_ITEMS,
    anchor_point,
    distance_m,
    entity_for_place,
    items_at,
    links_of,
    metres_box,
)
from store.memory.model import ItemFilter, MemoryItem

if TYPE_CHECKING:
    from api.context import ServiceContext
    from api.memory.auth import Caller
    from api.places import Place

__all__ = [
    "CONSULT_RADIUS_M",
    "MAX_CONSULTED",
    "NOT_CONSULTED",
    "consult_memory",
    "not_consulted",
    "rank",
]

CONSULT_RADIUS_M = 1000.0
"""Items anchored within this distance of the located point are consulted."""
MAX_CONSULTED = 5
"""Most items an answer cites."""
NOT_CONSULTED = (
    "memory was not consulted: no token was presented (send Authorization: Bearer <token> "
    "to include what your project has recorded about this place)"
)
_PAGE = 500
_NUMBERS = ("no", "one", "two", "three", "four", "five")
_VERBS = {"corroborated": "corroborates", "contradicted": "contradicts"}


def not_consulted(note: str = NOT_CONSULTED) -> dict[str, Any]:
    """The memory block of an answer that did not consult memory, saying why."""
    return {
        "consulted": False,
        "note": note,
        "radius_m": None,
        "items": [],
        "sentence": None,
        "fact_ids": [],
        "head": None,
    }


def rank(item: MemoryItem, now: dt.datetime) -> float:
    """Importance 0.4, confidence 0.4, recency 0.2 (1 today, 0.5 a year old, ...)."""
    written = item.created_at or now
    age_days = max(0.0, (now - written).total_seconds() / 86400)
    return 0.4 * item.importance + 0.4 * item.confidence + 0.2 / (1 + age_days / 365)


def _number(n: int) -> str:
    return _NUMBERS[n] if n < len(_NUMBERS) else str(n)


def _date(value: dt.datetime | None) -> str | None:
    return value.date().isoformat() if value is not None else None


def _band(item: MemoryItem) -> str | None:
    band = (item.claim or {}).get("band")
    return str(band).rsplit(".", 1)[-1].upper() if band else None


def _note_out(item: MemoryItem, d: float | None, ctx: ServiceContext) -> dict[str, Any]:
    return {
        "id": item.id,
        "type": item.type,
        "title": item.title,
        "statement": item.statement[:300],
        "verdict": item.verdict,
        "verdict_facts": list(item.verdict_facts),
        "claim_band": (item.claim or {}).get("band"),
        "valid_from": _date(item.valid_from),
        "valid_to": _date(item.valid_to),
        "created_at": item.created_at.isoformat() if item.created_at else None,
        "confidence": item.confidence,
        "importance": item.importance,
        "distance_m": round(d, 1) if d is not None else None,
        "entities": [lk.entity_id for lk in links_of(ctx, item)],
    }


def _sentence(chosen: list[MemoryItem], where: str) -> str:
    types = {i.type for i in chosen}
    n = len(chosen)
    noun = chosen[0].type.replace("_", " ") if len(types) == 1 else "memory"
    noun += "s" if n > 1 and not noun.endswith("s") else ""
    noun = noun.replace("memorys", "memories")
    cited = "; ".join(
        f'"{i.title}"' + (f" ({_date(i.valid_from)})" if i.valid_from else "") + f" [{i.id}]"
        for i in chosen
    )
    verb = "reports" if n == 1 else "report"
    text = f"{_number(n).capitalize()} {noun} near {where} {verb}: {cited}"
    checks: list[str] = []
    them = "it" if n == 1 else "them"
    for verdict, verb_3 in _VERBS.items():
        by_band: dict[str, int] = {}
        for i in chosen:
            if i.verdict == verdict:
                by_band[_band(i) or "satellite"] = by_band.get(_band(i) or "satellite", 0) + 1
        for band, k in sorted(by_band.items()):
            of = them if k == n else f"{_number(k)} of {them}"
            checks.append(f"the {band} record {verb_3} {of}")
    unknown = sum(1 for i in chosen if i.verdict == "unknown")
    if unknown:
        checks.append(f"the record cannot tell for {_number(unknown)}")
    unchecked = sum(1 for i in chosen if i.verdict is None)
    if unchecked:
        checks.append(
            f"{_number(unchecked)} carr{'ies' if unchecked == 1 else 'y'} no claim to check"
        )
    return text + ("; " + ", ".join(checks) if checks else "") + "."


def consult_memory(
    ctx: ServiceContext,
    caller: Caller | None,
    lat: float,
    lng: float,
    place: Place | None,
    where: str,
    *,
    now: dt.datetime | None = None,
) -> dict[str, Any]:
    """The memory block of an answer about the place at ``(lat, lng)``.

    Args:
        caller: Who asked (None: no token, memory is not consulted).
        place: The gazetteer place located, if any (its feature's linked items count).
        where: How the answer names the place in its sentence ("Jumar River").

    Returns:
        ``{consulted, note, radius_m, items, sentence, fact_ids, head}``.
    """
    if caller is None:
        return not_consulted()
    now = now or dt.datetime.now(dt.UTC)
    store = ctx.memory()
    active = ItemFilter(statuses=("active",))
    found: dict[str, tuple[MemoryItem, float | None]] = {}
    flt = replace(active, bbox=metres_box(lat, lng, CONSULT_RADIUS_M))
    cursor: str | None = None
    seen = 0
    while True:
        page = store.list_items(
            caller.project, flt, limit=min(_PAGE, MAX_SCAN_ITEMS - seen), cursor=cursor
        )
        for item in page.items:
            point = anchor_point(item)
            if point is not None:
                d = distance_m(lat, lng, point[0], point[1])
                if d <= CONSULT_RADIUS_M:
                    found[item.id] = (item, d)
        seen += len(page.items)
        cursor = page.next_cursor
        if cursor is None or seen >= MAX_SCAN_ITEMS:
            break
    entity = entity_for_place(ctx, place) if place is not None else None
    if entity is not None:
        linked, _ = items_at(ctx, store, caller.project, entity, active)
        for item, _link in linked:
            found.setdefault(item.id, (item, None))
    ordered = sorted(found.values(), key=lambda x: (-rank(x[0], now), x[0].id))
    chosen = ordered[:MAX_CONSULTED]
    items = [i for i, _ in chosen]
    note = (
        f"the {len(chosen)} best of {len(found)} active item(s) of project "
        f"{caller.project!r} within {CONSULT_RADIUS_M:.0f} m"
        + (f" or linked to {entity.name}" if entity is not None else "")
        + " (by importance, confidence and recency)"
    )
    facts = sorted({f for i in items for f in i.verdict_facts})
    head = store.head(caller.project)
    return {
        "consulted": True,
        "note": note,
        "radius_m": CONSULT_RADIUS_M,
        "items": [_note_out(i, d, ctx) for i, d in chosen],
        "sentence": (
            _sentence(items, where)
            if items
            else f"Memory holds nothing active within {CONSULT_RADIUS_M:.0f} m of {where}."
        ),
        "fact_ids": facts,
        "head": {**head_out(head), "state": memory_state(head)},
    }
