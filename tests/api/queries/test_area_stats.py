"""area_over_time's statistics kernels: exact against the numpy reference.

The kernels must give the same bits as the numpy expressions they replace
(answers and the fact ids bound to them must not move).
"""

from __future__ import annotations

import numpy as np
import pytest

from api.queries import area_stats as stats_mod
from api.queries._area_kernels import scene_keys, sort_keys
from api.queries.area_geometry import parse_area
from api.queries.area_stats import theil_sen, weighted_stats
from tests.api.queries.area_reference import reference_stats as _reference_stats

SIZES = [1, 2, 3, 7, 8, 9, 15, 16, 17, 127, 128, 129, 255, 256, 257, 1000, 8191, 8193, 12_345]


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


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_keyed_scene_stats_equal_the_reference_with_ties_signed_zeros_and_non_finite(
    dtype: type,
) -> None:
    triangle = {
        "type": "Polygon",
        "coordinates": [[[7.0, 45.0], [7.006, 45.0], [7.0, 45.004], [7.0, 45.0]]],
    }
    area = parse_area("a", triangle, None)  # cells outside carry no weight
    assert not area.mask().all()
    rng = np.random.default_rng(3)
    shape = (7, area.n_cells)
    values = np.round(rng.normal(0.3, 0.2, shape), 1).astype(dtype)  # many ties
    values[0].flat[::2] = -0.0
    values[0].flat[1::2] = 0.0  # quantiles land on signed zeros
    values[1].flat[::7] = np.nan
    values[2].flat[::11] = np.inf
    values[3].flat[::13] = -np.inf
    oks = rng.random(shape) < 0.7
    oks[4] = False  # a scene with nothing clear
    got = stats_mod.scenes_stats(values, oks, area.weights, area.n_cells)
    assert got[4] is None
    for s in range(shape[0]):
        if s == 4:
            continue
        sel = oks[s] & np.isfinite(values[s])
        ref = weighted_stats(values[s][sel], area.weights[sel])
        bits = {k: np.float64(got[s][k]).view(np.int64) for k in ref}
        assert bits == {k: np.float64(v).view(np.int64) for k, v in ref.items()}  # bit for bit
        assert got[s]["n_clear"] == int(sel.sum())


@pytest.mark.parametrize("kind", ["spread", "ties", "one_digit", "two_digits", "signed"])
def test_scene_keys_radix_sort_gives_numpys_order(kind: str) -> None:
    rng = np.random.default_rng(len(kind))
    tmp = np.empty(12_345, np.uint64)
    hist = np.empty((3, 1 << 11), np.int32)
    for m in [0, 1, 2, 3, 255, 256, 257, 2047, 2048, 2049, 4099, 12_345]:
        row: np.ndarray
        if kind == "spread":
            row = rng.standard_normal(m) * 10 ** rng.uniform(-3, 3, m)
        elif kind == "ties":
            row = rng.integers(0, 5, m) / 4
        elif kind == "one_digit":  # every key shares its high digits: passes are skipped
            row = 0.5 + rng.integers(0, 200, m) * 2.0**-23
        elif kind == "two_digits":  # the lowest digit shared, the others not
            row = 0.5 + rng.integers(0, 200, m) * 2.0**-12
        else:
            row = rng.choice([-0.0, 0.0, -1.5, 1.5, np.inf, -np.inf, np.nan], m)
        values = np.asarray(row, np.float32)
        ok = rng.random(m) > 0.2
        keys = np.empty(m, np.uint64)
        n = scene_keys(values.view(np.uint32), ok, keys, hist)
        sel = ok & np.isfinite(values)
        assert n == int(sel.sum())
        want = np.sort(keys[:n])
        assert (keys[:n] & np.uint64(0xFFFFFFFF) == np.flatnonzero(sel)).all()
        got = sort_keys(keys, n, tmp, hist)
        np.testing.assert_array_equal(got[:n], want)


def _pick_even_reference(tslots: list[int], m: int) -> list[int]:
    """pick_even as it was (numpy's argmin over the free slots, per target)."""
    if len(tslots) <= m:
        return list(tslots)
    arr = np.asarray(tslots, dtype=np.float64)
    free = np.ones(arr.size, bool)
    chosen = []
    for t in np.linspace(arr[0], arr[-1], m):
        cand = np.flatnonzero(free)
        j = cand[int(np.argmin(np.abs(arr[cand] - t)))]
        free[j] = False
        chosen.append(int(j))
    return [tslots[j] for j in sorted(chosen)]


@pytest.mark.parametrize("seed", range(6))
def test_pick_even_by_bisection_chooses_as_the_argmin_scan(seed: int) -> None:
    """Sorted slots (bisection), with duplicates and ties, and unsorted ones (the scan)."""
    rng = np.random.default_rng(seed)
    for _ in range(400):
        n = int(rng.integers(2, 80))
        high = int(rng.choice([12, 60, 3000]))  # small ranges: duplicates and equal distances
        slots = sorted(rng.integers(0, high, n).tolist())
        m = int(rng.integers(1, n + 2))
        assert stats_mod.pick_even(slots, m) == _pick_even_reference(slots, m)
        shuffled = rng.permutation(slots).tolist()
        assert stats_mod.pick_even(shuffled, m) == _pick_even_reference(shuffled, m)
