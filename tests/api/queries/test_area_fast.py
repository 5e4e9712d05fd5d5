"""area_over_time fast paths on the tiny cube: tile reads and scene stats.

The tile reads must give the same values as Zarr and the answers the reference
statistics of the cube's values (the kernels themselves: test_area_stats.py;
chunk decoding: tests/store/cube/test_read.py; the overpass index:
tests/store/test_inventory_index.py).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from api.context import ServiceContext
from api.dispatch import run
from api.queries import area_cells
from api.queries import area_stats as stats_mod
from api.queries.area_geometry import parse_area
from api.receipts import Signer
from store.cube import CubeReader
from tests.api.queries.area_reference import reference_stats as _reference_stats


@pytest.fixture(scope="module")
def reader(tiny_store: Any) -> CubeReader:
    return CubeReader(tiny_store.data)


def _box(tiny_store: Any) -> tuple[int, int, int, int]:
    from store import address

    b = tiny_store.manifest["bbox"]  # [min_lng, min_lat, max_lng, max_lat]
    return address.bbox_q_range(b[1], b[0], b[3], b[2])


@pytest.mark.parametrize("band", ["indices.ndvi", "s2.clear"])
def test_tile_read_equals_zarr(tiny_store: Any, reader: CubeReader, band: str) -> None:
    ctx = ServiceContext(tiny_store.data, signer=Signer.generate())
    slots = [t for t, _ in ctx.overpasses(reader, "s2", _box(tiny_store))][:40]
    assert slots
    slots = [*slots, slots[-1] + 3000]  # a slot with no chunk anywhere: fill
    b = tiny_store.manifest["bbox"]
    c = ((b[0] + b[2]) / 2, (b[1] + b[3]) / 2)
    triangle = {  # a triangle inside the sample: not every cell of its box is read
        "type": "Polygon",
        "coordinates": [[[b[0], b[1]], [b[2], b[1]], [c[0], b[3]], [b[0], b[1]]]],
    }
    for area in (parse_area("a", None, [b[1], b[0], b[3], b[2]]), parse_area("t", triangle, None)):
        got = area_cells.gather(ctx, reader, band, area, slots, True)
        arr = reader.array(band)
        y0, y1, x0, x1 = area.box
        full = np.asarray(arr.oindex[(np.asarray(slots, np.int64), slice(y0, y1), slice(x0, x1))])
        want = full[:, area.ys - y0, area.xs - x0]
        np.testing.assert_array_equal(got, want)
        assert got.dtype == want.dtype
        assert ctx.cache_info()["tiles"] > 0
        again = area_cells.gather(ctx, reader, band, area, slots, True)  # from the tile cache
        np.testing.assert_array_equal(again, want)


def test_area_stats_equal_reference_on_cube_values(tiny_store: Any, reader: CubeReader) -> None:
    """End to end: each kept scene's stats are the reference stats of the cube's clear values."""
    ctx = ServiceContext(tiny_store.data, signer=Signer.generate())
    b = tiny_store.manifest["bbox"]
    args = {
        "bbox": [b[1], b[0], b[3], b[2]],
        "start_date": "2023-01-01",
        "end_date": "2024-12-31",
        "index": "ndvi",
        "max_scenes": 12,
        "chart": False,
        "use_summaries": False,  # the cell path: the summary path is test_area_summaries.py
    }
    cold = run(ctx, "area_over_time", args).model_dump(mode="json")
    warm = run(ctx, "area_over_time", args).model_dump(mode="json")
    fresh = run(
        ServiceContext(tiny_store.data, signer=ctx.signer), "area_over_time", args
    ).model_dump(mode="json")
    for other in (warm, fresh):
        assert other["areas"] == cold["areas"]
        assert [f["fact_id"] for f in other["facts"]] == [f["fact_id"] for f in cold["facts"]]
    area = parse_area("a", None, args["bbox"])
    y0, y1, x0, x1 = area.box
    scenes = cold["areas"][0]["scenes"]
    assert len(scenes) == 12
    for s in scenes:
        t = s["tslot"]
        v = reader.read_region("indices.ndvi", y0, y1, x0, x1, t, t + 1, drop_empty=False)
        c = reader.read_region("s2.clear", y0, y1, x0, x1, t, t + 1, drop_empty=False)
        vals = np.asarray(v.values[0], dtype=np.float64)
        mask = area.mask()
        weights = np.zeros(mask.shape)
        weights[mask] = area.weights  # row-major, as the area's cells
        ok = (np.asarray(c.values[0]) == 2) & mask & np.isfinite(vals)
        ref = _reference_stats(vals[ok], weights[ok])
        assert {k: s[k] for k in ref} == ref
        assert s["n_clear"] == int(ok.sum())


def test_scene_stats_split_across_threads_is_the_same(
    tiny_store: Any, reader: CubeReader, monkeypatch: pytest.MonkeyPatch
) -> None:
    ctx = ServiceContext(tiny_store.data, signer=Signer.generate())
    b = tiny_store.manifest["bbox"]
    area = parse_area("a", None, [b[1], b[0], b[3], b[2]])
    slots = [t for t, _ in ctx.overpasses(reader, "s2", area.box)][:10]
    values = area_cells.gather(ctx, reader, "indices.ndvi", area, slots, True)
    oks = area_cells.gather(ctx, reader, "s2.clear", area, slots, True) == 2
    threaded = stats_mod.scenes_stats(values, oks, area.weights, area.n_cells)
    monkeypatch.setattr(stats_mod, "_THREADED_SCENES", 10**9)
    serial = stats_mod.scenes_stats(values, oks, area.weights, area.n_cells)
    assert threaded == serial
    assert any(s is not None for s in serial)


def test_tile_cache_is_bounded(tiny_store: Any) -> None:
    small = ServiceContext(tiny_store.data, signer=Signer.generate(), cache_bytes=1)
    b = tiny_store.manifest["bbox"]
    run(
        small,
        "area_over_time",
        {
            "bbox": [b[1], b[0], b[3], b[2]],
            "start_date": "2024-01-01",
            "end_date": "2024-12-31",
            "index": "ndvi",
            "chart": False,
        },
    )
    info = small.cache_info()
    # a call whose chunks would take over a quarter of the cache keeps none of them
    assert info["columns"] + info["tiles"] <= 1
    assert info["limit"] == 1


def test_a_small_area_is_parsed_once_per_context_and_answers_alike(
    tiny_store: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from api.queries import area as area_mod

    parsed: list[str] = []
    real = area_mod.parse_area

    def counting(area_id: str, geometry: Any, bbox: Any) -> Any:
        parsed.append(area_id)
        return real(area_id, geometry, bbox)

    monkeypatch.setattr(area_mod, "parse_area", counting)
    ctx = ServiceContext(tiny_store.data, signer=Signer.generate())
    b = tiny_store.manifest["bbox"]
    args = {"bbox": [b[1], b[0], b[3], b[2]], "start_date": "2023-01-01", "end_date": "2024-12-31"}
    first = run(ctx, "area_over_time", args).model_dump(mode="json")
    second = run(ctx, "area_over_time", args).model_dump(mode="json")
    assert first["areas"][0]["n_cells"] <= area_mod.AREA_MEMO_CELLS
    assert parsed == ["area"]  # the second call took the remembered area
    assert first["areas"] == second["areas"]
    assert first["facts"] == second["facts"]
    fresh = run(ServiceContext(tiny_store.data, signer=Signer.generate()), "area_over_time", args)
    assert fresh.model_dump(mode="json")["areas"] == first["areas"]  # a new parse, same answer
    monkeypatch.setattr(area_mod, "AREA_MEMO_CELLS", 0)  # too large to remember: parsed each time
    ctx = ServiceContext(tiny_store.data, signer=Signer.generate())
    run(ctx, "area_over_time", args)
    run(ctx, "area_over_time", args)
    assert parsed == ["area", "area", "area", "area"]


def test_cache_tiles_looks_up_like_tile() -> None:
    """ChunkCache.tiles: per key what tile gives (columns and absent keys None), recency kept."""
    from store.cube.cache import ChunkCache, Column

    cache = ChunkCache(max_bytes=3 * 64)
    a, b = np.zeros(8, np.float64), np.ones(8, np.float64)
    col = Column(np.zeros(0, np.int64), np.zeros((0, 1, 1)), 0, 0)
    cache.put([(("s", 1), a), (("s", 2), b), (("c",), col)])
    keys = [("s", 2), ("missing",), ("c",), ("s", 1), ("s", 2)]
    got = cache.tiles(keys)
    assert [g is w for g, w in zip(got, [cache.tile(k) for k in keys], strict=True)] == [True] * 5
    assert got[1] is None
    assert got[2] is None
    assert got[0] is b
    assert got[3] is a
    cache.tiles([("s", 1)])  # now the most recent: ("s", 2) is evicted first
    cache.put([(("s", 3), np.zeros(8, np.float64)), (("s", 4), np.zeros(8, np.float64))])
    assert cache.tile(("s", 1)) is a
    assert cache.tile(("s", 2)) is None
