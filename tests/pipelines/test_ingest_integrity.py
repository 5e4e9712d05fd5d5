"""Re-ingesting a damaged copy of the tiny sample never loses, mixes or silently drops what is stored.

A base store is ingested once from a clean copy (2023 only, no Tessera); each test copies the
sample and the store, damages one item of the 2023-09-09 Sentinel-2 overpass (a middle week of
the run's range, so the re-ingest visits it), re-ingests and compares what is stored afterwards
(the week's cube values and chunks, its inventory rows) with the base, and reads the skip reports.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from datetime import date
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from cli.ingest import ingest
from cli.main import main
from pipelines.partitions import week_key_of, week_t0
from pipelines.resources import AreaResource
from pipelines.run import IngestReport, ingest_area
from store.cube import CubeReader
from store.tslot import day_slot
from tests.dagster_instance import ephemeral as ephemeral_instance

END = date(2023, 12, 31)
"""Ingest 2023 only: the range 2023-01-12..2023-11-16 has the target week in its middle."""
ITEM = "S2A_45QUF_20230909_0_L2A"
"""The damaged overpass (cloud-free)."""
OTHER = "S2A_45QUF_20231118_0_L2A"
"""Another overpass of the same tile, whose rasters a duplicate points at."""
WEEK = week_key_of(date(2023, 9, 9))
DAY = day_slot("2023-09-09")
OTHER_DAY = day_slot("2023-11-18")


@dataclass(frozen=True)
class Copy:
    """A sample and a data directory (copies, free to damage)."""

    sample: Path
    data: Path

    def item_path(self, item_id: str = ITEM) -> Path:
        return self.sample / "sentinel-2-l2a" / item_id / f"{item_id}.json"

    def item(self, item_id: str = ITEM) -> dict[str, Any]:
        return json.loads(self.item_path(item_id).read_text())

    def save(self, doc: dict[str, Any], item_id: str = ITEM) -> None:
        self.item_path(item_id).write_text(json.dumps(doc))

    def ingest(self) -> IngestReport:
        with ephemeral_instance() as inst:
            return ingest_area(
                self.data,
                self.sample / "catalog.json",
                self.sample / "manifest.json",
                instance=inst,
                end=END,
                years=[],
            )


def _ndvi(data: Path, day: int) -> np.ndarray:
    """The stored NDVI of one day over the area's window."""
    sample_manifest = data.parent / "sample" / "manifest.json"
    win = AreaResource(path=str(sample_manifest)).window()
    arr = CubeReader(data).array("indices.ndvi")
    return np.asarray(arr[day, win.lat_q0 : win.lat_q1, win.lng_q0 : win.lng_q1])


def _week_rows(data: Path) -> list[dict[str, Any]]:
    """The week's S2 inventory rows, without the commit-dependent columns."""
    t0 = week_t0(WEEK)
    rows = CubeReader(data).inventory.table().to_pylist()
    return [
        {k: v for k, v in r.items() if k not in ("snapshot_id", "written_at")}
        for r in rows
        if r["band"] == "s2" and t0 <= r["tslot"] < t0 + 7
    ]


def _week_chunks(data: Path) -> set[tuple[int, ...]]:
    t0 = week_t0(WEEK)
    return {
        tuple(int(v) for v in c)
        for c in CubeReader(data).chunks("indices.ndvi")
        if int(c[0]) == t0 // 7
    }


