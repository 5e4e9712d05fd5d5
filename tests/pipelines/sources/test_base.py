"""The shared search-window helpers: an item's time read through store.tslot."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from pipelines.sources import CorruptItem
from pipelines.sources.base import item_in_window

LO = datetime(2024, 3, 1, tzinfo=UTC)
HI = datetime(2024, 3, 31, 23, 59, 59, tzinfo=UTC)
BBOX = (77.0, 12.0, 78.0, 13.0)


def _item(**props: object) -> dict:
    return {"id": "x", "bbox": [77.2, 12.2, 77.4, 12.4], "properties": props}


def test_the_item_time_decides_the_window() -> None:
    assert item_in_window(_item(datetime="2024-03-15T10:30:00Z"), BBOX, LO, HI)
    assert not item_in_window(_item(datetime="2024-04-15T10:30:00Z"), BBOX, LO, HI)
    interval = _item(
        datetime=None, start_datetime="2024-02-20T00:00:00Z", end_datetime="2024-03-02T00:00:00Z"
    )
    assert item_in_window(interval, BBOX, LO, HI)


@pytest.mark.parametrize(
    "props", [{"datetime": "yesterday"}, {"start_datetime": None}, {"datetime": 20240315}]
)
def test_an_unreadable_time_is_a_corrupt_item(props: dict) -> None:
    with pytest.raises(CorruptItem, match="bad timestamp"):
        item_in_window(_item(**props), BBOX, LO, HI)
