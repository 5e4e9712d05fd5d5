"""deploy/dagster-postgres.yaml: a Dagster instance whose runs, events and schedules live in
the real PostgreSQL server the suite starts (tests/pg_server.py).

The file is used as it ships (copied into a fresh ``DAGSTER_HOME``), its URL given only in
the environment; a real earthmem asset is materialised through it, and a second instance
opened from the same file — as another machine would — sees the run and the
materialisation, which are rows in PostgreSQL. Then the whole ingest of the tiny sample runs
through it, its scene ranges in two processes that each open the instance themselves.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import psycopg
import pytest
import yaml
from dagster import AssetKey, DagsterInstance, DagsterRunStatus, materialize

from pipelines import run as run_module
from pipelines.memory.assets import memory_rechecks
from pipelines.partitions import BLOCKS
from pipelines.resources import StoreResource
from pipelines.run import ingest_area
from store.cube import CubeWriter
from store.snapshots import cube_location
from tests.conftest import IngestedSample
from tests.pipelines.dask_cluster import cube_contents

REPO = Path(__file__).resolve().parents[2]
CONFIG = REPO / "deploy" / "dagster-postgres.yaml"


def test_the_config_names_no_credentials() -> None:
    doc = yaml.safe_load(CONFIG.read_text())
    assert doc["storage"]["postgres"]["postgres_url"] == {"env": "EARTHMEM_DAGSTER_PG_URL"}


def _home(tmp_path: Path, postgres_url: str, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fresh ``DAGSTER_HOME`` holding the shipped config, its URL in the environment."""
    home = tmp_path / "dagster_home"
    home.mkdir()
    shutil.copy(CONFIG, home / "dagster.yaml")
    # the driver the config's comment asks for
    monkeypatch.setenv(
        "EARTHMEM_DAGSTER_PG_URL", postgres_url.replace("postgresql://", "postgresql+psycopg2://")
    )
    return home


@pytest.mark.slow  # Dagster creates its PostgreSQL schema
def test_materialisation_recorded_in_postgres(
    postgres_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = _home(tmp_path, postgres_url, monkeypatch)
    data = tmp_path / "data"
    CubeWriter(data)  # an empty cube: the re-check runs (over no memories)
    with DagsterInstance.from_config(str(home)) as instance:
        assert type(instance.run_storage).__name__ == "PostgresRunStorage"
        assert type(instance.event_log_storage).__name__ == "PostgresEventLogStorage"
        assert type(instance.schedule_storage).__name__ == "PostgresScheduleStorage"
        result = materialize(
            [memory_rechecks],
            resources={"store": StoreResource(data_dir=str(data))},
            instance=instance,
        )
        assert result.success
        run_id = result.run_id
    with DagsterInstance.from_config(str(home)) as other:  # e.g. the webserver's machine
        run = other.get_run_by_id(run_id)
        assert run is not None
        assert run.status == DagsterRunStatus.SUCCESS
        event = other.get_latest_materialization_event(AssetKey("memory_rechecks"))
        assert event is not None
        assert event.run_id == run_id
    assert _event_count(postgres_url, "ASSET_MATERIALIZATION", run_id) == 1


def _event_count(postgres_url: str, kind: str, run_id: str | None = None) -> int:
    """Rows of PostgreSQL's ``event_logs`` of one event type (of one run, when given)."""
    query = "SELECT count(*) FROM event_logs WHERE dagster_event_type = %s"
    params: tuple[str, ...] = (kind,)
    if run_id is not None:
        query, params = query + " AND run_id = %s", (kind, run_id)
    rows: Any
    with psycopg.connect(postgres_url) as conn:
        rows = conn.execute(query, params).fetchone()
    return int(rows[0])


@pytest.mark.slow  # the whole tiny ingest, two of its processes opening the instance themselves
def test_the_sample_ingest_runs_on_postgres(
    tiny_store: IngestedSample, postgres_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The deployment's instance under the real pipeline: scene ranges materialised by two
    processes at once (each opens the instance from ``DAGSTER_HOME``), partitioned assets
    with their checks, dynamic block partitions, the Tessera vintages and the k-NN tables.
    The cube equals the one the suite's ephemeral instance built, and another instance
    reads each scene partition's materialisation back from PostgreSQL."""
    home = _home(tmp_path, postgres_url, monkeypatch)
    monkeypatch.setenv("DAGSTER_HOME", str(home))  # the worker processes open it from here
    monkeypatch.setattr(run_module, "RANGE_WEEKS", 4)  # several ranges for the two processes
    data = tmp_path / "data"
    sample = tiny_store.sample
    with DagsterInstance.from_config(str(home)) as instance:
        report = ingest_area(
            data, sample / "catalog.json", sample / "manifest.json", instance=instance, workers=2
        )
    want = tiny_store.report
    assert report.failed == want.failed == []
    # named by range (the runs here are shorter ranges): compare the checks that failed
    assert {c.split(": ", 1)[1] for c in report.failed_checks} == {
        c.split(": ", 1)[1] for c in want.failed_checks
    }
    assert (report.partitions, report.years) == (want.partitions, want.years)
    got_cube = cube_contents(cube_location(data))
    assert got_cube == cube_contents(cube_location(tiny_store.data))
    written: dict[str, set[str]] = {"s2": set(), "s1": set()}
    for value in got_cube.values():
        if isinstance(value, tuple) and value[0].split("|", 1)[0] in written:
            family, key = value[0].split("|", 1)
            written[family].add(key)
    assert written["s2"]
    assert written["s1"]
    with DagsterInstance.from_config(str(home)) as other:
        assert type(other.event_log_storage).__name__ == "PostgresEventLogStorage"
        assert other.get_dynamic_partitions(BLOCKS.name or "blocks")
        for family, asset in (("s2", "s2_indices"), ("s1", "s1_backscatter")):
            stored = {str(k) for k in other.get_materialized_partitions(AssetKey(asset))}
            assert written[family] <= stored  # every week the cube holds, recorded per partition
        mats = other.fetch_materializations(AssetKey("s2_indices"), limit=10_000).records
        pids = {
            m.event_log_entry.dagster_event.pid for m in mats if m.event_log_entry.dagster_event
        }
        assert pids
        assert os.getpid() not in pids  # the ranges ran in the worker processes
        assert len({m.run_id for m in mats}) > 1
        assert all(r.status == DagsterRunStatus.SUCCESS for r in other.get_runs())
        for asset in ("geotessera_year_table", "geotessera_multi_year", "memory_rechecks"):
            assert other.get_latest_materialization_event(AssetKey(asset)) is not None
    assert _event_count(postgres_url, "ASSET_CHECK_EVALUATION") > 0
