"""The recall lane contract: what a lane receives and what it returns.

A lane proposes candidates with raw scores (higher is better); it never decides
what the caller may see. The engine takes the union of every lane's candidates,
drops what the query may not see (another status, kind or scope, written after
``as_of``, superseded as of ``as_of``, ...), normalises each lane's scores and
fuses them. A lane may pre-filter with ``query.where`` for speed, but need not.
A lane that cannot run (no embedder configured, a deadline missed, no place to
compare with) returns ``ran=False`` and says why in ``note``; the answer is then
``degraded`` only when the missing lane is the vector lane (as the contract
defines ``degraded``), and ``lanes`` lists the lanes that contributed.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from store.memory.model import ItemBrief, ItemFilter

if TYPE_CHECKING:
    from api.context import ServiceContext
    from store.memory.interface import MemoryStore

__all__ = ["Lane", "LaneHits", "NearPoint", "RecallQuery"]


@dataclass(frozen=True)
class NearPoint:
    """The ``near`` anchor, resolved to a point."""

    lat: float
    lng: float
    radius_m: float
    place: str | None = None
    """The place name asked for, when ``near`` named one (resolved by the gazetteer)."""


@dataclass(frozen=True)
class RecallQuery:
    """One recall, parsed and resolved (what every lane reads)."""

    project: str
    """The caller's project (every store call is filtered by it)."""
    text: str
    """The query after any relative-date rewrite."""
    where: ItemFilter
    """Kinds, statuses and valid/transaction-time bounds the store can push down."""
    at: dt.datetime | None = None
    """Valid-time anchor (``at``, or filled by the ``currentDate`` rewrite)."""
    as_of: dt.datetime | None = None
    """Transaction-time anchor (``asOf`` or the time of ``asOfEventUID``)."""
    near: NearPoint | None = None
    anchor_ids: tuple[str, ...] = ()
    """Item or entity ids of ``anchor`` (the graph lane walks from them)."""
    anchor_depth: int = 1
    no_graph: bool = False
    candidates: int = 200
    """Per-lane candidate cap."""
    deadline: float | None = None
    """``time.monotonic()`` deadline of the query-embedding step (``embedDeadlineMs``)."""
    seed_ids: tuple[str, ...] = field(default=())
    """Top text hits, for lanes that expand from them (graph: shared places)."""
    text_ids: tuple[str, ...] | None = None
    """The fts lane's hits, best first, once it ran (None before: a lane that wants
    text candidates then searches itself)."""
    text_briefs: Mapping[str, ItemBrief] = field(default_factory=dict)
    """The briefs of the fts lane's hits, by id, once it ran (lanes that expand from them
    read them here instead of from the store)."""


@dataclass(frozen=True)
class LaneHits:
    """What one lane proposes."""

    lane: str
    """``fts``, ``place``, ``time``, ``graph``, ``name``, ``vector`` or ``geo``."""
    scores: Mapping[str, float]
    """Item id -> raw lane score, higher is better (the engine normalises)."""
    candidates: int
    """How many candidates the lane looked at (``explain``)."""
    wall_ms: float
    ran: bool = True
    note: str | None = None
    """Why the lane did not run or ran degraded."""
    items: Mapping[str, ItemBrief] = field(default_factory=dict)
    """Briefs of candidates the lane read, by id (as stored now): the engine reads only the
    others' (it reads whole items for the hits it returns)."""


Lane = Callable[["ServiceContext", "MemoryStore", RecallQuery], LaneHits]
"""A lane: ``(context, store, query) -> LaneHits``."""
