"""The Dagster definitions load, with every asset, partition, check, schedule and sensor."""

from __future__ import annotations

from pipelines.definitions import defs
from pipelines.partitions import SCENE_PARTITIONS, TESSERA_YEARS, WEEKS, week_key_of, week_t0
from store.cube import TIME_CHUNK_DAYS


def test_assets_checks_and_automation_are_defined() -> None:
    graph = defs.resolve_asset_graph()
    job = defs.resolve_job_def("scene_ingest")
    schedule = defs.resolve_schedule_def("daily_ingest")
    sensor = defs.resolve_sensor_def("stac_new_items_sensor")
    keys = {k.to_user_string() for k in graph.get_all_asset_keys()}
    assert keys == {
        "s2_items",
        "s2_indices",
        "s1_items",
        "s1_backscatter",
        "tessera_items",
        "geotessera_embeddings",
        "geotessera_year_table",
        "geotessera_multi_year",
        "memory_rechecks",
    }
    checks = {c.name for c in graph.asset_check_keys}
    assert {
        "index_range",
        "clear_cells_finite",
        "reflectance_sanity",
        "chunk_coverage",
        "valid_vectors",
    } <= checks
    assert job.partitions_def == SCENE_PARTITIONS  # inferred from the assets
    assert schedule.cron_schedule == "0 6 * * *"
    assert sensor is not None
    assert "2024" in TESSERA_YEARS.get_partition_keys()


def test_weeks_align_with_cube_time_chunks() -> None:
    for key in WEEKS.get_partition_keys()[:60]:
        assert week_t0(key) % TIME_CHUNK_DAYS == 0
    import datetime as dt

    assert week_key_of(dt.date(2024, 3, 15)) == "2024-03-14"


def test_definitions_load_without_warnings_and_run_steps_in_process() -> None:
    """Every run's process loads the definitions: no Dagster beta/preview notices there."""
    import subprocess
    import sys
    from pathlib import Path

    from dagster import in_process_executor

    repo = Path(__file__).resolve().parents[2]
    done = subprocess.run(
        [sys.executable, "-W", "error", "-c", "import pipelines.definitions"],
        cwd=repo,
        env={"PYTHONPATH": str(repo), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert defs.executor == in_process_executor


def test_an_area_with_a_period_shows_only_its_weeks(tiny_sample_dir) -> None:
    """The sample declares 2023-2024: its code location has those weeks, a live area all to now."""
    import datetime as dt
    import json
    import subprocess
    import sys
    from pathlib import Path

    repo = Path(__file__).resolve().parents[2]
    manifest = tiny_sample_dir / "manifest.json"
    period = json.loads(manifest.read_text())["period"]
    script = (
        "from pipelines.definitions import defs\n"
        "keys = defs.resolve_job_def('scene_ingest').partitions_def"
        ".get_partitions_def_for_dimension('week').get_partition_keys()\n"
        "print(keys[0], keys[-1], len(keys))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script],
        cwd=repo,
        env={"PYTHONPATH": str(repo), "PATH": "/usr/bin:/bin", "EARTHMEM_AREA": str(manifest)},
        capture_output=True,
        text=True,
        check=True,
    )
    first, last, n = done.stdout.split()
    assert first == week_key_of(dt.date.fromisoformat(period["start"]))
    assert last == week_key_of(dt.date.fromisoformat(period["end"]))
    assert int(n) == (dt.date.fromisoformat(last) - dt.date.fromisoformat(first)).days // 7 + 1
    live = WEEKS.get_partition_keys()  # this process has no area configured: live weeks
    assert live[-1] == week_key_of(dt.datetime.now(dt.UTC).date())
    assert len(live) > int(n)
