"""Block summaries: they compose exactly, bound the quantiles, and the writer keeps them current."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from store.cube import CubeReader, CubeWriter, band_spec
from store.cube import summaries as sm
from tests.api.queries.area_reference import reference_stats

SIDE = 128
Y0, X0 = 13_000 * SIDE, 22_000 * SIDE
T0 = 19_796  # a Thursday: start of a time chunk
GRID = sm.Grid.of(band_spec("indices.ndvi"))
LEVELS = (0.10, 0.25, 0.50, 0.75, 0.90)
NAMES = ("p10", "p25", "median", "p75", "p90")


def _cells(rng: np.random.Generator, n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    x = rng.normal(0.3, 0.4, n).astype(np.float32)  # some beyond [-1, 1): under/overflow bins
    x[rng.random(n) < 0.1] = np.nan
    ok = rng.random(n) < 0.8
    w = sm.row_weights(Y0, n)  # distinct weights
    return x, ok, w


def test_merge_of_halves_equals_whole() -> None:
    rng = np.random.default_rng(1)
    x, ok, w = _cells(rng, 5000)
    whole = sm.summarise_cells(x, ok, w, GRID)
    for cut in (1, 1700, 2500, 4999):
        a = sm.summarise_cells(x[:cut], ok[:cut], w[:cut], GRID)
        b = sm.summarise_cells(x[cut:], ok[cut:], w[cut:], GRID)
        merged = sm.merge(np.stack([a, b]))
        for f in (sm.N_FLAG, sm.N, sm.MIN, sm.MAX):  # counts and extremes: exact
            assert merged[f] == whole[f]
        np.testing.assert_allclose(
            merged[[sm.W, sm.MEAN, sm.M2]], whole[[sm.W, sm.MEAN, sm.M2]], rtol=1e-12
        )
        np.testing.assert_allclose(merged[sm.HIST :], whole[sm.HIST :], rtol=1e-12, atol=1e-12)
    assert sm.merge(np.stack([sm.empty(), whole]))[sm.N] == whole[sm.N]
    assert sm.merge(np.zeros((0, sm.N_FIELDS)))[sm.N] == 0


def test_moments_and_quantile_intervals_hold_the_cell_answer() -> None:
    rng = np.random.default_rng(2)
    for n in (1, 2, 7, 300, 20_000):
        x, ok, w = _cells(rng, n)
        ok[0] = True
        x[0] = 0.25
        sel = ok & np.isfinite(x)
        ref = reference_stats(x[sel].astype(np.float64), w[sel])
        parts = np.array_split(np.arange(n), 5)
        s = sm.merge(np.stack([sm.summarise_cells(x[p], ok[p], w[p], GRID) for p in parts]))
        count, mean, std = sm.weighted_moments(s)
        assert count == int(sel.sum())
        assert mean == pytest.approx(ref["mean"], rel=1e-12, abs=1e-12)
        assert std == pytest.approx(ref["std"], rel=1e-9, abs=1e-12)
        for est, name in zip(sm.quantiles(s, GRID, LEVELS), NAMES, strict=True):
            assert est.lo <= ref[name] <= est.hi, (n, name, est, ref[name])
            assert est.lo <= est.value <= est.hi
            if (
                n >= 20_000
            ):  # dense values: the interval is a few bins (sparse ones span their gaps)
                assert est.hi - est.lo <= 3 * GRID.width or est.lo < GRID.lo or est.hi > GRID.hi


def test_quantile_interval_fails_on_a_wrong_histogram() -> None:
    """The check above can fail: a histogram shifted by bins gives intervals missing the answer."""
    rng = np.random.default_rng(3)
    x, ok, w = _cells(rng, 4000)
    s = sm.summarise_cells(x, ok, w, GRID)
    sel = ok & np.isfinite(x)
    ref = reference_stats(x[sel].astype(np.float64), w[sel])
    bad = s.copy()
    bad[sm.HIST + 10 :] = s[sm.HIST : -10]
    bad[sm.HIST : sm.HIST + 10] = 0
    est = sm.quantiles(bad, GRID, (0.5,))[0]
    assert not est.lo <= ref["median"] <= est.hi


def _write(writer: CubeWriter, key: str, ndvi: np.ndarray, clear: np.ndarray) -> str:
    with writer.transaction(key) as tx:
        tx.write("indices.ndvi", np.arange(T0, T0 + 7), Y0, X0, ndvi)
        tx.write("s2.clear", np.arange(T0, T0 + 7), Y0, X0, clear)
    assert tx.snapshot_id is not None
    return tx.snapshot_id


def _expected(reader: CubeReader, cy: int, cx: int) -> np.ndarray:
    y, x = cy * SIDE, cx * SIDE
    v = np.asarray(reader.array("indices.ndvi")[T0 : T0 + 7, y : y + SIDE, x : x + SIDE])
    f = np.asarray(reader.array("s2.clear")[T0 : T0 + 7, y : y + SIDE, x : x + SIDE])
    return sm.summarise_chunk(v, f, 2, y, GRID, SIDE >> 2)


def test_writer_stores_summaries_of_its_chunks_in_the_same_commit(tmp_path: Path) -> None:
    rng = np.random.default_rng(4)
    writer = CubeWriter(tmp_path)
    ndvi = rng.uniform(-1, 1, (7, 200, 150)).astype(np.float32)  # 2 x 2 blocks, partly
    ndvi[3:] = np.nan
    clear = np.where(rng.random((7, 200, 150)) < 0.7, 2, 1).astype(np.uint8)
    clear[3:] = 0
    first = _write(writer, "w1", ndvi, clear)
    blocks = [(Y0 // SIDE + i, X0 // SIDE + j) for i in (0, 1) for j in (0, 1)]
    keys = [(cy, cx, T0 // 7) for cy, cx in blocks]

    reader = CubeReader(tmp_path, snapshot_id=first)
    got = reader.summary_tiles("indices.ndvi", keys)
    assert got is not None
    for (cy, cx), g in zip(blocks, got, strict=True):
        assert g is not None
        np.testing.assert_allclose(g, _expected(reader, cy, cx), rtol=1e-12, atol=1e-12)
    assert got[0] is not None
    assert got[0][0, 0, 0, sm.N] > 0
    assert not got[0][5, ..., sm.N].any()

    # re-ingest: new values and a flag-only change both rewrite the summaries
    ndvi2 = ndvi + np.float32(0.01)
    second = _write(writer, "w1", ndvi2, clear)
    with writer.transaction("w1-flags") as tx:
        tx.write("s2.clear", np.arange(T0, T0 + 7), Y0, X0, np.where(clear == 2, 1, clear))
    third = tx.snapshot_id
    for sid in (second, third):
        r = CubeReader(tmp_path, snapshot_id=sid)
        g2 = r.summary_tiles("indices.ndvi", keys)
        assert g2 is not None
        for (cy, cx), g in zip(blocks, g2, strict=True):
            assert g is not None
            np.testing.assert_allclose(g, _expected(r, cy, cx), rtol=1e-12, atol=1e-12)
    last = CubeReader(tmp_path, snapshot_id=third).summary_tiles("indices.ndvi", keys)
    assert last is not None
    assert last[0] is not None
    assert not last[0][0, ..., sm.N].any()
    # the first snapshot still reads its own summaries
    again = CubeReader(tmp_path, snapshot_id=first).summary_tiles("indices.ndvi", keys)
    assert again is not None
    assert again[0] is not None
    np.testing.assert_array_equal(again[0], got[0])


def test_non_contiguous_write_keeps_summaries_current(tmp_path: Path) -> None:
    rng = np.random.default_rng(5)
    writer = CubeWriter(tmp_path)
    slots = np.array([T0, T0 + 2, T0 + 5])
    with writer.transaction("nc") as tx:
        tx.write("indices.ndvi", slots, Y0, X0, rng.uniform(-1, 1, (3, 50, 60)).astype(np.float32))
        tx.write("s2.clear", slots, Y0, X0, np.full((3, 50, 60), 2, np.uint8))
    reader = CubeReader(tmp_path, snapshot_id=tx.snapshot_id)
    got = reader.summary_tiles("indices.ndvi", [(Y0 // SIDE, X0 // SIDE, T0 // 7)])
    assert got is not None
    assert got[0] is not None
    np.testing.assert_allclose(got[0], _expected(reader, Y0 // SIDE, X0 // SIDE), rtol=1e-12)
    assert got[0][2, ..., sm.N].sum() == 50 * 60
    assert not got[0][1, ..., sm.N].any()


def test_pairwise_merge_over_slots_equals_merge() -> None:
    rng = np.random.default_rng(6)
    parts = []
    for _ in range(4):
        x, ok, w = _cells(rng, 900)
        parts.append(sm.summarise_cells(x, ok, w, GRID))
    parts.append(sm.empty())
    acc = sm.empty()
    for p in parts:
        acc = sm.merge_pair(acc, p)
    whole = sm.merge(np.stack(parts))
    assert acc[sm.N] == whole[sm.N]
    assert acc[sm.N_FLAG] == whole[sm.N_FLAG]
    np.testing.assert_allclose(acc, whole, rtol=1e-12, atol=1e-12)
    two = sm.merge_pair(np.stack([parts[0], parts[1]]), np.stack([parts[2], sm.empty()]))
    np.testing.assert_allclose(two[1], parts[1], rtol=0, atol=0)


def test_chunk_summaries_equal_each_blocks_cell_summary() -> None:
    rng = np.random.default_rng(7)
    v = np.full((7, SIDE, SIDE), np.nan, np.float32)
    v[2] = rng.normal(0.3, 0.5, (SIDE, SIDE))
    v[3] = rng.random((SIDE, SIDE))
    v[3, :5] = np.nan
    f = np.zeros((7, SIDE, SIDE), np.uint8)
    f[2] = 2
    f[2, :40, :40] = 1
    f[3] = np.where(rng.random((SIDE, SIDE)) < 0.5, 2, 1)
    sub = SIDE >> 2
    got = sm.summarise_chunk(v, f, 2, Y0, GRID, sub)
    assert got.shape == (7, 4, 4, sm.N_FIELDS)
    for d in range(7):
        for i in range(4):
            for j in range(4):
                ys, xs = slice(i * sub, (i + 1) * sub), slice(j * sub, (j + 1) * sub)
                weights = np.repeat(sm.row_weights(Y0 + i * sub, sub), sub)
                want = sm.summarise_cells(
                    v[d, ys, xs].reshape(-1), f[d, ys, xs].reshape(-1) == 2, weights, GRID
                )
                np.testing.assert_allclose(got[d, i, j], want, rtol=1e-12, atol=1e-12)
    assert got[2, 0, 0, sm.N] == 0  # a block all masked on that day
    assert got[2, 0, 0, sm.N_FLAG] == 0
