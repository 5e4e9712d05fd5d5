"""deploy/dagster-postgres.yaml: a Dagster instance whose runs, events and schedules live in
the real PostgreSQL server the suite starts (tests/pg_server.py).

The file is used as it ships (copied into a fresh ``DAGSTER_HOME``), its URL given only in
the environment; a real earthmem asset is materialised through it, and a second instance
opened from the same file — as another machine would — sees the run and the
materialisation, which are rows in PostgreSQL.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import psycopg
import pytest
import yaml
from dagster import AssetKey, DagsterInstance, DagsterRunStatus, materialize

from pipelines.memory.assets import memory_rechecks
from pipelines.resources import StoreResource
from store.cube import CubeWriter

REPO = Path(__file__).resolve().parents[2]
CONFIG = REPO / "deploy" / "dagster-postgres.yaml"


def test_the_config_names_no_credentials() -> None:
    doc = yaml.safe_load(CONFIG.read_text())
    assert doc["storage"]["postgres"]["postgres_url"] == {"env": "EARTHMEM_DAGSTER_PG_URL"}


@pytest.mark.slow  # Dagster creates its PostgreSQL schema
def test_materialisation_recorded_in_postgres(
    postgres_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = tmp_path / "dagster_home"
    home.mkdir()
    shutil.copy(CONFIG, home / "dagster.yaml")
    # the driver the config's comment asks for
    monkeypatch.setenv(
        "EARTHMEM_DAGSTER_PG_URL", postgres_url.replace("postgresql://", "postgresql+psycopg2://")
    )
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
    rows: Any
    with psycopg.connect(postgres_url) as conn:
        rows = conn.execute(
            "SELECT count(*) FROM event_logs WHERE run_id = %s"
            " AND dagster_event_type = 'ASSET_MATERIALIZATION'",
            (run_id,),
        ).fetchone()
    assert rows[0] == 1
