"""The cell path's bookkeeping: slots grouped by time chunk as the numpy version grouped them."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from api.queries.area_cells import _by_chunk


def _by_chunk_reference(slots: list[int], step: int) -> dict[int, tuple[Any, Any, int]]:
    """The numpy grouping _by_chunk replaced (stable argsort and split)."""
    s = np.asarray(slots, np.int64)
    tc = s // step
    order = np.argsort(tc, kind="stable")
    cuts = np.flatnonzero(np.diff(tc[order])) + 1
    out = {}
    for part in np.split(order, cuts):
        if part.size:
            days = (s[part] % step).astype(np.intp)
            if days.size == 1:
                idx: Any = slice(int(days[0]), int(days[0]) + 1)
            else:
                d = np.diff(days)
                if d[0] > 0 and (d == d[0]).all():
                    idx = slice(int(days[0]), int(days[-1]) + 1, int(d[0]))
                else:
                    idx = days
            out[int(tc[part[0]])] = (part.astype(np.intp), idx, int(part.size))
    return out


@pytest.mark.parametrize("seed", range(5))
def test_by_chunk_groups_as_the_numpy_reference(seed: int) -> None:
    rng = np.random.default_rng(seed)
    for _ in range(300):
        n = int(rng.integers(1, 120))
        slots = rng.integers(19_000, 19_000 + int(rng.choice([10, 60, 800])), n)
        if rng.random() < 0.5:
            slots.sort()
        for given in (slots.tolist(), slots):
            got, want = _by_chunk(given, 7), _by_chunk_reference(slots.tolist(), 7)
            assert list(got) == list(want)  # chunks ascending
            for tc in want:
                (gp, gd, gn), (wp, wd, wn) = got[tc], want[tc]
                assert gp.dtype == np.intp
                assert np.array_equal(gp, wp)
                assert gn == wn
                assert type(gd) is type(wd)
                if isinstance(wd, slice):
                    assert gd == wd
                else:
                    assert gd.dtype == np.intp
                    assert np.array_equal(gd, wd)


def test_count_equal_counts_as_numpy() -> None:
    """The compiled flag count equals numpy's compare + count_nonzero, on strided views too."""
    from api.queries._area_kernels import count_equal

    rng = np.random.default_rng(3)
    flags = rng.integers(0, 4, (9, 40, 37)).astype(np.uint8)
    views = [flags, flags[:, 3:31, 5:36], flags[::2, ::3], flags[[4, 1, 1]], flags[:0]]
    for planes in views:
        for value in (0, 2, 3, 7):
            got = np.full(planes.shape[0], -1, np.int64)
            count_equal(planes, np.uint8(value), got)
            assert np.array_equal(got, np.count_nonzero(planes == value, axis=(1, 2)))


@pytest.mark.parametrize("box", [(5, 6, 7, 8), (1000, 1130, 2000, 2300), (0, 300, 0, 129)])
def test_a_bbox_area_holds_its_whole_box_row_major(box: tuple[int, int, int, int]) -> None:
    """A bbox's cells are every cell of its box, row-major (as the tile walk listed them)."""
    from shapely.geometry import box as rect

    from api.queries.area_geometry import _cells_inside

    y0, y1, x0, x1 = box
    ys, xs = _cells_inside(rect(0, 0, 1, 1), box, whole=True)
    want_y, want_x = np.nonzero(np.ones((y1 - y0, x1 - x0), bool))
    assert ys.dtype == np.int64
    assert xs.dtype == np.int64
    assert np.array_equal(ys, want_y + y0)
    assert np.array_equal(xs, want_x + x0)
