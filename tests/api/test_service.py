"""The service layer on the tiny sample: planted events found, receipts verify (bad input: test_service_bad_input.py)."""

from __future__ import annotations

import base64
import copy
import datetime as dt
import json
from typing import Any

import numpy as np
import pytest

from api.context import ServiceContext
from api.dispatch import PRIMITIVES, run
from api.errors import ApiError
from api.receipts import Signer, verify_answer
from store import address


def _slot(day: str) -> int:
    return (dt.date.fromisoformat(day) - dt.date(1970, 1, 1)).days


@pytest.fixture(scope="module")
def forest_cells(tiny_store: Any) -> list[str]:
    """Cells deep inside the 2023 landcover forest (3x3 of forest pixels), outside the clearing."""
    import rasterio
    from pyproj import Transformer
    from shapely.geometry import Point, shape

    clearing = shape(tiny_store.event("forest_clearing")["geometry"]).buffer(0.0002)
    with rasterio.open(tiny_store.sample / "landcover.tif") as src:
        lc = src.read(1)
        tf, crs = src.transform, src.crs
    to_ll = Transformer.from_crs(crs, "EPSG:4326", always_xy=True)
    out = []
    for r in range(1, lc.shape[0] - 1):
        for c in range(1, lc.shape[1] - 1):
            if (lc[r - 1 : r + 2, c - 1 : c + 2] == 2).all():
                x, y = tf.c + (c + 0.5) * tf.a, tf.f + (r + 0.5) * tf.e
                lng, lat = to_ll.transform(x, y)
                if not clearing.contains(Point(lng, lat)):
                    out.append(address.encode(lat, lng))
    assert len(out) >= 5
    return out


def _landcover_of(tiny_store: Any, cells: list[str]) -> list[int]:
    import rasterio
    from pyproj import Transformer

    with rasterio.open(tiny_store.sample / "landcover.tif") as src:
        lc = src.read(1)
        tf = src.transform
        to_xy = Transformer.from_crs("EPSG:4326", src.crs, always_xy=True)
    codes = []
    for cell in cells:
        g = address.decode(cell)
        x, y = to_xy.transform(g.lng, g.lat)
        col, row = (x - tf.c) / tf.a, (y - tf.f) / tf.e
        r, c = int(row), int(col)
        codes.append(int(lc[r, c]) if 0 <= r < lc.shape[0] and 0 <= c < lc.shape[1] else 0)
    return codes


def _roundtrip(model: Any) -> dict[str, Any]:
    return json.loads(json.dumps(model.model_dump(mode="json")))


# --------------------------------------------------------------------------- registry


def test_registry_names() -> None:
    assert {
        "did_change",
        "trajectory",
        "area_over_time",
        "find_similar",
        "is_like",
        "confirm",
    } <= set(PRIMITIVES)
    for p in PRIMITIVES.values():
        assert "receipt" in p.output_model.model_fields
        assert p.summary


# --------------------------------------------------------------------------- did_change / trajectory


def test_forest_clearing_is_a_significant_ndvi_drop(
    ctx: ServiceContext, tiny_store: Any, clearing_cell: str
) -> None:
    tr = run(ctx, "trajectory", {"cell": clearing_cell, "band": "indices.ndvi"})
    start = _slot(tiny_store.event("forest_clearing")["start"])
    before = [p.tslot for p in tr.points if p.clear and p.tslot < start]
    after = [p.tslot for p in tr.points if p.clear and p.tslot > start]
    assert before
    assert after
    ans = run(
        ctx,
        "did_change",
        {"cell": clearing_cell, "band": "indices.ndvi", "window": [before[-1], after[0]]},
    )
    assert ans.delta < -0.3
    assert ans.start.clear
    assert ans.end.clear
    assert ans.significant
    assert ans.significance.z < -3
    assert ans.significance.neighbour_count > 0
    assert ans.significance.neighbour_delta_median < -0.3
    assert "significant when" in ans.significance.rule
    assert len(ans.facts) == 4
    assert all(f.sources for f in ans.facts)
    doc = _roundtrip(ans)
    assert verify_answer(doc).ok
    assert doc == ans.model_dump(mode="json")


