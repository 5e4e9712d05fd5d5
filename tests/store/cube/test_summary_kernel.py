"""The fused summary kernel stores bit for bit what the numpy form stored (the bench caches and
existing stores stay valid)."""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt
import pytest

from store.cube import summaries as sm

GRID = sm.Grid(-1.0, 1.0)


def numpy_summarise_chunk(
    values: npt.NDArray[Any] | None,
    flags: npt.NDArray[Any] | None,
    clear_value: int,
    lat_q0: int,
    grid: sm.Grid,
    sub: int,
) -> npt.NDArray[np.float64]:
    """The numpy form summarise_chunk had before the fused kernel (the reference)."""
    ref = values if values is not None else flags
    if ref is None:
        raise ValueError("summarise_chunk needs the values or the flags")
    t, h, w = ref.shape[:3]
    ny, nx, m = h // sub, w // sub, sub * sub

    def groups(a: npt.NDArray[Any]) -> npt.NDArray[Any]:  # (t, h, w) -> (t * ny * nx, sub * sub)
        return a.reshape(t, ny, sub, nx, sub).transpose(0, 1, 3, 2, 4).reshape(-1, m)

    n_groups = t * ny * nx
    ok = (
        np.zeros((n_groups, m), bool) if flags is None else groups(np.asarray(flags) == clear_value)
    )
    x = (
        np.full((n_groups, m), np.nan)
        if values is None
        else groups(np.asarray(values, dtype=np.float64))
    )
    rw = sm.row_weights(lat_q0, h).reshape(ny, sub)  # weight of each cell: its row's
    wts = np.broadcast_to(rw[None, :, None, :, None], (t, ny, nx, sub, sub)).reshape(-1, m)
    out = np.broadcast_to(sm.empty(), (n_groups, sm.N_FIELDS)).copy()
    out[:, sm.N_FLAG] = ok.sum(axis=1)
    live = np.flatnonzero(out[:, sm.N_FLAG] > 0)  # most days of a week hold no observation
    if live.size:
        ok, x, wts = ok[live], x[live], wts[live]
        sel = ok & np.isfinite(x)
        ws = np.where(sel, wts, 0.0)
        xs = np.where(sel, x, 0.0)
        total = ws.sum(axis=1)
        has = total > 0
        safe = np.where(has, total, 1.0)
        mean = np.where(has, (xs * ws).sum(axis=1) / safe, 0.0)
        part = out[live]
        part[:, sm.N] = sel.sum(axis=1)
        part[:, sm.W], part[:, sm.MEAN] = total, mean
        part[:, sm.M2] = (ws * (xs - mean[:, None]) ** 2).sum(axis=1)
        part[:, sm.MIN] = np.where(has, np.where(sel, x, np.inf).min(axis=1), np.inf)
        part[:, sm.MAX] = np.where(has, np.where(sel, x, -np.inf).max(axis=1), -np.inf)
        nb = sm.HIST_BINS + 2
        idx = (np.arange(live.size)[:, None] * nb + grid.bins(xs))[sel]
        hist = np.bincount(idx, weights=ws[sel], minlength=live.size * nb)
        part[:, sm.HIST :] = hist.reshape(-1, nb)
        out[live] = part
    return out.reshape(t, ny, nx, sm.N_FIELDS)


def _chunk(
    rng: np.random.Generator, side: int, nan_frac: float, clear_frac: float
) -> tuple[npt.NDArray[np.float32], npt.NDArray[np.uint8]]:
    v = rng.uniform(-1.3, 1.3, (7, side, side)).astype(np.float32)
    v[rng.random(v.shape) < nan_frac] = np.nan
    v[rng.random(v.shape) < 0.01] = np.inf
    v[:, :3, :5] = -1.0  # exactly the grid's lower edge
    v[:, 3:5, :5] = 1.0  # exactly its upper edge
    f = np.where(rng.random(v.shape) < clear_frac, 2, 1).astype(np.uint8)
    f[2] = 0  # a day without an observation
    f[4, : side // 2] = 0  # half a day
    return v, f


@pytest.mark.parametrize("sub", [2, 4, 8, 16, 32])
@pytest.mark.parametrize(("nan_frac", "clear_frac"), [(0.0, 1.0), (0.3, 0.7), (0.95, 0.5)])
def test_fused_summaries_equal_the_numpy_form_bit_for_bit(
    sub: int, nan_frac: float, clear_frac: float
) -> None:
    rng = np.random.default_rng(sub * 100 + int(nan_frac * 10))
    v, f = _chunk(rng, 64, nan_frac, clear_frac)
    for values, flags in ((v, f), (None, f), (v, None)):
        got = sm.summarise_chunk(values, flags, 2, 1_000_003, GRID, sub)
        want = numpy_summarise_chunk(values, flags, 2, 1_000_003, GRID, sub)
        assert got.shape == want.shape
        assert got.tobytes() == want.tobytes()


def test_fused_summaries_take_float64_values() -> None:
    rng = np.random.default_rng(7)
    v, f = _chunk(rng, 32, 0.2, 0.8)
    v64: Any = v.astype(np.float64) * 1.0000001
    got = sm.summarise_chunk(v64, f, 2, 5, GRID, 8)
    assert got.tobytes() == numpy_summarise_chunk(v64, f, 2, 5, GRID, 8).tobytes()


@pytest.mark.parametrize("order", ["neg_first", "pos_first", "only_zeros"])
def test_fused_summaries_of_signed_zeros_equal_the_numpy_forms(order: str) -> None:
    """A block holding both -0.0 and +0.0: every field equal to the numpy form's (the one
    documented difference is which zero MIN/MAX keeps), and every field but those bit for bit."""
    v = np.full((1, 8, 8), 0.5, np.float32)
    if order == "only_zeros":
        v[:] = 0.0
        v[0, ::2] = -0.0
    else:
        first, second = (-0.0, 0.0) if order == "neg_first" else (0.0, -0.0)
        v[0, 0, 0], v[0, 0, 1] = first, second
        v[0, 1, :] = 0.75
    f = np.full(v.shape, 2, np.uint8)
    got = sm.summarise_chunk(v, f, 2, 5, GRID, 8)
    want = numpy_summarise_chunk(v, f, 2, 5, GRID, 8)
    np.testing.assert_array_equal(got, want)  # -0.0 == 0.0
    rest = [i for i in range(sm.N_FIELDS) if i not in (sm.MIN, sm.MAX)]
    assert got[..., rest].tobytes() == want[..., rest].tobytes()