@pytest.fixture(scope="module")
def base(tiny_sample_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Copy:
    root = tmp_path_factory.mktemp("integrity_base")
    shutil.copytree(tiny_sample_dir, root / "sample")
    clean = Copy(root / "sample", root / "data")
    report = clean.ingest()
    assert report.failed == []
    assert report.skipped == []
    assert report.held == []
    rows = _week_rows(clean.data)
    assert [r["item_ids"] for r in rows] == [[ITEM]]  # the overpass is stored ...
    assert np.isfinite(_ndvi(clean.data, DAY)).any()  # ... with its values
    return clean


@pytest.fixture
def copy(base: Copy, tmp_path: Path) -> Copy:
    shutil.copytree(base.sample, tmp_path / "sample")
    shutil.copytree(base.data, tmp_path / "data", symlinks=True)
    return Copy(tmp_path / "sample", tmp_path / "data")


def _assert_week_kept(copy: Copy, base: Copy) -> None:
    """The week's cube values, chunks and inventory rows are those of the base store."""
    np.testing.assert_array_equal(_ndvi(copy.data, DAY), _ndvi(base.data, DAY))
    assert _week_chunks(copy.data) == _week_chunks(base.data) != set()
    assert _week_rows(copy.data) == _week_rows(base.data)


def _assert_held(report: IngestReport, code_or_reason: str) -> None:
    held = [h for h in report.held if h.startswith(f"s2_indices {WEEK}: {ITEM}: ")]
    assert len(held) == 1, report.held
    assert code_or_reason in held[0], report.held
    assert any(c.endswith(": stored_overpasses_kept") for c in report.failed_checks)


# ----------------------------------------------------------------- item 1: unreadable scenes


def test_truncated_cog_keeps_the_stored_week_and_is_reported(copy: Copy, base: Copy) -> None:
    cog = copy.item_path().parent / "B04.tif"
    cog.write_bytes(cog.read_bytes()[: cog.stat().st_size // 2])
    report = copy.ingest()
    assert f"s2_indices: {ITEM}: [corrupt] unreadable" in "\n".join(report.skipped)
    _assert_held(report, "[corrupt] unreadable")
    _assert_week_kept(copy, base)


def test_missing_asset_file_keeps_the_stored_week_and_is_reported(copy: Copy, base: Copy) -> None:
    doc = copy.item()
    doc["assets"]["nir"]["href"] = "./no-such-B08.tif"
    copy.save(doc)
    report = copy.ingest()
    assert any(s.startswith(f"s2_indices: {ITEM}: [corrupt]") for s in report.skipped)
    _assert_held(report, "[corrupt] unreadable")
    _assert_week_kept(copy, base)


def test_unreadable_scene_on_a_fresh_store_is_a_reported_skip(copy: Copy) -> None:
    """Nothing stored yet: the week is written with what could be read, and its commit names the skip."""
    shutil.rmtree(copy.data)
    cog = copy.item_path().parent / "B04.tif"
    cog.write_bytes(cog.read_bytes()[:1000])
    report = copy.ingest()
    assert report.failed == []
    assert report.held == []
    assert any(s.startswith(f"s2_indices: {ITEM}: [corrupt]") for s in report.skipped)
    assert _week_rows(copy.data) == []  # nothing invented for the unreadable overpass
    assert np.isnan(_ndvi(copy.data, DAY)).all()
    commits = [
        s.metadata
        for s in CubeReader(copy.data).list_snapshots()
        if s.metadata.get("asset") == "s2_indices"
        and str(s.metadata.get("partition_key", "")).endswith(WEEK)
    ]
    assert commits
    assert any(ITEM in line for line in commits[0]["skipped"])
    others = _week_rows_all(copy.data)
    assert len(others) >= 4  # the other overpasses of 2023 were stored


def _week_rows_all(data: Path) -> list[dict[str, Any]]:
    return [r for r in CubeReader(data).inventory.table().to_pylist() if r["band"] == "s2"]


# ----------------------------------------------------------------- item 2: duplicate ids


def _add_duplicate(copy: Copy, prefix: str, updated: str | None) -> Path:
    """A second JSON with ITEM's id pointing at OTHER's rasters, linked from the collection.

    ``prefix`` makes its path sort before ("A") or after ("Z") the original's.
    """
    doc = copy.item()
    other_dir = copy.item_path(OTHER).parent
    for asset in doc["assets"].values():
        asset["href"] = str(other_dir / Path(asset["href"]).name)
    if updated is not None:
        doc["properties"]["updated"] = updated
    folder = copy.sample / "sentinel-2-l2a" / f"{prefix}_duplicate"
    folder.mkdir()
    path = folder / f"{ITEM}.json"
    path.write_text(json.dumps(doc))
    coll_path = copy.sample / "sentinel-2-l2a" / "collection.json"
    coll = json.loads(coll_path.read_text())
    coll["links"].append(
        {"rel": "item", "href": f"./{folder.name}/{path.name}", "type": "application/json"}
    )
    coll_path.write_text(json.dumps(coll))
    return path


@pytest.mark.parametrize("prefix", ["A", "Z"])
def test_duplicate_without_newer_updated_is_refused_in_both_orders(
    copy: Copy, base: Copy, prefix: str
) -> None:
    dup = _add_duplicate(copy, prefix, updated=None)
    report = copy.ingest()
    lines = [s for s in report.skipped if s.startswith(f"s2_indices: {ITEM}: [duplicate_id]")]
    assert len(lines) == 2
    assert all("refused" in s and str(dup) in s for s in lines)
    _assert_held(report, "[duplicate_id]")
    _assert_week_kept(copy, base)  # neither copy's pixels replaced the stored ones


@pytest.mark.parametrize("prefix", ["A", "Z"])
def test_duplicate_with_newer_updated_wins_in_both_orders(
    copy: Copy, base: Copy, prefix: str
) -> None:
    dup = _add_duplicate(copy, prefix, updated="2030-01-01T00:00:00Z")
    report = copy.ingest()
    lines = [s for s in report.skipped if s.startswith(f"s2_indices: {ITEM}: [duplicate_id]")]
    assert len(lines) == 1
    assert "superseded" in lines[0]
    assert str(dup) in lines[0]
    assert report.held == []
    # the newer copy's pixels (OTHER's rasters) are stored on ITEM's day, whatever the file order
    np.testing.assert_array_equal(_ndvi(copy.data, DAY), _ndvi(base.data, OTHER_DAY))
    assert [r["item_ids"] for r in _week_rows(copy.data)] == [[ITEM]]


# ----------------------------------------------------------------- item 4: discovery failures


def test_garbage_crs_keeps_cube_and_inventory(copy: Copy, base: Copy) -> None:
    doc = copy.item()
    doc["properties"]["proj:code"] = "EPSG:garbage"
    copy.save(doc)
    report = copy.ingest()
    assert any(s.startswith(f"s2_indices: {ITEM}: [unknown_crs]") for s in report.skipped)
    _assert_held(report, "[unknown_crs]")
    _assert_week_kept(copy, base)


def test_far_bbox_keeps_cube_and_inventory(copy: Copy, base: Copy) -> None:
    doc = copy.item()
    doc["bbox"] = [v + 10.0 if i % 2 == 0 else v for i, v in enumerate(doc["bbox"])]
    for ring in doc["geometry"]["coordinates"]:
        for point in ring:
            point[0] += 10.0
    copy.save(doc)
    report = copy.ingest()
    _assert_held(report, "no longer discovered")
    _assert_week_kept(copy, base)


def test_year_9999_keeps_cube_and_inventory(copy: Copy, base: Copy) -> None:
    doc = copy.item()
    doc["properties"]["datetime"] = "9999" + doc["properties"]["datetime"][4:]
    copy.save(doc)
    report = copy.ingest()
    _assert_held(report, "no longer discovered")
    _assert_week_kept(copy, base)


# ----------------------------------------------------------------- item 5: malformed item JSON


def test_malformed_item_json_is_a_skip_and_the_rest_ingests(copy: Copy, base: Copy) -> None:
    copy.item_path().write_text('{"type": "Feature", "id": ')  # cut mid-write
    report = copy.ingest()
    assert report.failed == []
    bad = [s for s in report.skipped if s.startswith(f"s2_indices: {copy.item_path()}: ")]
    assert len(bad) == 1
    assert "[corrupt_item] unreadable item file" in bad[0]
    _assert_held(report, "no longer discovered")
    _assert_week_kept(copy, base)
    # every other overpass is still stored as before
    assert [r["item_ids"] for r in _week_rows_all(copy.data)] == [
        r["item_ids"] for r in _week_rows_all(base.data)
    ]


def test_malformed_item_json_on_a_fresh_store_ingests_the_rest(copy: Copy, base: Copy) -> None:
    shutil.rmtree(copy.data)
    copy.item_path().write_text("not json at all")
    report = copy.ingest()
    assert report.failed == []
    assert report.held == []
    assert any("[corrupt_item]" in s for s in report.skipped)
    stored = sorted(i for r in _week_rows_all(copy.data) for i in r["item_ids"])
    expected = sorted(i for r in _week_rows_all(base.data) for i in r["item_ids"] if i != ITEM)
    assert stored == expected
    assert expected


def test_cli_summary_names_skips_and_held_weeks(
    copy: Copy,
    base: Copy,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "dagster_home"))
    cog = copy.item_path().parent / "B04.tif"
    cog.write_bytes(cog.read_bytes()[: cog.stat().st_size // 2])
    report = ingest(
        copy.data, str(copy.sample / "catalog.json"), str(copy.sample / "manifest.json"), workers=1
    )
    out = capsys.readouterr().out
    assert report.held
    assert f"  skipped: s2_indices: {ITEM}: [corrupt] unreadable" in out
    assert f"  held: s2_indices {WEEK}: {ITEM}: stored, would be dropped" in out
    _assert_week_kept(copy, base)


def test_cli_unreadable_catalog_exits_2_with_one_line(
    copy: Copy, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "dagster_home"))
    (copy.sample / "catalog.json").write_text("{broken")
    rc = main(
        [
            "ingest",
            "--data",
            str(copy.data),
            "--catalog",
            str(copy.sample / "catalog.json"),
            "--area",
            str(copy.sample / "manifest.json"),
        ]
    )
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2
    assert len(err) == 1
    assert err[0].startswith("earthmem: error [catalog_unreachable]:")
