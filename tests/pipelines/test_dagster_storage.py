"""The instance's pooled SQLite storage (deploy/dagster.yaml): same files, history kept, and the
cross-run databases' connections reused instead of remade per statement."""

import sqlite3
import threading
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from dagster import (
    AssetCheckResult,
    AssetCheckSpec,
    AssetExecutionContext,
    AssetKey,
    DagsterInstance,
    MaterializeResult,
    asset,
    materialize,
)

from pipelines.dagster_storage import PooledSqliteEventLogStorage, PooledSqliteRunStorage
from pipelines.instance import open_instance

CONFIG = Path(__file__).resolve().parents[2] / "deploy" / "dagster.yaml"


@asset(check_specs=[AssetCheckSpec("non_empty", asset="thing")])
def thing() -> MaterializeResult:
    return MaterializeResult(
        metadata={"n": 1}, check_results=[AssetCheckResult(passed=True, metadata={"n": 1})]
    )


def _run(instance: DagsterInstance) -> str:
    result = materialize([thing], instance=instance)
    assert result.success
    return result.run_id


def _materialised_runs(instance: DagsterInstance) -> list[str]:
    records = instance.fetch_materializations(AssetKey("thing"), limit=100).records
    return sorted(r.run_id for r in records)


def test_an_existing_home_keeps_its_history_both_ways(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.delenv("DAGSTER_HOME", raising=False)
    home = tmp_path / "dagster_home"
    with open_instance(home) as instance:  # Dagster's default SQLite storage
        assert not isinstance(instance.event_log_storage, PooledSqliteEventLogStorage)
        first = _run(instance)
    with open_instance(home, CONFIG) as instance:  # the repo's config: the pooled storage
        assert isinstance(instance.event_log_storage, PooledSqliteEventLogStorage)
        assert isinstance(instance.run_storage, PooledSqliteRunStorage)
        assert {r.run_id for r in instance.get_runs()} == {first}
        assert _materialised_runs(instance) == [first]
        second = _run(instance)
        check = instance.event_log_storage.get_latest_asset_check_execution_by_key(
            [next(iter(thing.check_keys))]
        )
        assert next(iter(check.values())).run_id == second
    (home / "dagster.yaml").write_text("telemetry:\n  enabled: false\n")
    with DagsterInstance.from_config(str(home)) as instance:  # and back: Dagster's own classes
        assert {r.run_id for r in instance.get_runs()} == {first, second}
        assert _materialised_runs(instance) == sorted([first, second])
    assert sorted(p.name for p in (home / "history").glob("*.db")) == ["runs.db"]
    assert (home / "history" / "runs" / "index.db").exists()
    assert (home / "schedules" / "schedules.db").exists()


@pytest.fixture
def connects() -> Any:
    """New SQLite connections opened while the test runs, by database file name."""
    seen: Counter[str] = Counter()

    def on_connect(dbapi_connection: Any, _record: Any) -> None:
        if isinstance(dbapi_connection, sqlite3.Connection):
            row = dbapi_connection.execute("PRAGMA database_list").fetchone()
            seen[Path(row[2]).name if row and row[2] else ""] += 1

    sa.event.listen(sa.engine.Engine, "connect", on_connect)
    yield seen
    sa.event.remove(sa.engine.Engine, "connect", on_connect)


def test_runs_reuse_the_connections_of_the_cross_run_databases(
    tmp_path: Path, monkeypatch, connects: Counter[str]
) -> None:
    monkeypatch.delenv("DAGSTER_HOME", raising=False)
    home = tmp_path / "dagster_home"
    with open_instance(home, CONFIG) as instance:
        _run(instance)  # the storages are created and migrated
        connects.clear()
        runs = [_run(instance) for _ in range(3)]
        events = sum(len(instance.all_logs(r)) for r in runs)
        assert events > 30
        # Dagster's own storage opens (and closes) a connection per statement group:
        # several per event on each of these files
        assert connects["index.db"] <= 3
        assert connects["runs.db"] <= 3
        for run_id in runs:
            # a run's own event file keeps one connection while the run lives, closed with the
            # run's last event: with WAL, that last close checkpoints the file and removes the
            # write-ahead log
            assert connects[f"{run_id}.db"] >= 1
            assert not (home / "history" / "runs" / f"{run_id}.db-wal").exists()


@asset
def followed(context: AssetExecutionContext) -> MaterializeResult:
    """Logs a line, then waits (up to 20 s) until a watcher of its run's file has seen it."""
    seen = threading.Event()

    def on_event(event: Any, _cursor: str) -> None:
        if event.user_message == "followed: hello":
            seen.set()

    storage = context.instance.event_log_storage
    storage.watch(context.run_id, None, on_event)
    try:
        context.log.info("followed: hello")
        return MaterializeResult(metadata={"seen_live": seen.wait(20)})
    finally:
        storage.end_watch(context.run_id, on_event)


def test_a_watcher_follows_a_live_run(tmp_path: Path, monkeypatch) -> None:
    """The UI follows a live run by watching its event file change on disk: each write must
    reach the file while the run goes on, not only when the run ends."""
    monkeypatch.delenv("DAGSTER_HOME", raising=False)
    with open_instance(tmp_path / "dagster_home", CONFIG) as instance:
        result = materialize([followed], instance=instance)
        assert result.success
        meta = result.asset_materializations_for_node("followed")[0].metadata
        assert meta["seen_live"].value is True
