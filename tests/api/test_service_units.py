"""Pure parts of the service layer: claims, statistics, charts, the column cache bound."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from api.charts import ChartSeries, ChartStore, render_area_chart
from api.errors import from_store_error
from api.queries.area_stats import mann_kendall, pick_even, weighted_stats
from store.claims import evaluate, parse_claim
from store.errors import InvalidCell, InvalidClaim, InvalidWindow, SnapshotNotFound, StorageTimeout


def _claim(**kw: Any):
    return parse_claim(kw, "indices.ndvi")


def test_claims_vectorised() -> None:
    t = np.array([10, 20, 30])
    v = np.array([[0.1, np.nan, 0.9], [0.5, np.nan, np.nan], [0.7, np.nan, 0.2]])  # (t, n=3)
    latest = evaluate(_claim(op="gt", value=0.4), t, v)
    assert latest.verdict.tolist() == [1, -1, 0]  # 0.7 > .4; no fact; latest 0.2
    assert latest.used[:, 0].tolist() == [False, False, True]
    any_ = evaluate(_claim(op="lt", value=0.3, window=[10, 30], agg="any"), t, v)
    assert any_.verdict.tolist() == [1, -1, 1]
    all_ = evaluate(_claim(op="lt", value=0.3, window=[10, 30], agg="all"), t, v)
    assert all_.verdict.tolist() == [0, -1, 0]
    mean = evaluate(_claim(op="ge", value=0.4, window=[10, 30], agg="mean"), t, v)
    assert mean.verdict.tolist() == [1, -1, 1]
    assert mean.aggregate[0] == pytest.approx(1.3 / 3)
    at = evaluate(_claim(op="eq", value=0.5, tslot=20), t, v)
    assert at.verdict.tolist() == [1, -1, -1]
    inn = evaluate(_claim(op="in", value=[0.9, 0.2], agg="all", window=[10, 30]), t, v)
    assert inn.verdict.tolist() == [0, -1, 1]
    ex = evaluate(_claim(op="exists", tslot=20), t, v)
    ab = evaluate(_claim(op="absent", tslot=20), t, v)
    assert ex.verdict.tolist() == [1, 0, 0]
    assert ab.verdict.tolist() == [0, 1, 1]


@pytest.mark.parametrize(
    "raw",
    [
        {"op": "like", "value": 1},
        {"op": "gt"},
        {"op": "gt", "value": True},
        {"op": "in", "value": []},
        {"op": "gt", "value": 1, "tslot": 3, "window": [1, 4]},
        {"op": "gt", "value": 1, "window": [4, 1]},
        {"op": "gt", "value": float("nan")},
    ],
)
def test_claims_reject(raw: dict[str, Any]) -> None:
    # the claim algebra is the store's: its typed errors (the API maps them to 422, same codes)
    with pytest.raises((InvalidClaim, InvalidWindow)):
        parse_claim(raw, "indices.ndvi")


def test_weighted_stats_equal_weights_match_numpy() -> None:
    x = np.random.default_rng(1).normal(size=1001)
    s = weighted_stats(x, np.ones_like(x))
    assert s["mean"] == pytest.approx(x.mean())
    assert s["std"] == pytest.approx(x.std())
    assert s["median"] == pytest.approx(np.median(x))
    assert s["p10"] == pytest.approx(np.percentile(x, 10), abs=0.01)
    w = np.r_[np.ones(500), np.full(501, 1e-9)]  # second half weightless
    assert weighted_stats(np.arange(1001.0), w)["median"] == pytest.approx(249.5, abs=1)


def test_mann_kendall() -> None:
    s, p = mann_kendall(np.arange(10.0))
    assert s == 45
    assert p < 0.001
    s, p = mann_kendall([1.0, 1.0, 1.0, 1.0, 1.0, 1.0])
    assert s == 0
    assert p == 1.0
    s, p = mann_kendall([3.0, 1.0, 4.0, 1.0, 5.0, 9.0, 2.0, 6.0])
    assert -28 <= s <= 28
    assert 0 < p <= 1


def test_pick_even_keeps_ends() -> None:
    t = list(range(0, 100, 3))
    out = pick_even(t, 5)
    assert len(out) == 5
    assert out[0] == 0
    assert out[-1] == 99
    assert out == sorted(set(out))
    assert pick_even([1, 2], 5) == [1, 2]


def test_chart_store_bounded() -> None:
    png = render_area_chart(
        [ChartSeries("a", ["2024-01-01", "2024-02-01"], [0.1, 0.2], [0.0, 0.1], [0.2, 0.3])],
        title="t",
        ylabel="ndvi",
    )
    assert png.startswith(b"\x89PNG")
    store = ChartStore(max_count=2)
    ids = [store.put(png + bytes([i])) for i in range(3)]
    assert store.get(ids[0]) is None
    assert store.get(ids[2]) is not None
    assert len(store) == 2


def test_store_errors_map_to_api_codes() -> None:
    e = from_store_error(InvalidCell("bad"))
    assert e.code == "invalid_cell"
    assert e.status == 422
    e = from_store_error(SnapshotNotFound("gone"))
    assert e.code == "snapshot_not_found"
    assert e.status == 404
    e = from_store_error(StorageTimeout("no answer"))  # the store, not the caller: retry later
    assert (e.code, e.status) == ("storage_timeout", 503)
