"""area_over_time fast paths: exact statistics kernels, tile reads, lean inventory sources.

The kernels must give the same bits as the numpy expressions they replace
(answers and the fact ids bound to them must not move), the tile reads the
same values as Zarr, and the lean inventory read the same rows as the table.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest

from api import context as context_mod
from api.context import ServiceContext, _load_sources, _read_chunks
from api.dispatch import run
from api.queries import area as area_mod
from api.queries.area import _pairwise, theil_sen, weighted_stats
from api.receipts import Signer
from store.cube import CubeReader
from store.inventory import Inventory


def _reference_stats(x: np.ndarray, w: np.ndarray) -> dict[str, float]:
    """The numpy implementation the kernels replaced (kept here as the oracle), with
    equal values in position order (a stable sort): the order every machine agrees on."""
    order = np.argsort(x, kind="stable")
    xs, ws = x[order], w[order]
    total = float(ws.sum())
    mean = float((xs * ws).sum() / total)
    std = float(math.sqrt(max(0.0, float((ws * (xs - mean) ** 2).sum()) / total)))
    cw = (np.cumsum(ws) - ws / 2.0) / total
    q = np.interp([0.10, 0.25, 0.50, 0.75, 0.90], cw, xs)
    return {
        "mean": mean,
        "std": std,
        "p10": float(q[0]),
        "p25": float(q[1]),
        "median": float(q[2]),
        "p75": float(q[3]),
        "p90": float(q[4]),
    }


SIZES = [1, 2, 3, 7, 8, 9, 15, 16, 17, 127, 128, 129, 255, 256, 257, 1000, 8191, 8193, 12_345]


@pytest.mark.parametrize("n", [*SIZES, 0, 100_003])
def test_pairwise_sum_has_numpys_bits(n: int) -> None:
    rng = np.random.default_rng(n)
    a = rng.standard_normal(n) * 10 ** rng.uniform(-4, 4, n)
    assert _pairwise(a, n) == a.sum()


@pytest.mark.parametrize("kind", ["float32", "ties", "float64"])
def test_weighted_stats_has_the_reference_bits(kind: str) -> None:
    rng = np.random.default_rng(len(kind))
    for n in SIZES * 3:
        if kind == "float32":
            x = rng.standard_normal(n).astype(np.float32).astype(np.float64)
        elif kind == "ties":  # many equal values across rows of different weight
            x = (rng.integers(0, 40, n) / 39).astype(np.float32).astype(np.float64)
        else:
            x = rng.standard_normal(n)
        w = np.cos(np.radians(23.0 + rng.integers(0, 120, n) * 8.6e-5))
        assert weighted_stats(x, w) == _reference_stats(x, w), n


def test_weighted_stats_on_float32_input_equals_float64_input() -> None:
    rng = np.random.default_rng(7)
    x32 = (rng.integers(0, 500, 5000) / 499).astype(np.float32)
    w = np.cos(np.radians(rng.uniform(20, 25, 5000)))
    assert weighted_stats(x32, w) == _reference_stats(x32.astype(np.float64), w)


def test_theil_sen_equals_scipy() -> None:
    from scipy.stats import theilslopes

    rng = np.random.default_rng(3)
    for n in (2, 3, 6, 17, 24):
        x = np.sort(rng.choice(np.arange(19_000, 20_000), n, replace=False)) / 365.25
        y = np.round(rng.standard_normal(n), 2)  # ties in y
        res = theilslopes(y, x)
        assert theil_sen(y, x) == (float(res[0]), float(res[1]))


# --------------------------------------------------------------------------- store-backed


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
    y0, y1, x0, x1 = box = _box(tiny_store)
    box = (y0 + 3, y1 - 2, x0 + 1, x1 - 5)  # not block aligned
    slots = [t for t, _ in ctx.overpasses("s2", box)][:40]
    assert slots
    slots = [*slots, slots[-1] + 3000]  # a slot with no chunk anywhere: fill
    got = area_mod._read(ctx, reader, band, box, slots)
    arr = reader.array(band)
    want = np.asarray(
        arr.oindex[(np.asarray(slots, np.int64), slice(box[0], box[1]), slice(box[2], box[3]))]
    )
    np.testing.assert_array_equal(got, want)
    assert got.dtype == want.dtype
    assert ctx.cache_info()["tiles"] > 0
    again = area_mod._read(ctx, reader, band, box, slots)  # from the tile cache
    np.testing.assert_array_equal(again, want)


def test_chunks_read_through_zarr_when_codecs_are_not_plain(
    tiny_store: Any, reader: CubeReader, monkeypatch: pytest.MonkeyPatch
) -> None:
    coords = reader.chunks("indices.ndvi")[:5]
    keys = [(int(c[0]), int(c[1]), int(c[2])) for c in coords]
    direct = _read_chunks(reader, "indices.ndvi", keys)
    monkeypatch.setattr(context_mod, "_chunk_decoder", lambda arr: None)
    via_zarr = _read_chunks(reader, "indices.ndvi", keys)
    for a, b in zip(direct, via_zarr, strict=True):
        assert a is not None
        assert b is not None
        np.testing.assert_array_equal(a, b)


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
    }
    cold = run(ctx, "area_over_time", args).model_dump(mode="json")
    warm = run(ctx, "area_over_time", args).model_dump(mode="json")
    fresh = run(
        ServiceContext(tiny_store.data, signer=ctx.signer), "area_over_time", args
    ).model_dump(mode="json")
    for other in (warm, fresh):
        assert other["areas"] == cold["areas"]
        assert [f["fact_id"] for f in other["facts"]] == [f["fact_id"] for f in cold["facts"]]
    area = area_mod._area("a", None, args["bbox"])
    y0, y1, x0, x1 = area.box
    scenes = cold["areas"][0]["scenes"]
    assert len(scenes) == 12
    for s in scenes:
        t = s["tslot"]
        v = reader.read_region("indices.ndvi", y0, y1, x0, x1, t, t + 1, drop_empty=False)
        c = reader.read_region("s2.clear", y0, y1, x0, x1, t, t + 1, drop_empty=False)
        vals = np.asarray(v.values[0], dtype=np.float64)
        ok = (np.asarray(c.values[0]) == 2) & area.inside & np.isfinite(vals)
        ref = _reference_stats(vals[ok], area.weights[ok])
        assert {k: s[k] for k in ref} == ref
        assert s["n_clear"] == int(ok.sum())


def test_scene_stats_split_across_threads_is_the_same(
    tiny_store: Any, reader: CubeReader, monkeypatch: pytest.MonkeyPatch
) -> None:
    ctx = ServiceContext(tiny_store.data, signer=Signer.generate())
    b = tiny_store.manifest["bbox"]
    area = area_mod._area("a", None, [b[1], b[0], b[3], b[2]])
    slots = [t for t, _ in ctx.overpasses("s2", area.box)][:10]
    values = area_mod._read(ctx, reader, "indices.ndvi", area.box, slots)
    _, oks = area_mod._clear_fractions(ctx, reader, "indices.ndvi", area, slots)
    threaded = area_mod._scenes_stats(values, oks, area)
    monkeypatch.setattr(area_mod, "_THREADED_SCENES", 10**9)
    serial = area_mod._scenes_stats(values, oks, area)
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
    assert info["columns"] + info["tiles"] == 1
    assert info["limit"] == 1


def test_lean_sources_equal_the_inventory_table(tiny_store: Any) -> None:
    inv = Inventory(tiny_store.data)
    lean = _load_sources(inv)
    table = inv.table()
    rows = sorted(
        (fam, int(t), blk, tuple(items or ()))
        for fam, t, blk, items in zip(
            table["band"].to_pylist(),
            table["tslot"].to_pylist(),
            table["block"].to_pylist(),
            table["item_ids"].to_pylist(),
            strict=True,
        )
    )
    assert rows
    n_lean = sum(len(r) for by_t in lean.values() for r in by_t.values())
    assert n_lean == len(rows)
    for fam, t, _, items in rows:
        assert items in [r.item_ids for r in lean[fam][t]]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("key_bytes", [32 << 20, 1], ids=["one-group", "group-per-scene"])
def test_keyed_scene_stats_equal_the_reference_with_ties_signed_zeros_and_non_finite(
    dtype: type, key_bytes: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(area_mod, "_KEY_BYTES", key_bytes)
    triangle = {
        "type": "Polygon",
        "coordinates": [[[7.0, 45.0], [7.006, 45.0], [7.0, 45.004], [7.0, 45.0]]],
    }
    area = area_mod._area("a", triangle, None)  # cells outside carry no weight
    assert not area.inside.all()
    rng = np.random.default_rng(3)
    shape = (7, *area.inside.shape)
    values = np.round(rng.normal(0.3, 0.2, shape), 1).astype(dtype)  # many ties
    values[0].flat[::2] = -0.0
    values[0].flat[1::2] = 0.0  # quantiles land on signed zeros
    values[1].flat[::7] = np.nan
    values[2].flat[::11] = np.inf
    values[3].flat[::13] = -np.inf
    oks = (rng.random(shape) < 0.7) & area.inside
    oks[4] = False  # a scene with nothing clear
    got = area_mod._scenes_stats(values, oks, area)
    assert got[4] is None
    for s in range(shape[0]):
        if s == 4:
            continue
        sel = oks[s] & np.isfinite(values[s])
        ref = weighted_stats(values[s][sel], area.weights[sel])
        bits = {k: np.float64(got[s][k]).view(np.int64) for k in ref}
        assert bits == {k: np.float64(v).view(np.int64) for k, v in ref.items()}  # bit for bit
        assert got[s]["n_clear"] == int(sel.sum())
