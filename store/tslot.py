"""Time slots: the time axis of every cube.

- ``day`` tempo (scenes: Sentinel-2, Sentinel-1, indices): ``floor(unix_seconds / 86400)``.
- ``year`` tempo (Tessera vintages): ``year - 1970``.

Inputs may be :class:`datetime.date`, :class:`datetime.datetime` (timezone-aware;
naive means UTC) or ISO 8601 strings (``YYYY-MM-DD`` or a full timestamp, ``Z``
allowed). :func:`parse_datetime` reads the timestamps of STAC items (RFC 3339).
Pure functions; bad input raises :class:`store.errors.InvalidDate`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from datetime import UTC, date, datetime, timedelta
from typing import Literal

import numpy as np
import numpy.typing as npt

from store.errors import InvalidDate, InvalidTempo

__all__ = [
    "EPOCH",
    "MAX_DAY_SLOT",
    "MAX_YEAR_SLOT",
    "TEMPOS",
    "Tempo",
    "check_tempo",
    "day_of_year",
    "day_slot",
    "nearest_slots",
    "parse_datetime",
    "parse_when",
    "slot_to_date",
    "to_slot",
    "year_slot",
]

Tempo = Literal["day", "year"]
TEMPOS: tuple[Tempo, ...] = ("day", "year")
EPOCH = date(1970, 1, 1)
MAX_DAY_SLOT = (1 << 16) - 1
"""Largest day slot the cubes hold (2149-06-06); earlier than the epoch is refused too."""
MAX_YEAR_SLOT = 255
"""Largest year slot the cubes hold (2225)."""
_MAX_ISO_LEN = 64


def check_tempo(tempo: str) -> Tempo:
    """Validate a tempo name."""
    if tempo == "day":
        return "day"
    if tempo == "year":
        return "year"
    raise InvalidTempo(f"unknown tempo {tempo!r}; expected one of {', '.join(TEMPOS)}")


def parse_when(value: date | datetime | str) -> datetime:
    """Normalise a date, datetime or ISO string to an aware UTC datetime.

    Raises:
        InvalidDate: unparseable string, wrong type, or out of datetime's range.
    """
    if isinstance(value, datetime):
        dt = value
    elif isinstance(value, date):
        dt = datetime(value.year, value.month, value.day)
    elif isinstance(value, str):
        text = value.strip()
        if not text or len(text) > _MAX_ISO_LEN:
            raise InvalidDate(f"invalid date {value[:_MAX_ISO_LEN]!r}: expected ISO 8601")
        try:
            dt = datetime.fromisoformat(text)
        except ValueError as exc:
            raise InvalidDate(f"invalid date {value!r}: {exc}") from None
    else:
        raise InvalidDate(f"expected a date, datetime or ISO string, got {type(value).__name__}")
    return _as_utc(dt, value)


def parse_datetime(value: object) -> datetime:
    """Parse an RFC 3339 timestamp (a STAC ``datetime``) into an aware UTC datetime.

    Stricter than :func:`parse_when` where STAC is: only a string or a
    datetime is a timestamp (a bare date object is refused), and the text is
    taken as it stands (no stripping). ``Z`` or ``z`` means UTC, as RFC 3339
    allows; a string without an offset, or a naive datetime, means UTC.

    Example:
        >>> parse_datetime("2024-03-15T10:30:00Z").isoformat()
        '2024-03-15T10:30:00+00:00'

    Raises:
        InvalidDate: Not a string or datetime, not a timestamp, or out of datetime's range.
    """
    if isinstance(value, datetime):
        dt = value
    elif isinstance(value, str):
        try:
            dt = datetime.fromisoformat(value.replace("Z", "+00:00").replace("z", "+00:00"))
        except ValueError:
            raise InvalidDate(f"bad timestamp {value!r}") from None
    else:
        raise InvalidDate(f"bad timestamp {value!r}")
    return _as_utc(dt, value)


def _as_utc(dt: datetime, value: object) -> datetime:
    """``dt`` in UTC (naive means UTC); ``value`` names the input in the error."""
    if dt.tzinfo is None:
        return dt.replace(tzinfo=UTC)
    try:
        return dt.astimezone(UTC)
    except OverflowError as exc:
        raise InvalidDate(f"date {value!r} out of range: {exc}") from None


def day_slot(value: date | datetime | str) -> int:
    """Day slot ``floor(unix_seconds / 86400)`` of a moment (UTC).

    Example:
        >>> day_slot("2024-03-15")
        19797
    """
    dt = parse_when(value)
    slot = math.floor(dt.timestamp() / 86400)
    if not 0 <= slot <= MAX_DAY_SLOT:
        raise InvalidDate(f"date {value!r} outside the day-slot range 1970-01-01..2149-06-06")
    return slot


def year_slot(value: date | datetime | str) -> int:
    """Annual slot ``year - 1970`` of a moment (UTC)."""
    dt = parse_when(value)
    slot = dt.year - 1970
    if not 0 <= slot <= MAX_YEAR_SLOT:
        raise InvalidDate(f"date {value!r} outside the year-slot range 1970..2225")
    return slot


def to_slot(value: date | datetime | str, tempo: str = "day") -> int:
    """Slot of a moment in the given tempo (``day`` or ``year``)."""
    return day_slot(value) if check_tempo(tempo) == "day" else year_slot(value)


def slot_to_date(slot: int, tempo: str = "day") -> date:
    """First day of a slot.

    Raises:
        InvalidDate: slot outside the tempo's range or not an int.
        InvalidTempo: unknown tempo.
    """
    t = check_tempo(tempo)
    if isinstance(slot, bool) or not isinstance(slot, int):
        raise InvalidDate(f"slot must be an int, got {slot!r}")
    if t == "day":
        if not 0 <= slot <= MAX_DAY_SLOT:
            raise InvalidDate(f"day slot {slot} outside 0..{MAX_DAY_SLOT}")
        return EPOCH + timedelta(days=slot)
    if not 0 <= slot <= MAX_YEAR_SLOT:
        raise InvalidDate(f"year slot {slot} outside 0..{MAX_YEAR_SLOT}")
    return date(1970 + slot, 1, 1)


def day_of_year(slot: int) -> int:
    """Day of the year (1 on 1 January, up to 366) of a day slot.

    Example:
        >>> day_of_year(day_slot("2024-03-15"))
        75

    Raises:
        InvalidDate: slot outside the day-slot range or not an int.
    """
    return slot_to_date(slot).timetuple().tm_yday


def nearest_slots(
    slots: Sequence[int] | npt.NDArray[np.int64], t: int
) -> tuple[int | None, int | None]:
    """Nearest slot strictly before and strictly after ``t`` in a sorted slot list."""
    arr = np.asarray(slots, dtype=np.int64)
    i = int(np.searchsorted(arr, t, side="left"))
    before = int(arr[i - 1]) if i > 0 else None
    j = int(np.searchsorted(arr, t, side="right"))
    after = int(arr[j]) if j < arr.size else None
    return before, after
