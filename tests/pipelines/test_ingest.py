"""The tiny sample ingested through Dagster: planted events visible in the cube, checks, idempotence."""

from __future__ import annotations

import dataclasses
import shutil
from datetime import date

import numpy as np
from dagster import materialize

from pipelines.lattice import LatticeWindow
from pipelines.partitions import register_area_blocks, scene_key, week_key_of, week_t0
from pipelines.run import resources_for
from pipelines.sentinel1.assets import s1_backscatter, s1_items
from pipelines.sentinel2.assets import s2_indices, s2_items
from pipelines.sentinel2.checks import evaluate_checks
from pipelines.sentinel2.ingest import stack_week
from pipelines.sources import SourceConfig, open_source
from store import address
from store.cube import CubeReader
from store.tslot import day_slot
from tests.dagster_instance import ephemeral as ephemeral_instance


def _series(data, band, lat, lng):
    lat_q, lng_q = address.encode_q(lat, lng)
    return CubeReader(data).cell_series(band, lat_q, lng_q)


def test_ingest_ran_without_failures(tiny_store) -> None:
    r = tiny_store.report
    assert r.failed == []
    assert r.partitions > 0
    assert 2023 in r.years
    assert 2024 in r.years
    assert not [c for c in r.failed_checks if "reflectance_sanity" in c or "index_range" in c]
    inv = CubeReader(tiny_store.data).inventory.table().to_pylist()
    assert {row["band"] for row in inv} >= {"s2", "s1", "geotessera"}


def test_cleared_forest_patch_ndvi_drops_after_its_date(tiny_store) -> None:
    ev = tiny_store.event("forest_clearing")
    t, v = _series(tiny_store.data, "indices.ndvi", ev["centre"]["lat"], ev["centre"]["lng"])
    cut = day_slot(ev["end"])
    before, after = v[t < cut], v[t >= cut]
    assert before.size >= 2
    assert after.size >= 2
    assert np.median(before) - np.median(after) > 0.3


def test_flood_raises_ndwi_and_lowers_vv_in_its_window(tiny_store) -> None:
    ev = tiny_store.event("flood")
    lat, lng = ev["centre"]["lat"], ev["centre"]["lng"]
    t0, t1 = day_slot(ev["start"]), day_slot(ev["end"])
    t, ndwi = _series(tiny_store.data, "indices.ndwi", lat, lng)
    inside = (t >= t0) & (t <= t1)
    assert inside.any()
    assert (~inside).any()
    assert np.median(ndwi[inside]) - np.median(ndwi[~inside]) > 0.3
    t, vv = _series(tiny_store.data, "s1.vv", lat, lng)
    inside = (t >= t0) & (t <= t1)
    assert inside.any()
    assert np.median(vv[inside]) < 0.5 * np.median(vv[~inside])


def test_tessera_vintages_and_knn_tables(tiny_store) -> None:
    ev = tiny_store.event("forest_clearing")
    lat_q, lng_q = address.encode_q(ev["centre"]["lat"], ev["centre"]["lng"])
    r = CubeReader(tiny_store.data)
    v23, s23 = r.cell_vector(lat_q, lng_q, 2023)
    v24, s24 = r.cell_vector(lat_q, lng_q, 2024)
    cos = float(v23.astype(np.float64) @ v24 / (np.linalg.norm(v23) * np.linalg.norm(v24)))
    assert cos < 0.6
    assert s23 > 0
    assert s24 > 0
    assert (tiny_store.data / "knn" / "geotessera" / "2024").exists()
    assert (tiny_store.data / "knn" / "geotessera.multi_year").exists()


def test_rematerialising_a_partition_is_idempotent(tiny_store, tmp_path) -> None:
    data = tmp_path / "data"  # a copy: the session's shared store stays as ingested
    shutil.copytree(tiny_store.data, data, symlinks=True)
    rows = [r for r in CubeReader(data).inventory.table().to_pylist() if r["band"] == "s2"]
    week = week_key_of(rows[len(rows) // 2]["date"])  # a week that has Sentinel-2 scenes
    res = resources_for(data, tiny_store.catalog, tiny_store.sample / "manifest.json")
    area = res["area"]
    win = area.window()
    t0 = week_t0(week)
    before_reader = CubeReader(data)
    ys, xs = slice(win.lat_q0, win.lat_q1), slice(win.lng_q0, win.lng_q1)
    before = np.asarray(before_reader.array("indices.ndvi")[t0 : t0 + 7, ys, xs])
    with ephemeral_instance() as inst:
        blocks = register_area_blocks(inst, area.bbox)
        for b in blocks:
            result = materialize(
                [s2_items, s2_indices, s1_items, s1_backscatter],
                partition_key=str(scene_key(week, b)),
                resources=res,
                instance=inst,
            )
            assert result.success
    after_reader = CubeReader(data)
    after = np.asarray(after_reader.array("indices.ndvi")[t0 : t0 + 7, ys, xs])
    np.testing.assert_array_equal(before, after)
    assert after_reader.snapshot_id != before_reader.snapshot_id  # a new snapshot, same contents


def test_reflectance_check_fails_on_double_offset_scene(tiny_store) -> None:
    source = open_source(SourceConfig(kind="static", path=str(tiny_store.catalog)))
    min_lng, min_lat, max_lng, max_lat = tiny_store.manifest["bbox"]
    items = source.search(
        "sentinel-2-l2a", (min_lng, min_lat, max_lng, max_lat), date(2023, 1, 1), date(2024, 12, 31)
    ).items
    win = LatticeWindow(*address.bbox_q_range(min_lat, min_lng, max_lat, max_lng))
    # the clearest scene, read once correctly and once with the offset applied twice
    item = next(i for i in items if (i.cloud_cover or 0) < 5)
    slot = day_slot(item.datetime)
    t0 = slot - slot % 7
    good = stack_week([item], win, t0)
    doubled = dataclasses.replace(
        item,
        assets={k: dataclasses.replace(a, offset=2 * a.offset) for k, a in item.assets.items()},
    )
    bad = stack_week([doubled], win, t0)
    status = {c.check_name: c.passed for c in evaluate_checks(good, win)}
    assert status["reflectance_sanity"]
    assert status["index_range"]
    status = {c.check_name: c.passed for c in evaluate_checks(bad, win)}
    assert not status["reflectance_sanity"]


def test_a_blocks_weeks_split_into_even_runs() -> None:
    """Runs of at most RANGE_WEEKS weeks, as few as possible, lengths within one, in order."""
    from pipelines.run import _chunks

    for n in (0, 1, 25, 26, 27, 52, 53, 105):
        weeks = [f"w{i:03d}" for i in range(n)]
        runs = _chunks(weeks, 26)
        assert [w for run in runs for w in run] == weeks
        assert len(runs) == -(-n // 26)
        sizes = {len(run) for run in runs}
        assert max(sizes, default=0) <= 26
        assert max(sizes, default=0) - min(sizes, default=0) <= 1
    assert [len(r) for r in _chunks([str(i) for i in range(105)], 26)] == [21] * 5
