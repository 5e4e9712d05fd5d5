"""The service layer's bad input on the tiny sample: every malformed call gets its typed code."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest

from api.context import ServiceContext
from api.dispatch import run
from api.errors import ApiError


def _poly(n: int) -> dict[str, Any]:
    ang = np.linspace(0, 2 * np.pi, n, endpoint=False)
    ring = [[85.33 + 0.001 * float(np.cos(a)), 23.36 + 0.001 * float(np.sin(a))] for a in ang]
    return {"type": "Polygon", "coordinates": [[*ring, ring[0]]]}


_AOT = {"start_date": "2024-01-01", "end_date": "2024-12-31", "index": "ndvi", "chart": False}
_GOOD_BBOX = {"min_lat": 23.359, "min_lng": 85.329, "max_lat": 23.361, "max_lng": 85.331}


@pytest.mark.parametrize(
    ("name", "args", "code"),
    [
        ("did_change", {"cell": "nope", "band": "ndvi", "window": [1, 2]}, "invalid_cell"),
        ("did_change", {"cell": "C", "band": "ndvi", "window": [5, 2]}, "invalid_window"),
        ("did_change", {"cell": "C", "band": "ndvi", "window": [1, 2, 3]}, "invalid_window"),
        # Out of the tslot range: the one rule of every tslot argument (api.models.common.TSlot).
        ("did_change", {"cell": "C", "band": "ndvi", "window": [1, 70000]}, "invalid_argument"),
        ("did_change", {"cell": "C", "band": "temperature", "window": [1, 2]}, "unknown_band"),
        ("did_change", {"cell": "C", "band": "ndvi", "window": ["a", "b"]}, "invalid_argument"),
        ("trajectory", {"cell": 12, "band": "ndvi"}, "invalid_argument"),
        ("trajectory", {"cell": "", "band": "ndvi"}, "invalid_cell"),
        (
            "confirm",
            {"cell": "C", "claim": {"band": "ndvi", "op": "approx", "value": 1}},
            "invalid_claim",
        ),
        (
            "confirm",
            {"cell": "C", "claim": {"band": "ndvi", "op": "gt", "value": "x"}},
            "invalid_claim",
        ),
        (
            "confirm",
            {"cell": "C", "claim": {"band": "ndvi", "op": "gt", "value": 1, "agg": "median"}},
            "invalid_claim",
        ),
        (
            "confirm",
            {"cell": "C", "claim": {"band": "ndvi", "op": "gt", "value": 1, "window": [3, 1]}},
            "invalid_window",
        ),
        ("confirm", {"cell": "C", "claim": {"band": "cloudiness", "op": "exists"}}, "unknown_band"),
        ("find_similar", {"key": "C", "k": 0}, "k_out_of_range"),
        ("find_similar", {"key": "C", "k": 1001}, "k_out_of_range"),
        ("find_similar", {"key": "C", "band": "geotessera.v9"}, "unknown_band"),
        ("find_similar", {"key": "C", "mode": "annoy"}, "invalid_mode"),
        (
            "find_similar",
            {"key": "C", "band": "geotessera.multi_year", "mode": "hamming"},
            "invalid_mode",
        ),
        ("find_similar", {"key": "inline:[1, 2, 3]"}, "dimension_mismatch"),
        ("find_similar", {"key": "inline:[1, 2,"}, "invalid_vector"),
        ("find_similar", {"key": "bad.cell"}, "invalid_cell"),
        ("find_similar", {}, "missing_key"),
        ("find_similar", {"key": "C", "as_of_signed_at": "yesterday"}, "invalid_date"),
        (
            "find_similar",
            {"key": "C", "as_of_signed_at": "1990-01-01T00:00:00Z"},
            "snapshot_not_found",
        ),
        ("is_like", {"a": "C", "b": "nope"}, "invalid_cell"),
        ("area_over_time", {**_AOT, "bbox": _GOOD_BBOX, "index": "ndsi"}, "unknown_index"),
        (
            "area_over_time",
            {**_AOT, "bbox": _GOOD_BBOX, "start_date": "2024-13-01"},
            "invalid_date",
        ),
        (
            "area_over_time",
            {**_AOT, "bbox": _GOOD_BBOX, "start_date": "2025-01-01"},
            "reversed_dates",
        ),
        ("area_over_time", {**_AOT, "bbox": _GOOD_BBOX, "max_scenes": 2}, "invalid_max_scenes"),
        ("area_over_time", {**_AOT, "bbox": _GOOD_BBOX, "max_scenes": 25}, "invalid_max_scenes"),
        (
            "area_over_time",
            {**_AOT, "areas": [{"id": str(i), "bbox": _GOOD_BBOX} for i in range(7)]},
            "too_many_areas",
        ),
        ("area_over_time", {**_AOT, "geometry": _poly(1200)}, "too_many_vertices"),
        ("area_over_time", {**_AOT, "bbox": [23.0, 85.0, 23.2, 85.2]}, "area_too_large"),
        (
            "area_over_time",
            {**_AOT, "geometry": {"type": "Polygon", "coordinates": [[[85.33, 23.36]]]}},
            "invalid_geometry",
        ),
        (
            "area_over_time",
            {**_AOT, "geometry": {"type": "Point", "coordinates": [85.33, 23.36]}},
            "invalid_geometry",
        ),
        (
            "area_over_time",
            {
                **_AOT,
                "geometry": {
                    "type": "Polygon",
                    "coordinates": [
                        [
                            [85.33, 23.36],
                            [85.331, 23.361],
                            [85.331, 23.36],
                            [85.33, 23.361],
                            [85.33, 23.36],
                        ]
                    ],
                },
            },
            "invalid_geometry",
        ),
        (
            "area_over_time",
            {
                **_AOT,
                "geometry": {
                    "type": "Polygon",
                    "coordinates": [[[85.3, 95], [85.31, 95], [85.31, 94], [85.3, 95]]],
                },
            },
            "invalid_latitude",
        ),
        (
            "area_over_time",
            {**_AOT, "bbox": {"min_lat": 23.4, "min_lng": 85.3, "max_lat": 23.3, "max_lng": 85.4}},
            "invalid_bbox",
        ),
        ("area_over_time", {**_AOT, "bbox": _GOOD_BBOX, "geometry": _poly(5)}, "invalid_geometry"),
        ("nonexistent", {}, "unknown_primitive"),
    ],
)
def test_bad_input_gets_its_code(
    ctx: ServiceContext, clearing_cell: str, name: str, args: dict[str, Any], code: str
) -> None:
    args = json.loads(json.dumps(args).replace('"C"', json.dumps(clearing_cell)))
    with pytest.raises(ApiError) as info:
        run(ctx, name, args)
    assert info.value.code == code, info.value
    assert info.value.status in (400, 404, 422)
