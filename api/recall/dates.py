"""Relative dates in a recall query: "two weeks ago", "last month", "in March", "yesterday".

The phrase is found by a fixed pattern (so only date phrases are touched, never a
word such as "may" or "march" used otherwise) and resolved by dateparser with
``RELATIVE_BASE`` = the caller's ``currentDate`` and past dates preferred: the same
query and ``currentDate`` always give the same instant. A month named alone ("in
March", "in March 2023") resolves to the 15th of that month at noon UTC (the middle:
items valid any time that month are nearest). The first phrase found is used; it is
taken out of the text the lanes search (its words describe when, not what), and the
rewrite is reported.
"""

from __future__ import annotations

import datetime as dt
import re
from dataclasses import dataclass

import dateparser

__all__ = ["Rewrite", "rewrite_query"]

_MONTHS = (
    "january|february|march|april|may|june|july|august|september|october|november|december"
    "|jan|feb|mar|apr|jun|jul|aug|sep|sept|oct|nov|dec"
)
_DAYS = "monday|tuesday|wednesday|thursday|friday|saturday|sunday"
_COUNT = r"a|an|one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve|\d{1,3}"
_UNIT = r"(?:day|week|month|year)s?"
_PHRASE = re.compile(
    rf"\b(?P<ago>(?:{_COUNT})\s+{_UNIT}\s+ago)\b"
    rf"|\b(?P<last>last\s+(?:week|month|year|{_DAYS}|{_MONTHS}))\b"
    r"|\b(?P<day>yesterday|today)\b"
    rf"|\b(?:in|during|since|from)\s+(?P<month>(?:{_MONTHS})(?:\s+\d{{4}})?)\b"
    r"|\b(?P<iso>\d{4}-\d{2}-\d{2})\b",
    re.IGNORECASE,
)


@dataclass(frozen=True)
class Rewrite:
    """A resolved date phrase."""

    phrase: str
    """The phrase as it appeared in the query."""
    at: dt.datetime
    """The instant it resolves to (aware UTC)."""
    query: str
    """The query with the phrase taken out."""
    granularity: str
    """``day`` or ``month``."""


def rewrite_query(text: str, now: dt.datetime) -> Rewrite | None:
    """The first relative (or absolute ISO) date phrase of ``text`` resolved against ``now``."""
    for m in _PHRASE.finditer(text):
        kind = m.lastgroup or ""
        phrase = m.group(kind)
        resolved = dateparser.parse(
            phrase,
            languages=["en"],
            settings={
                "RELATIVE_BASE": now.astimezone(dt.UTC).replace(tzinfo=None),
                "PREFER_DATES_FROM": "past",
                "TIMEZONE": "UTC",
                "RETURN_AS_TIMEZONE_AWARE": False,
            },
        )
        if resolved is None:
            continue
        at = resolved.replace(tzinfo=dt.UTC)
        granularity = "day"
        if kind == "month" or (kind == "last" and phrase.split()[-1].lower() in _MONTHS.split("|")):
            at = at.replace(day=15, hour=12, minute=0, second=0, microsecond=0)
            granularity = "month"
        rest = (text[: m.start()] + text[m.end() :]).strip()
        return Rewrite(m.group(0), at, re.sub(r"\s{2,}", " ", rest), granularity)
    return None
