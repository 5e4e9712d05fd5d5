"""Faults at the pipeline level: a double-offset scene is caught by its check and never written;
two partitions materialised at once both land; a run killed mid-write leaves the cube intact."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import threading
from datetime import date
from pathlib import Path

import numpy as np
from dagster import DagsterEventType, instance_for_test, materialize

import pipelines.run
from pipelines.partitions import register_area_blocks, scene_key, week_key_of, week_t0
from pipelines.run import SCENE_ASSETS, ingest_area, resources_for
from store.cube import CubeReader
from store.tslot import day_slot
from tests.dagster_instance import ephemeral as ephemeral_instance


def _copy_sample(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    return dst


def _clearest_s2_item(sample: Path) -> tuple[Path, dict]:
    best = None
    for f in sorted((sample / "sentinel-2-l2a").glob("*/*.json")):
        doc = json.loads(f.read_text())
        if (
            best is None
            or doc["properties"]["eo:cloud_cover"] < best[1]["properties"]["eo:cloud_cover"]
        ):
            best = (f, doc)
    assert best is not None
    return best


def test_double_offset_scene_fails_its_check_and_is_not_written(tiny_sample_dir, tmp_path) -> None:
    sample = _copy_sample(tiny_sample_dir, tmp_path / "sample")
    path, doc = _clearest_s2_item(sample)
    for asset in doc["assets"].values():
        for band in asset.get("raster:bands", []):
            if "offset" in band:
                band["offset"] = 2 * band["offset"]  # the offset applied twice
    path.write_text(json.dumps(doc))
    week = week_key_of(date.fromisoformat(doc["properties"]["datetime"][:10]))
    data = tmp_path / "data"
    res = resources_for(data, sample / "catalog.json", sample / "manifest.json")
    with ephemeral_instance() as inst:
        blocks = register_area_blocks(inst, res["area"].bbox)
        result = materialize(
            SCENE_ASSETS,
            partition_key=str(scene_key(week, blocks[0])),
            resources=res,
            instance=inst,
            raise_on_error=False,
        )
    checks = {
        (e.asset_key.to_user_string(), e.check_name): e.passed
        for e in result.get_asset_check_evaluations()
    }
    assert checks[("s2_indices", "reflectance_sanity")] is False
    reader = CubeReader(data)  # the S1 asset of the same run committed; S2 must not have
    win = res["area"].window()
    t0 = week_t0(week)
    ndvi = np.asarray(
        reader.array("indices.ndvi")[t0 : t0 + 7, win.lat_q0 : win.lat_q1, win.lng_q0 : win.lng_q1]
    )
    assert np.isnan(ndvi).all()


def test_two_workers_materialise_partitions_at_once(tiny_sample_dir, tmp_path, monkeypatch) -> None:
    data = tmp_path / "data"
    # one week per run: the tiny area's 5 weeks to the end date make 5 runs, which the
    # parent hands to the two worker processes (with one run there is nothing to share)
    monkeypatch.setattr(pipelines.run, "RANGE_WEEKS", 1)
    with instance_for_test() as inst:  # sets DAGSTER_HOME, which the workers open
        assert os.environ["DAGSTER_HOME"] == inst.root_directory
        report = ingest_area(
            data,
            tiny_sample_dir / "catalog.json",
            tiny_sample_dir / "manifest.json",
            instance=inst,
            workers=2,
            end=date(2023, 6, 30),
            years=[],
        )
        runs = inst.get_runs()
        pids = {  # the processes that executed the scene steps (multi_year runs here)
            e.dagster_event.pid
            for r in runs
            for e in inst.all_logs(r.run_id, of_type=DagsterEventType.STEP_START)
            if e.dagster_event is not None and (e.step_key or "").startswith(("s2_", "s1_"))
        }
    assert report.failed == []
    assert report.partitions >= 4
    assert len(runs) >= 4  # one run per week
    assert os.getpid() not in pids  # the runs executed in the worker processes ...
    assert len(pids) == 2  # ... both of them
    reader = CubeReader(data)
    # every partition committed its own snapshot, concurrently, and all landed
    keys = {s.metadata.get("partition_key") for s in reader.list_snapshots()}
    assert len({k for k in keys if k and "|" in k}) == report.partitions


def test_kill_mid_ingest_keeps_the_last_snapshot_and_a_rerun_completes(
    tiny_sample_dir, tmp_path
) -> None:
    data = tmp_path / "data"
    script = textwrap.dedent(
        f"""
        from dagster import DagsterInstance
        import pipelines.run as run
        run.RANGE_WEEKS = 1  # one run and one progress line per week: the kill lands mid-ingest
        run.ingest_area({str(data)!r}, {str(tiny_sample_dir / "catalog.json")!r}, {str(tiny_sample_dir / "manifest.json")!r},
                        instance=DagsterInstance.ephemeral(), years=[],
                        progress=lambda s, d, t: print("done", d, flush=True))
        """
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", script],
        stdout=subprocess.PIPE,
        text=True,
        cwd=Path(__file__).resolve().parents[2],
    )
    assert proc.stdout is not None
    watchdog = threading.Timer(120, proc.kill)  # a hung child is killed, which ends the loop
    watchdog.start()
    try:
        for line in proc.stdout:  # three weeks committed: kill without warning
            if line.split() == ["done", "3"]:
                break
    finally:
        watchdog.cancel()
    assert proc.poll() is None, "the ingest finished (or died) before the kill"
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    reader = CubeReader(data)
    before = reader.snapshot_id
    assert len(reader.list_snapshots()) >= 3
    with ephemeral_instance() as inst:
        report = ingest_area(
            data,
            tiny_sample_dir / "catalog.json",
            tiny_sample_dir / "manifest.json",
            instance=inst,
            years=[],
        )
    assert report.failed == []
    after = CubeReader(data)
    assert after.snapshot_id != before
    ev_day = day_slot("2024-08-15")
    assert any(int(t) >= ev_day - 14 for t in after.chunks("indices.ndwi")[:, 0] * 7)
