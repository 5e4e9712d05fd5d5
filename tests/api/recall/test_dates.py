"""The relative-date rewrite (deterministic, against the caller's now)."""

from __future__ import annotations

import datetime as dt

import pytest

from api.recall.dates import rewrite_query

NOW = dt.datetime(2024, 8, 20, 9, tzinfo=dt.UTC)


@pytest.mark.parametrize(
    ("query", "phrase", "at", "rest"),
    [
        ("flooding two weeks ago near the river", "two weeks ago", "2024-08-06T09:00:00+00:00",
         "flooding near the river"),
        ("what happened last month", "last month", "2024-07-20T09:00:00+00:00", "what happened"),
        ("canopy in March", "in March", "2024-03-15T12:00:00+00:00", "canopy"),
        ("floods in may 2023", "in may 2023", "2023-05-15T12:00:00+00:00", "floods"),
        ("yesterday floods", "yesterday", "2024-08-19T09:00:00+00:00", "floods"),
        ("3 days ago", "3 days ago", "2024-08-17T09:00:00+00:00", ""),
    ],
)  # fmt: skip
def test_phrases_resolve(query: str, phrase: str, at: str, rest: str) -> None:
    rw = rewrite_query(query, NOW)
    assert rw is not None
    assert (rw.phrase, rw.at.isoformat(), rw.query) == (phrase, at, rest)
    assert rewrite_query(query, NOW) == rw  # deterministic


def test_words_that_are_not_date_phrases_are_left_alone() -> None:
    assert rewrite_query("I may go to the march", NOW) is None
    assert rewrite_query("nothing here", NOW) is None