def test_stable_forest_is_not_significant(
    ctx: ServiceContext, tiny_store: Any, clearing_cell: str
) -> None:
    tr = run(ctx, "trajectory", {"cell": clearing_cell, "band": "ndvi"})
    start = _slot(tiny_store.event("forest_clearing")["start"])
    before = [p for p in tr.points if p.clear and p.tslot < start]
    # two pre-clearing dates in the same season of two years (Sep 2023 vs Feb 2024: both leafy)
    a, b = before[2], before[-1]
    ans = run(
        ctx, "did_change", {"cell": clearing_cell, "band": "ndvi", "window": [a.tslot, b.tslot]}
    )
    assert abs(ans.delta) < 0.1
    assert not ans.significant


def test_trajectory_lists_masked_observations(ctx: ServiceContext, clearing_cell: str) -> None:
    tr = run(ctx, "trajectory", {"cell": clearing_cell, "band": "ndvi"})
    masked = [p for p in tr.points if p.value is None]
    assert masked
    assert all(not p.clear for p in masked)
    assert tr.valid_tslots == [p.tslot for p in tr.points if p.value is not None]
    assert len(tr.facts) == tr.n_clear
    windowed = run(
        ctx,
        "trajectory",
        {"cell": clearing_cell, "band": "ndvi", "window": [tr.points[1].tslot, tr.points[3].tslot]},
    )
    assert [p.tslot for p in windowed.points] == [p.tslot for p in tr.points[1:4]]
    assert verify_answer(_roundtrip(windowed)).ok


def test_no_observation_names_nearest_tslots(ctx: ServiceContext, clearing_cell: str) -> None:
    tr = run(ctx, "trajectory", {"cell": clearing_cell, "band": "ndvi"})
    v = tr.valid_tslots
    with pytest.raises(ApiError) as info:
        run(ctx, "did_change", {"cell": clearing_cell, "band": "ndvi", "window": [v[0] + 1, v[-1]]})
    err = info.value
    assert err.code == "no_observation"
    assert err.status == 404
    assert err.details["nearest_before"] == v[0]
    assert err.details["nearest_after"] == v[1]
    masked = next(p.tslot for p in tr.points if p.value is None)
    with pytest.raises(ApiError) as info:
        run(ctx, "did_change", {"cell": clearing_cell, "band": "ndvi", "window": [v[0], masked]})
    assert info.value.code == "no_observation"
    assert "masked" in info.value.details["reason"]


# --------------------------------------------------------------------------- confirm


def test_confirm_verdicts(ctx: ServiceContext, tiny_store: Any, clearing_cell: str) -> None:
    tr = run(ctx, "trajectory", {"cell": clearing_cell, "band": "ndvi"})
    start = _slot(tiny_store.event("forest_clearing")["start"])
    pre = [t for t in tr.valid_tslots if t < start]
    claim = {"band": "ndvi", "op": "gt", "value": 0.6, "window": [pre[0], pre[-1]], "agg": "all"}
    yes = run(ctx, "confirm", {"cell": clearing_cell, "claim": claim})
    assert yes.verdict == "true"
    assert len(yes.facts) == len(pre)
    latest = run(
        ctx,
        "confirm",
        {"cell": clearing_cell, "claim": {"band": "indices.ndvi", "op": "gt", "value": 0.6}},
    )
    assert latest.verdict == "false"
    assert len(latest.facts) == 1
    assert latest.facts[0].tslot == tr.valid_tslots[-1]
    mean = run(
        ctx,
        "confirm",
        {"cell": clearing_cell, "claim": {**claim, "agg": "mean", "op": "ge", "value": 0.7}},
    )
    assert mean.verdict == "true"
    assert 0.7 <= mean.aggregate <= 0.85
    masked = next(p.tslot for p in tr.points if p.value is None)
    unknown = run(
        ctx,
        "confirm",
        {"cell": clearing_cell, "claim": {"band": "ndvi", "op": "gt", "value": 0, "tslot": masked}},
    )
    assert unknown.verdict == "unknown"
    assert unknown.facts == []
    absent = run(
        ctx,
        "confirm",
        {"cell": clearing_cell, "claim": {"band": "ndvi", "op": "absent", "tslot": masked}},
    )
    assert absent.verdict == "true"
    inside = run(
        ctx,
        "confirm",
        {
            "cell": clearing_cell,
            "claim": {"band": "s2.clear", "op": "in", "value": [1], "tslot": masked},
        },
    )
    assert inside.verdict == "true"
    assert verify_answer(_roundtrip(yes)).ok


# --------------------------------------------------------------------------- area_over_time


