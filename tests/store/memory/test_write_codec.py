"""The write path's encoders give exactly the bytes and text the hashes were made with."""

from __future__ import annotations

import dataclasses
import datetime as dt
import json

import pytest
from hypothesis import given
from hypothesis import strategies as st
from sqlalchemy.dialects import sqlite as sqlite_dialect

from store.errors import CanonicalFormError, InvalidDate
from store.memory.codec import from_us, json_pair, jsonable, to_us
from store.memory.digest import rfc3339
from store.memory.model import Anchor, ItemBrief, built, changed
from store.memory.prepared import Prepared
from store.memory.schema import history, projects

_OFFSETS = st.sampled_from(
    [dt.UTC, dt.timezone(dt.timedelta(hours=5, minutes=30)), dt.timezone(dt.timedelta(hours=-11))]
)
_TIMES = st.datetimes(
    min_value=dt.datetime(2, 1, 1), max_value=dt.datetime(9998, 12, 31), timezones=_OFFSETS
)


@given(_TIMES)
def test_rfc3339_is_the_strftime_text(t: dt.datetime) -> None:
    """History entries and content digests hash this text: it must not change."""
    assert rfc3339(t) == t.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def test_rfc3339_keeps_unpadded_early_years() -> None:
    assert rfc3339(dt.datetime(5, 1, 2, 3, 4, 5, tzinfo=dt.UTC)) == "5-01-02T03:04:05.000000Z"
    assert rfc3339(dt.datetime(2024, 8, 10, tzinfo=dt.UTC)) == "2024-08-10T00:00:00.000000Z"


@given(_TIMES)
def test_to_us_counts_microseconds_since_the_epoch(t: dt.datetime) -> None:
    epoch = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
    assert to_us(t) == (t - epoch) // dt.timedelta(microseconds=1)


@given(_TIMES)
def test_from_us_inverts_to_us(t: dt.datetime) -> None:
    back = from_us(to_us(t))
    assert back == t
    assert back.tzinfo is dt.UTC


def test_built_equals_the_constructor_and_needs_every_field() -> None:
    """Reads build briefs, anchors and items without the frozen ``__init__``: the same value."""
    anchor = {"kind": "point", "geometry": None, "bbox": (1.0, 2.0, 3.0, 4.0)}
    anchor |= {"cell": None, "place": None, "resolution": None}
    assert built(Anchor, dict(anchor)) == Anchor(**anchor)
    brief = {
        **dict.fromkeys(["id", "project", "type", "title", "status", "scope_kind"], "x"),
        **dict.fromkeys(["actor", "asserted_by", "anchor_doc"], "y"),
        "confidence": 0.5,
        "importance": 0.25,
        "valid_from": None,
        "valid_to": None,
        "superseded_by": None,
        "created_at": from_us(1),
    }
    fast = built(ItemBrief, dict(brief))
    assert fast == ItemBrief(**brief)
    assert hash(fast) == hash(ItemBrief(**brief))
    with pytest.raises(AttributeError):
        fast.id = "other"  # type: ignore[misc]
    with pytest.raises(TypeError, match="fields"):
        built(ItemBrief, {k: v for k, v in brief.items() if k != "title"})
    with pytest.raises(TypeError, match="fields"):
        built(Anchor, {**anchor, "extra": 1})


def test_changed_equals_replace_and_keeps_the_decoded_anchor() -> None:
    doc = '{"kind": "point", "geometry": null, "bbox": [1, 2, 3, 4]}'
    brief = ItemBrief(
        **dict.fromkeys(["id", "project", "type", "title", "status", "scope_kind"], "x"),
        **dict.fromkeys(["actor", "asserted_by"], "y"),
        confidence=0.5,
        importance=0.25,
        anchor_doc=doc,
        valid_from=None,
        valid_to=None,
        superseded_by=None,
        created_at=from_us(1),
    )
    anchor = brief.anchor  # decoded once
    later = changed(brief, status="superseded", superseded_by="mem_b")
    assert later == dataclasses.replace(brief, status="superseded", superseded_by="mem_b")
    assert later.anchor is anchor
    assert brief.status == "x"  # the original is untouched
    with pytest.raises(TypeError, match="no fields"):
        changed(brief, colour="red")


@pytest.mark.parametrize("fn", [rfc3339, to_us])
def test_naive_times_are_refused(fn: object) -> None:
    with pytest.raises(InvalidDate):
        fn(dt.datetime(2024, 1, 1))  # type: ignore[operator]


def _prepared() -> Prepared:
    dialect = sqlite_dialect.dialect()
    return Prepared(dialect, sqlite_dialect.insert(projects).on_conflict_do_nothing(), False)


def test_json_pair_is_jsonable_and_the_text_it_was_read_from() -> None:
    value = {"b": (1, 2.5), "a": [{"x": None}], "n": 3}
    plain, text = json_pair(value)
    assert plain == jsonable(value) == json.loads(text.text)
    with pytest.raises(CanonicalFormError):
        json_pair({"x": float("nan")})


def test_prepared_params_send_serialised_json_as_is() -> None:
    """A JSON column given as JsonText is its text, not a JSON string of the text."""
    stmt = _prepared().entry
    change = {"item": {"tags": ["flood"]}, "content_digest": "ab"}
    row = {c.name: None for c in history.c} | {"project": "p", "seq": 1, "change": change}
    dumped = stmt.params(row)
    sent = stmt.params({**row, "change": json_pair(change)[1]})
    assert dumped == sent
    assert json.loads(sent[stmt.order.index("change")] if stmt.order else sent["change"]) == change
