"""How ask reads a question: checks, the routing table, the year.

Routing is deterministic and uses no language model: a question runs every
topic of :data:`TOPICS` whose words (normalised tokens) it contains, in table
order (:func:`route`); a year in the question (2010-2099) bounds the windows.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from api.errors import InvalidArgument
from api.intent import INTENTS
from api.places import normalise_name

__all__ = [
    "MAX_QUESTION_CHARS",
    "SIMILAR_K",
    "TOPICS",
    "Topic",
    "can_answer",
    "check_question",
    "route",
    "year_of",
]

MAX_QUESTION_CHARS = 1000
"""Longest question ``ask`` accepts (422 ``invalid_question_text`` above)."""
SIMILAR_K = 5
"""Neighbours ask's "similar" topic asks for."""

_YEAR = re.compile(r"\b(20[1-9][0-9])\b")
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")


@dataclass(frozen=True)
class Topic:
    """One row of the routing table."""

    name: str
    """Topic name."""
    words: frozenset[str]
    """Normalised words that select it."""
    runs: str
    """What the plan runs for it."""


TOPICS: tuple[Topic, ...] = (
    Topic(
        "change",
        frozenset(
            [
                "change",
                "changed",
                "changes",
                "changing",
                "cleared",
                "clearing",
                "clearcut",
                "deforestation",
                "deforested",
                "cut",
                "felled",
                "logged",
                "logging",
                "loss",
                "lost",
                "destroyed",
                "burned",
                "burnt",
                "disappeared",
            ]
        ),
        "did_change on NDVI (NDWI when water words are present): a named year's first vs last "
        "clear observation, else the latest vs the one nearest a year earlier; over a named "
        "feature's cells, the cell with the largest change",
    ),
    Topic(
        "water",
        frozenset(
            [
                "flood",
                "flooded",
                "flooding",
                "floods",
                "water",
                "wet",
                "inundated",
                "inundation",
                "submerged",
                "waterlogged",
                "ndwi",
            ]
        ),
        "area_over_time on NDWI over the place (its bbox, else ~110 m around the cell)",
    ),
    Topic(
        "green",
        frozenset(
            [
                "green",
                "greener",
                "greenness",
                "vegetation",
                "vegetated",
                "crop",
                "crops",
                "ndvi",
                "plants",
                "growing",
                "growth",
                "harvest",
                "leaves",
            ]
        ),
        "trajectory of NDVI at the cell (the named year, else the whole series)",
    ),
    Topic(
        "similar",
        frozenset(
            ["similar", "like", "resemble", "resembles", "resembling", "alike", "comparable"]
        ),
        f"find_similar: the {SIMILAR_K} cells whose embedding is closest to the cell's",
    ),
    Topic(
        "trend",
        frozenset(
            ["trend", "trends", "trending", "increasing", "decreasing", "declining", "long", "term"]
        ),
        "area_over_time trend (Theil-Sen, Mann-Kendall) of NDVI (NDWI with water words)",
    ),
    Topic(
        "summary",
        frozenset(
            [
                "describe",
                "description",
                "summary",
                "summarise",
                "summarize",
                "overview",
                "status",
                "condition",
                "landcover",
                "cover",
            ]
        ),
        "what_is_here at the cell (also the default for a located question without topic words)",
    ),
)
"""The routing table: a question runs every topic whose words it contains, in this order."""


def route(question: str) -> list[tuple[Topic, list[str]]]:
    """Topics a question's words select (normalised tokens), in table order."""
    tokens = normalise_name(question).split(" ")
    out = []
    for topic in TOPICS:
        hits = sorted({t for t in tokens if t in topic.words})
        if hits:
            out.append((topic, hits))
    return out


def can_answer() -> dict[str, Any]:
    """What ask can answer: its topics and the intents it routes to."""
    return {
        "topics": {t.name: {"words": sorted(t.words), "runs": t.runs} for t in TOPICS},
        "intents": {name: spec.answers for name, spec in INTENTS.items()},
        "locate_with": "cell, lat+lng, place, or a place named in the question "
        "(e.g. 'the forest near Kanke', 'Kanke Lake')",
    }


def year_of(question: str) -> int | None:
    """The first four-digit year named in a question, or None."""
    m = _YEAR.search(question)
    return int(m.group(1)) if m else None


def check_question(text: str) -> str:
    """A question stripped, or a typed error when it is too long, has control characters or is empty."""
    if len(text) > MAX_QUESTION_CHARS:
        raise InvalidArgument(
            f"question is longer than {MAX_QUESTION_CHARS} characters",
            code="invalid_question_text",
        )
    if _CONTROL.search(text):
        raise InvalidArgument("question contains control characters", code="invalid_question_text")
    if not text.strip():
        raise InvalidArgument("question is empty", code="invalid_question_text")
    return text.strip()
