"""A Tessera vintage gathered block by block is the vintage gathered whole.

The Dask path (:mod:`pipelines.tessera.vintage`) gathers each block's part of the area from
the tiles whose bounding box meets the block; the local path gathers the whole window from
every tile. These tests hold the two to the same cells on a window across block boundaries,
and the totals (cells, tiles, skips) to the same sums. The cluster itself is exercised in
``test_dask_ingest.py``.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from pipelines.lattice import LatticeWindow
from pipelines.resources import AreaResource, SceneSourceResource
from pipelines.sources.models import Skip
from pipelines.tessera.assets import _vintage_items
from pipelines.tessera.ingest import VintageTotals, load_vintage
from pipelines.tessera.vintage import tiles_meeting
from store import blocks
from tests.conftest import IngestedSample

pytestmark = pytest.mark.slow  # the tiny sample's ingest (shared fixture)


def _split(window: LatticeWindow, level: int) -> list[LatticeWindow]:
    """``window``'s part of every level-``level`` block it meets."""
    size = 1 << level
    out = []
    for lat in range(window.lat_q0 - window.lat_q0 % size, window.lat_q1, size):
        for lng in range(window.lng_q0 - window.lng_q0 % size, window.lng_q1, size):
            part = LatticeWindow.of_block(blocks.block_of(lat, lng, level)).intersect(window)
            if part is not None:
                out.append(part)
    return out


def _tiles(tiny: IngestedSample, year: int) -> tuple[list, LatticeWindow]:
    scenes = SceneSourceResource(kind="static", path=str(tiny.catalog))
    area = AreaResource(path=str(tiny.sample / "manifest.json"))
    return _vintage_items(scenes, area, year), area.window()


@pytest.mark.parametrize("level", [5, 6])
def test_block_by_block_is_the_whole_window(tiny_store: IngestedSample, level: int) -> None:
    year = tiny_store.report.years[0]
    tiles, area = _tiles(tiny_store, year)
    assert tiles
    # the area grown by a margin, so the window crosses block edges and leaves the tiles
    m = 40
    window = LatticeWindow(area.lat_q0 - m, area.lat_q1 + m, area.lng_q0 - m, area.lng_q1 + m)
    whole = load_vintage(tiles, window, year)
    parts = _split(window, level)
    assert len(parts) > 1
    emb = np.zeros_like(whole.embedding)
    scale = np.full_like(whole.scale, np.nan)
    bits = np.zeros_like(whole.bin128)
    totals = []
    for part in parts:
        v = load_vintage(tiles_meeting(tiles, part), part, year)
        rows = slice(part.lat_q0 - window.lat_q0, part.lat_q1 - window.lat_q0)
        cols = slice(part.lng_q0 - window.lng_q0, part.lng_q1 - window.lng_q0)
        emb[rows, cols], scale[rows, cols], bits[rows, cols] = v.embedding, v.scale, v.bin128
        totals.append(VintageTotals.of(v))
    np.testing.assert_array_equal(emb, whole.embedding)
    np.testing.assert_array_equal(scale, whole.scale)  # NaN water where NaN, +inf off the tiles
    np.testing.assert_array_equal(bits, whole.bin128)
    summed = VintageTotals.summed(totals)
    assert summed.n_valid == whole.n_valid > 0
    assert summed.bad_scales == whole.bad_scales == 0
    assert summed.item_ids == tuple(sorted(whole.item_ids))


def test_tiles_meeting_keeps_the_tiles_under_a_window(tiny_store: IngestedSample) -> None:
    year = tiny_store.report.years[0]
    tiles, area = _tiles(tiny_store, year)
    assert tiles_meeting(tiles, area) == tiles  # the search found them for this area
    # a window far from the area meets none of them
    far = LatticeWindow(area.lat_q0 + 10_000, area.lat_q1 + 10_000, area.lng_q0, area.lng_q1)
    assert tiles_meeting(tiles, far) == []
    # a tile whose box only touches the window's edge is kept (its pixels may reach a centre)
    _w, s, e, n = area.bounds()
    edge = replace(tiles[0], bbox=(e, s, e + 1.0, n))
    assert tiles_meeting([edge], area) == [edge]


def test_totals_name_each_tile_and_skip_once() -> None:
    a = VintageTotals(3, 0, ("t1", "t2"), (Skip("t9", "unreadable: x", code="corrupt"),))
    b = VintageTotals(4, 1, ("t2", "t3"), (Skip("t9", "unreadable: x", code="corrupt"),))
    s = VintageTotals.summed([a, b])
    assert (s.n_valid, s.bad_scales, s.item_ids) == (7, 1, ("t1", "t2", "t3"))
    assert [k.item_id for k in s.skipped] == ["t9"]
    assert VintageTotals.summed([]) == VintageTotals(0, 0, (), ())


def test_an_unreadable_tile_is_a_skip_of_each_block_named_once(
    tiny_store: IngestedSample, tmp_path
) -> None:
    year = tiny_store.report.years[0]
    tiles, area = _tiles(tiny_store, year)
    broken_file = tmp_path / "broken.npy"
    broken_file.write_bytes(b"not an array")
    broken = replace(
        tiles[0],
        id="zz-broken",
        assets={
            **tiles[0].assets,
            "embedding": replace(tiles[0].assets["embedding"], href=str(broken_file)),
        },
    )
    parts = _split(area, 5)
    totals = [
        VintageTotals.of(load_vintage(tiles_meeting([*tiles, broken], p), p, year)) for p in parts
    ]
    summed = VintageTotals.summed(totals)
    assert [s.item_id for s in summed.skipped] == ["zz-broken"]
    assert summed.skipped[0].code == "corrupt"
    assert "zz-broken" not in summed.item_ids
    assert summed.n_valid == load_vintage(tiles, area, year).n_valid
