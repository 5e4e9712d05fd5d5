"""area_over_time's cost follows the cells inside the geometry, under a typed per-call budget.

Counts chunk reads (the reader's ``read_chunks`` calls), never time: a thin
shape whose bounding box covers stored blocks it does not touch reads none of
them, and a call over :data:`api.queries.area.MAX_CELL_SCENES` is refused
before anything is read.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from api.context import ServiceContext
from api.dispatch import run
from api.errors import InvalidArgument
from api.queries import area as area_mod
from api.queries.area_geometry import parse_area
from api.receipts import Signer
from store import address

_ARGS = {"start_date": "2023-01-01", "end_date": "2024-12-31", "max_scenes": 12, "chart": False}


def _spied(tiny_store: Any) -> tuple[ServiceContext, list[tuple[str, tuple[int, int, int]]]]:
    """A fresh context whose reader records every chunk it fetches (the real reads still run)."""
    ctx = ServiceContext(tiny_store.data, signer=Signer.generate())
    reader = ctx.reader()
    calls: list[tuple[str, tuple[int, int, int]]] = []
    real = reader.read_chunks

    def read_chunks(band: str, coords: Any) -> Any:
        calls.extend((band, tuple(c)) for c in coords)
        return real(band, coords)

    reader.read_chunks = read_chunks  # type: ignore[method-assign]
    return ctx, calls


def _stored_blocks(ctx: ServiceContext) -> tuple[int, set[tuple[int, int]]]:
    reader = ctx.reader()
    return 1 << reader.block_level, set(reader.chunk_index("s2.clear"))


def _polygon(cells: list[tuple[float, float]]) -> dict[str, Any]:
    """A GeoJSON polygon through lattice positions ``(y, x)`` (fractional: cell edges)."""
    ring = []
    for y, x in [*cells, cells[0]]:
        lat, lng = address.q_center(y, x)
        ring.append([lng, lat])
    return {"type": "Polygon", "coordinates": [ring]}


def test_a_thin_shape_around_stored_blocks_reads_none_of_them(tiny_store: Any) -> None:
    ctx, calls = _spied(tiny_store)
    side, stored = _stored_blocks(ctx)
    assert stored
    cy0, cy1 = min(b[0] for b in stored), max(b[0] for b in stored)
    cx0, cx1 = min(b[1] for b in stored), max(b[1] for b in stored)
    # an L of 4-cell-wide arms in the blocks just south and just east of the stored ones:
    # its bounding box covers every stored block, the shape touches none
    s, e = (cy0 - 1) * side + 40.5, (cx1 + 1) * side + 40.5
    w, n = (cx0 - 1) * side + 40.5, (cy1 + 1) * side + 44.5
    geometry = _polygon([(s, w), (s, e + 4), (n, e + 4), (n, e), (s + 4, e), (s + 4, w)])
    area = parse_area("l", geometry, None)
    touched = {(b.cy, b.cx) for b in area.blocks(side)}
    y0, y1, x0, x1 = area.box
    assert all(y0 <= cy * side and (cy + 1) * side <= y1 for cy, _ in stored)
    assert all(x0 <= cx * side and (cx + 1) * side <= x1 for _, cx in stored)
    assert touched
    assert not touched & stored
    assert area.n_cells < (y1 - y0) * (x1 - x0) // 10  # few cells in a large box

    out = run(ctx, "area_over_time", {"geometry": geometry, **_ARGS}).model_dump(mode="json")

    read_blocks = {(c[1], c[2]) for _, c in calls}
    assert not read_blocks & stored  # nothing read from the blocks the shape does not touch
    assert out["areas"][0]["n_cells"] == area.n_cells


def test_a_thin_diagonal_reads_only_the_blocks_it_touches(tiny_store: Any) -> None:
    ctx, calls = _spied(tiny_store)
    side, stored = _stored_blocks(ctx)
    b = tiny_store.manifest["bbox"]  # [min_lng, min_lat, max_lng, max_lat]
    dl = (b[2] - b[0]) / 40
    geometry = {  # the shape: a thin parallelogram corner to corner
        "type": "Polygon",
        "coordinates": [
            [[b[0], b[1]], [b[0] + dl, b[1]], [b[2], b[3]], [b[2] - dl, b[3]], [b[0], b[1]]]
        ],
    }
    area = parse_area("d", geometry, None)
    touched = {(blk.cy, blk.cx) for blk in area.blocks(side)}

    out = run(ctx, "area_over_time", {"geometry": geometry, **_ARGS}).model_dump(mode="json")

    read_blocks = {(c[1], c[2]) for _, c in calls}
    assert read_blocks
    assert read_blocks <= touched & stored
    assert out["areas"][0]["scenes"]
    # the area's buffers hold its cells: the cells inside, not its bounding box
    y0, y1, x0, x1 = area.box
    assert area.ys.size == area.n_cells < (y1 - y0) * (x1 - x0)
    mask = np.zeros((y1 - y0, x1 - x0), bool)
    mask[area.ys - y0, area.xs - x0] = True
    assert np.array_equal(mask, area.mask())


def test_a_call_over_the_budget_is_refused_naming_it_before_reading(
    tiny_store: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    ctx, calls = _spied(tiny_store)
    b = tiny_store.manifest["bbox"]
    args = {"bbox": [b[1], b[0], b[3], b[2]], **_ARGS}
    fine = run(ctx, "area_over_time", args).model_dump(mode="json")
    n_cells = fine["areas"][0]["n_cells"]
    monkeypatch.setattr(area_mod, "MAX_CELL_SCENES", n_cells)  # one overpass's worth
    ctx, calls = _spied(tiny_store)  # a cold cache: any read would show
    with pytest.raises(InvalidArgument) as err:
        run(ctx, "area_over_time", args)
    e = err.value
    assert (e.code, e.status) == ("over_budget", 422)
    assert e.details["budget"] == "cell_scenes"
    assert e.details["limit"] == n_cells
    assert e.details["cost"] > n_cells
    assert e.details["per_area"][0]["n_cells"] == n_cells
    assert "budget" in e.message
    assert calls == []  # refused before any chunk was read
