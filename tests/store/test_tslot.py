"""Time slots: day and year tempos, inputs, errors and round trips."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta, timezone

import pytest
from hypothesis import given
from hypothesis import strategies as st

from store import tslot as t
from store.errors import InvalidDate, InvalidTempo


def test_known_values() -> None:
    assert t.day_slot("1970-01-01") == 0
    assert t.day_slot("2024-03-15") == 19797
    assert t.day_slot(date(2024, 3, 15)) == 19797
    assert t.day_slot("2024-03-15T23:59:59Z") == 19797
    assert t.year_slot("2024-06-01") == 54
    assert t.to_slot("2024-06-01", "year") == 54


def test_naive_means_utc_and_aware_converts() -> None:
    naive = datetime(2024, 3, 15, 1, 0)
    assert t.day_slot(naive) == t.day_slot(naive.replace(tzinfo=UTC))
    ist = timezone(timedelta(hours=5, minutes=30))
    # 02:00 in India on 15 March is still 14 March in UTC
    assert t.day_slot(datetime(2024, 3, 15, 2, 0, tzinfo=ist)) == 19796


@pytest.mark.parametrize(
    "bad", ["2024-13-01", "yesterday", "", "2024-02-30", 12345, None, "9" * 500]
)
def test_bad_dates(bad) -> None:
    with pytest.raises(InvalidDate):
        t.day_slot(bad)


def test_out_of_range_and_tempo() -> None:
    with pytest.raises(InvalidDate):
        t.day_slot("1969-12-31")
    with pytest.raises(InvalidDate):
        t.slot_to_date(-1)
    with pytest.raises(InvalidTempo, match="fortnight"):
        t.to_slot("2024-01-01", "fortnight")


@given(st.dates(min_value=date(1970, 1, 1), max_value=date(2149, 6, 6)))
def test_day_round_trip(d: date) -> None:
    assert t.slot_to_date(t.day_slot(d)) == d


@given(
    st.datetimes(
        min_value=datetime(1970, 1, 2), max_value=datetime(2149, 1, 1), timezones=st.just(UTC)
    )
)
def test_datetime_floor(dt: datetime) -> None:
    s = t.day_slot(dt)
    assert t.slot_to_date(s) == dt.date()


@given(st.integers(min_value=1970, max_value=2225))
def test_year_round_trip(y: int) -> None:
    assert t.slot_to_date(t.year_slot(date(y, 7, 1)), "year") == date(y, 1, 1)


def test_day_of_year() -> None:
    assert t.day_of_year(0) == 1
    assert t.day_of_year(t.day_slot("2024-03-15")) == 75
    assert t.day_of_year(t.day_slot("2024-12-31")) == 366
    assert t.day_of_year(t.day_slot("2023-12-31")) == 365
    with pytest.raises(InvalidDate):
        t.day_of_year(-1)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("2024-03-15T10:30:00Z", datetime(2024, 3, 15, 10, 30, tzinfo=UTC)),
        ("2024-03-15t10:30:00z", datetime(2024, 3, 15, 10, 30, tzinfo=UTC)),
        ("2024-03-15T10:30:00.123456+00:00", datetime(2024, 3, 15, 10, 30, 0, 123456, tzinfo=UTC)),
        ("2024-03-15T12:30:00+02:00", datetime(2024, 3, 15, 10, 30, tzinfo=UTC)),
        ("2024-03-15T10:30:00", datetime(2024, 3, 15, 10, 30, tzinfo=UTC)),
        ("2024-03-15", datetime(2024, 3, 15, tzinfo=UTC)),
    ],
)
def test_parse_datetime_reads_rfc3339_into_utc(text: str, expected: datetime) -> None:
    parsed = t.parse_datetime(text)
    assert parsed == expected
    assert parsed.tzinfo is UTC


def test_parse_datetime_takes_datetimes_naive_as_utc() -> None:
    assert t.parse_datetime(datetime(2024, 3, 15, 1)) == datetime(2024, 3, 15, 1, tzinfo=UTC)
    ist = timezone(timedelta(hours=5, minutes=30))
    aware = t.parse_datetime(datetime(2024, 3, 15, 2, tzinfo=ist))
    assert aware == datetime(2024, 3, 14, 20, 30, tzinfo=UTC)
    assert aware.tzinfo is UTC


@pytest.mark.parametrize(
    "bad",
    [
        None,
        "",
        "yesterday",
        "2024-13-01T00:00:00Z",
        " 2024-03-15T10:30:00Z",
        date(2024, 3, 15),
        1710498600,
        "0001-01-01T00:00:00+05:00",
    ],
)
def test_parse_datetime_refuses_what_is_not_a_timestamp(bad) -> None:
    with pytest.raises(InvalidDate, match=r"bad timestamp|out of range"):
        t.parse_datetime(bad)
