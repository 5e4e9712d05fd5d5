"""A place argument given as lat/lng anchors to its cell: the same anchor as the cell's
text gives (kind ``point``), decoded from the cell integer."""

from __future__ import annotations

import pytest

from api.errors import ApiError
from api.memory.anchors import resolve_anchor
from api.memory.models import PlaceIn
from store import address


@pytest.mark.parametrize(("lat", "lng"), [(24.05, 89.07), (-33.9, 151.2), (90.0, -180.0)])
def test_lat_lng_anchor_is_its_cells(lat: float, lng: float) -> None:
    point = resolve_anchor(None, PlaceIn(lat=lat, lng=lng))  # type: ignore[arg-type]
    cell = resolve_anchor(None, PlaceIn(cell=address.encode(lat, lng)))  # type: ignore[arg-type]
    assert point.kind == "point"
    assert cell.kind == "cell"
    assert (point.cell, point.bbox, point.geometry) == (cell.cell, cell.bbox, cell.geometry)


def test_lat_outside_range_is_a_typed_error() -> None:
    where = PlaceIn.model_construct(lat=95.0, lng=10.0)  # past the model's own range check
    with pytest.raises(ApiError) as caught:
        resolve_anchor(None, where)  # type: ignore[arg-type]
    assert caught.value.code == "invalid_latitude"
