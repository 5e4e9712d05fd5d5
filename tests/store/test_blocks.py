"""The block hierarchy: blocks hold their cells, bbox and polygon covers, strict errors."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from store import address as a
from store import blocks as bl
from store.errors import InvalidBlock

lngs = st.floats(min_value=-180, max_value=180, allow_nan=False)
inner_lats = st.floats(min_value=-89.9, max_value=89.9, allow_nan=False)


@given(inner_lats, lngs, st.integers(min_value=0, max_value=12))
def test_block_contains_its_cells(lat: float, lng: float, level: int) -> None:
    g = a.decode(a.encode(lat, lng))
    blk = bl.block_of(g.lat_q, g.lng_q, level)
    lat_q0, lat_q1, lng_q0, lng_q1 = bl.block_q_range(blk)
    assert lat_q0 <= g.lat_q < lat_q1
    assert lng_q0 <= g.lng_q < lng_q1
    b = bl.block_bounds(blk)
    assert b[0] <= g.lat <= b[2]
    assert b[1] <= g.lng <= b[3]
    assert bl.Block.parse(blk.id) == blk


def test_block_cells_and_bbox_cover() -> None:
    blk = bl.block_of(*a.encode_q(23.36, 85.33), 4)
    cells = bl.block_cells(blk)
    assert cells.shape == (256,)
    assert len(np.unique(cells)) == 256
    la, ln = a.raw_to_q_array(cells)
    assert {int(x) >> 4 for x in la} == {blk.lat_b}
    assert {int(x) >> 4 for x in ln} == {blk.lng_b}
    bbox = (23.35, 85.32, 23.37, 85.34)
    blocks = bl.blocks_for_bbox(*bbox, level=7)
    lat_q0, lat_q1, lng_q0, lng_q1 = a.bbox_q_range(*bbox)
    covered = {(b.lat_b, b.lng_b) for b in blocks}
    for q in (lat_q0, lat_q1 - 1):
        for p in (lng_q0, lng_q1 - 1):
            assert (q >> 7, p >> 7) in covered
    poly = {
        "type": "Polygon",
        "coordinates": [[[85.32, 23.35], [85.34, 23.35], [85.32, 23.37], [85.32, 23.35]]],
    }
    tri = bl.blocks_for_polygon(poly, level=7)
    assert 0 < len(tri) <= len(blocks)
    assert set(tri) <= set(blocks)


def test_block_errors() -> None:
    with pytest.raises(InvalidBlock):
        bl.Block.parse("b7.x.1")
    with pytest.raises(InvalidBlock):
        bl.Block(22, 0, 0)
    with pytest.raises(InvalidBlock, match="cap"):
        bl.blocks_for_bbox(-80, -170, 80, 170, level=2)
    with pytest.raises(InvalidBlock):
        bl.block_cells(bl.Block(13, 0, 0))