def test_flood_raises_ndwi_with_anomaly(ctx: ServiceContext, tiny_store: Any) -> None:
    flood = tiny_store.event("flood")
    ans = run(
        ctx,
        "area_over_time",
        {
            "geometry": flood["geometry"],
            "start_date": "2024-07-01",
            "end_date": flood["end"],
            "index": "ndwi",
        },
    )
    area = ans.areas[0]
    assert area.n_cells > 50
    assert 0 < area.area_km2 < 1
    t0, t1 = _slot(flood["start"]), _slot(flood["end"])
    inside = [s for s in area.scenes if t0 <= s.tslot <= t1]
    outside = [s for s in area.scenes if not t0 <= s.tslot <= t1]
    assert inside
    assert outside
    assert all(s.median > 0.2 for s in inside)
    assert all(s.median < 0 for s in outside)
    for s in area.scenes:
        assert s.p10 <= s.p25 <= s.median <= s.p75 <= s.p90
        assert s.n_clear <= s.n_total == area.n_cells
    an = area.anomaly
    assert an.latest_tslot == inside[-1].tslot
    if an.baseline_tslots:  # the tiny sample has Sep 2023 within +-30 days of 19 Aug
        assert an.difference > 0.3
        assert an.z is not None
        assert an.z > 2
        # z is bounded by the baseline's within-area spread, not by a near-zero
        # std of one or two baseline medians
        assert an.z < 1000
        assert an.z_basis
    else:
        assert an.reason
    assert area.trend.slope_per_year is None
    assert area.trend.reason
    png = base64.b64decode(ans.chart_png_base64)
    assert png.startswith(b"\x89PNG")
    assert ctx.charts.get(ans.chart_id) == png
    assert verify_answer(_roundtrip(ans)).ok


def test_area_over_time_areas_thinning_exclusion_and_trend(
    ctx: ServiceContext, tiny_store: Any
) -> None:
    flood = tiny_store.event("flood")
    b = tiny_store.manifest["bbox"]  # [min_lng, min_lat, max_lng, max_lat]
    bbox = {"min_lat": b[1], "min_lng": b[0], "max_lat": b[3], "max_lng": b[2]}
    ans = run(
        ctx,
        "area_over_time",
        {
            "areas": [{"id": "flood", "geometry": flood["geometry"]}, {"id": "all", "bbox": bbox}],
            "start_date": "2023-01-01",
            "end_date": "2024-12-31",
            "index": "ndvi",
            "max_scenes": 8,
            "chart": False,
        },
    )
    assert [a.id for a in ans.areas] == ["flood", "all"]
    assert ans.chart_id is None
    assert ans.chart_png_base64 is None
    for area in ans.areas:
        assert len(area.scenes) == 8
        assert any(
            e.tslot == _slot("2023-07-21") and "below the threshold" in e.reason
            for e in area.excluded
        )
        kept_and_thinned = sorted([s.tslot for s in area.scenes] + area.thinned)
        assert area.scenes[0].tslot == kept_and_thinned[0]
        assert area.scenes[-1].tslot == kept_and_thinned[-1]
        assert area.trend.slope_per_year is not None
        assert 0 <= area.trend.mann_kendall_p <= 1
    assert ans.areas[1].n_cells > ans.areas[0].n_cells
    assert verify_answer(_roundtrip(ans)).ok


# --------------------------------------------------------------------------- find_similar / is_like


def test_find_like_forest_key_returns_forest(
    ctx: ServiceContext, tiny_store: Any, forest_cells: list[str]
) -> None:
    key = forest_cells[len(forest_cells) // 2]
    # the landcover map is of 2023: bound the vintage to 2023 (year slot 53)
    ans = run(ctx, "find_like", {"key": key, "k": 10, "as_of_tslot": 53})
    assert ans.vintage == 2023
    assert ans.returned_k == 10
    assert ans.requested_k == 10
    assert key not in [n.cell64 for n in ans.neighbours]
    scores = [n.score for n in ans.neighbours]
    assert scores == sorted(scores, reverse=True)
    codes = _landcover_of(tiny_store, [n.cell64 for n in ans.neighbours])
    assert sum(c == 2 for c in codes) >= 8, codes
    assert ans.cells_scanned > 1000
    assert verify_answer(_roundtrip(ans)).ok


def _recall(ctx: ServiceContext, table: Any, n_keys: int, lists: bool = False) -> float:
    rows = np.random.default_rng(0).choice(table.n, n_keys, replace=False)
    hits = 0
    for r in rows.tolist():
        key = address.format_cell(int(table.cells[r]))
        exact = run(ctx, "find_similar", {"key": key, "k": 10, "mode": "cosine"})
        fast = run(ctx, "find_similar", {"key": key, "k": 10, "mode": "hamming_then_rerank"})
        assert fast.rerank_multiple
        assert fast.reranked > 10
        if lists:  # the triage read the lists nearest the key, and the answer says so
            assert 0 < fast.cells_scanned < table.n
            assert any("k-means lists nearest the query" in x for x in fast.assumptions)
        else:
            assert fast.cells_scanned == table.n
        hits += len({n.cell64 for n in exact.neighbours} & {n.cell64 for n in fast.neighbours})
    return hits / (10 * n_keys)


def test_rerank_recall_at_10_tiny(ctx: ServiceContext) -> None:
    """Tiny 2024 table (1.7k rows): the candidate floor covers the table, so the rerank is exact."""
    assert _recall(ctx, ctx.table("geotessera/2024"), 20) >= 0.95


def _synthetic(tmp_path: Any, **write: Any) -> tuple[ServiceContext, Any]:
    """A service over one 2024 table of 50k clustered Tessera-like rows (bench.data)."""
    from bench.data import tessera_like
    from store.knn import write_table

    cells, vectors, scales = tessera_like(50_000, seed=3)
    meta = {"band": "geotessera", "tslot": 54, "vintage": 2024}
    write_table(tmp_path / "knn" / "geotessera" / "2024", cells, vectors, scales, meta, **write)
    return ServiceContext(tmp_path, signer=Signer.generate()), cells


def test_rerank_recall_at_10_synthetic(tmp_path: Any) -> None:
    """50k clustered Tessera-like rows, where the candidates are ~8% of the table."""
    synthetic, cells = _synthetic(tmp_path)
    recall = _recall(synthetic, synthetic.table("geotessera/2024"), 40)
    assert recall >= 0.95, recall
    ans = run(synthetic, "find_similar", {"key": address.format_cell(int(cells[7])), "k": 3})
    assert ans.snapshot_id.startswith("knn:")
    assert verify_answer(_roundtrip(ans)).ok


def test_rerank_recall_at_10_inverted_lists(tmp_path: Any) -> None:
    """A table written with inverted lists (store.knn.ivf): find_similar triages the lists
    nearest the key (at least RERANK_MIN_CANDIDATES rows), keeps recall@10 >= 0.95 and says
    which rows it looked at; cosine and hamming still read every row."""
    synthetic, cells = _synthetic(tmp_path, ivf=True)
    table = synthetic.table("geotessera/2024")
    assert table.ivf is not None
    recall = _recall(synthetic, table, 40, lists=True)
    assert recall >= 0.95, recall
    key = address.format_cell(int(cells[7]))
    ham = run(synthetic, "find_similar", {"key": key, "k": 3, "mode": "hamming"})
    assert ham.cells_scanned == table.n
    assert not any("k-means" in x for x in ham.assumptions)
    assert verify_answer(_roundtrip(ham)).ok


def test_find_similar_modes_inline_filter_and_empty(
    ctx: ServiceContext, clearing_cell: str, forest_cells: list[str]
) -> None:
    key = forest_cells[0]
    ham = run(ctx, "find_similar", {"cell64": key, "mode": "hamming", "k": 5})
    assert ham.mode == "hamming"
    assert all(-1 <= n.score <= 1 for n in ham.neighbours)
    binary = run(ctx, "find_similar", {"cell": key, "band": "geotessera.bin128", "k": 5})
    assert binary.mode == "hamming"
    table = ctx.table("geotessera/2024")
    row = table.row_of(address.parse_cell(key))
    vec = table.dequantised(row).tolist()
    inline = run(ctx, "find_similar", {"key": "inline:" + json.dumps(vec), "k": 5})
    by_cell = run(ctx, "find_similar", {"key": key, "k": 6})
    assert inline.key == "inline"
    assert [n.cell64 for n in inline.neighbours][1:] == [n.cell64 for n in by_cell.neighbours][:4]
    # filter: NDVI > 0.5 on the cells' latest clear observation
    filt = run(
        ctx,
        "find_similar",
        {"key": clearing_cell, "k": 10, "filter": {"band": "ndvi", "op": "gt", "value": 0.5}},
    )
    assert filt.filter.eligible + filt.filter.dropped_false + filt.filter.dropped_no_fact == table.n
    for n in filt.neighbours:
        assert (
            run(
                ctx,
                "confirm",
                {"cell": n.cell64, "claim": {"band": "ndvi", "op": "gt", "value": 0.5}},
            ).verdict
            == "true"
        )
    scoped = run(
        ctx,
        "find_similar",
        {"key": key, "k": 3, "scope": {"user_id": "u1"}, "as_of_signed_at": "2999-01-01T00:00:00Z"},
    )
    assert scoped.scope == {"user_id": "u1"}
    assert any("single-tenant" in a for a in scoped.assumptions)
    assert any("as_of_signed_at" in a for a in scoped.assumptions)
    multi = run(ctx, "find_similar", {"key": key, "band": "geotessera.multi_year"})
    assert ctx.table("geotessera.multi_year").n > 0
    assert multi.returned_k == 10
    assert multi.neighbours[0].band == "geotessera.multi_year"
    assert verify_answer(_roundtrip(filt)).ok


def test_is_like(ctx: ServiceContext, clearing_cell: str, forest_cells: list[str]) -> None:
    same = run(ctx, "is_like", {"a": forest_cells[0], "b": forest_cells[0]})
    assert same.cosine == pytest.approx(1.0, abs=1e-6)
    ans = run(ctx, "is_like", {"a": clearing_cell, "b": forest_cells[0]})
    per = {v.vintage: v for v in ans.per_vintage}
    assert per[2023].cosine > 0.5 > per[2024].cosine  # forest both in 2023; cleared in 2024
    assert ans.vintages_compared == [2023, 2024]
    assert set(per) == {2023, 2024}  # only vintages the catalog has
    assert ans.cosine == pytest.approx((per[2023].cosine + per[2024].cosine) / 2)
    assert verify_answer(_roundtrip(ans)).ok


# --------------------------------------------------------------------------- receipts


def test_tampering_fails(ctx: ServiceContext, clearing_cell: str) -> None:
    tr = run(ctx, "trajectory", {"cell": clearing_cell, "band": "ndvi"})
    doc = _roundtrip(tr)
    assert verify_answer(doc).ok
    for mutate in (
        lambda d: d["points"][0].__setitem__("value", d["points"][0]["value"] + 1e-6),
        lambda d: d.__setitem__(
            "snapshot_id", ("Y" if d["snapshot_id"][0] == "X" else "X") + d["snapshot_id"][1:]
        ),
        lambda d: d["receipt"]["query"].__setitem__("band", "indices.ndwi"),
        lambda d: d["receipt"]["cells"].append("zzz"),
    ):
        bad = copy.deepcopy(doc)
        mutate(bad)
        assert not verify_answer(bad).ok


# --------------------------------------------------------------------------- context caches


def test_column_cache_is_bounded(tiny_store: Any, clearing_cell: str) -> None:
    small = ServiceContext(tiny_store.data, signer=Signer.generate(), cache_bytes=1)
    run(small, "trajectory", {"cell": clearing_cell, "band": "ndvi"})
    info = small.cache_info()
    assert info["columns"] == 1
    assert info["limit"] == 1


def test_new_snapshot_is_picked_up(tiny_store: Any, tmp_path: Any, clearing_cell: str) -> None:
    import shutil

    from store.cube import CubeWriter

    data = tmp_path / "data"
    shutil.copytree(tiny_store.data, data, symlinks=True)
    live = ServiceContext(data, signer=Signer.generate(), tip_check_seconds=0.0)
    before = run(live, "trajectory", {"cell": clearing_cell, "band": "ndvi"})
    g = address.decode(clearing_cell)
    t = before.valid_tslots[0]
    CubeWriter(data).write_region(
        "indices.ndvi",
        [t],
        g.lat_q,
        g.lng_q,
        np.full((1, 1, 1), 0.123, np.float32),
        partition_key="test",
    )
    after = run(live, "trajectory", {"cell": clearing_cell, "band": "ndvi"})
    assert after.snapshot_id != before.snapshot_id
    assert after.points[0].value == pytest.approx(0.123)
    # as_of_signed_at still reads the old snapshot
    old = live.reader(as_of_signed_at=live.snapshot_time(before.snapshot_id).isoformat())
    assert old.snapshot_id == before.snapshot_id
