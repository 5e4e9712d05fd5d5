"""The instance's pooled SQLite storage (deploy/dagster.yaml): same files, history kept, and the
cross-run databases' connections reused instead of remade per statement."""

import sqlite3
import threading
from collections import Counter
from pathlib import Path
from typing import Any

import dagster
import pytest
import sqlalchemy as sa
from dagster import (
    AssetCheckResult,
    AssetCheckSpec,
    AssetExecutionContext,
    AssetKey,
    DagsterEventType,
    DagsterInstance,
    MaterializeResult,
    StaticPartitionsDefinition,
    asset,
    materialize,
)

from pipelines.dagster_event_log import BATCH_SIZE, BATCH_SIZE_ENV
from pipelines.dagster_storage import PooledSqliteEventLogStorage, PooledSqliteRunStorage
from pipelines.instance import open_instance

CONFIG = Path(__file__).resolve().parents[2] / "deploy" / "dagster.yaml"


@pytest.fixture(autouse=True)
def _batch_size_restored(monkeypatch: pytest.MonkeyPatch) -> None:
    """The pooled storage switches on Dagster's batched writes for its process (an
    environment variable): restored after each test, so other tests do not inherit it."""
    monkeypatch.setenv(BATCH_SIZE_ENV, str(BATCH_SIZE))


def test_the_event_log_copies_the_pinned_dagster() -> None:
    """pipelines/dagster_event_log.py re-implements Dagster 1.13.27's per-event writes (its
    asset row, check execution rows and run files): a Dagster upgrade must re-check it
    against the new version's sql_event_log.py / sqlite_event_log.py, then update this pin."""
    assert dagster.__version__ == "1.13.27"


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


def test_a_batch_retried_event_by_event_is_stored_once(tmp_path: Path, monkeypatch) -> None:
    """When a batch's index rows fail after its run rows were written, Dagster stores the
    batch again event by event; the run's file must not then hold the batch twice."""
    monkeypatch.delenv("DAGSTER_HOME", raising=False)
    with open_instance(tmp_path / "first", CONFIG) as instance:
        run_id = _run(instance)
        events = [r.event_log_entry for r in instance.get_records_for_run(run_id).records]
    assert any(e.is_dagster_event and e.dagster_event.is_step_materialization for e in events)
    with open_instance(tmp_path / "second", CONFIG) as instance:
        storage = instance.event_log_storage
        assert isinstance(storage, PooledSqliteEventLogStorage)
        real = storage._write_index_rows
        calls = {"n": 0}

        def fail_once(mirrored: Any) -> None:
            calls["n"] += 1
            if calls["n"] == 1:
                raise sa.exc.OperationalError("INSERT", {}, Exception("database is locked"))
            real(mirrored)

        monkeypatch.setattr(storage, "_write_index_rows", fail_once)
        with pytest.raises(sa.exc.OperationalError):
            storage.store_event_batch(events)
        for event in events:  # what DagsterInstance.handle_new_event does after a failed batch
            storage.store_event(event)
        stored = instance.get_records_for_run(run_id).records
        assert len(stored) == len(events)
        assert [r.event_log_entry.message for r in stored] == [e.message for e in events]
        assert _materialised_runs(instance) == [run_id]
        # a later batch is written whole again (the retried events are forgotten)
        storage.store_event_batch(events[:2])
        assert len(instance.get_records_for_run(run_id).records) == len(events) + 2


def test_only_the_process_running_a_run_keeps_its_file_open(tmp_path: Path, monkeypatch) -> None:
    """A process that writes some of a run's events without running it (the daemon's queue
    and launch events) closes the run's file after each write, leaving no write-ahead log."""
    monkeypatch.delenv("DAGSTER_HOME", raising=False)
    with open_instance(tmp_path / "first", CONFIG) as instance:
        run_id = _run(instance)
        events = [r.event_log_entry for r in instance.get_records_for_run(run_id).records]
    kinds = [e.dagster_event_type for e in events]
    start = kinds.index(DagsterEventType.RUN_START)
    home = tmp_path / "second"
    with open_instance(home, CONFIG) as instance:
        storage = instance.event_log_storage
        assert isinstance(storage, PooledSqliteEventLogStorage)
        wal = home / "history" / "runs" / f"{run_id}.db-wal"
        for event in events[:start]:  # before the run starts here
            storage.store_event(event)
            assert run_id not in storage._writers
            assert not wal.exists()
        storage.store_event(events[start])
        assert run_id in storage._writers  # this process runs it: the file stays open
        for event in events[start + 1 :]:
            storage.store_event(event)
        assert run_id not in storage._writers  # closed with the run's last event
        assert not wal.exists()
        assert len(instance.get_records_for_run(run_id).records) == len(events)


@asset(partitions_def=StaticPartitionsDefinition(["a", "b"]))
def part_thing() -> MaterializeResult:
    return MaterializeResult(metadata={"n": 1})


def test_a_live_runs_materialisation_ids_are_remembered(tmp_path: Path, monkeypatch) -> None:
    """What a run's checks link their evaluations to (pipelines.family_assets._targets_of):
    the ids the index gave this run's partition materialisations, the same as read back,
    kept while the run is live and dropped with its last event."""
    monkeypatch.delenv("DAGSTER_HOME", raising=False)
    with open_instance(tmp_path / "first", CONFIG) as instance:
        run_id = materialize([part_thing], partition_key="a", instance=instance).run_id
        events = [r.event_log_entry for r in instance.get_records_for_run(run_id).records]
    kinds = [e.dagster_event_type for e in events]
    end = kinds.index(DagsterEventType.RUN_SUCCESS)
    key = AssetKey("part_thing").to_string()
    with open_instance(tmp_path / "second", CONFIG) as instance:
        storage = instance.event_log_storage
        assert isinstance(storage, PooledSqliteEventLogStorage)
        for event in events[:end]:
            storage.store_event(event)
        record = instance.fetch_materializations(AssetKey("part_thing"), limit=1).records[0]
        assert record.partition_key == "a"
        assert storage.stored_materializations(run_id, key) == {
            "a": (record.storage_id, record.timestamp)
        }
        assert storage.stored_materializations("another run", key) == {}
        for event in events[end:]:
            storage.store_event(event)
        assert storage.stored_materializations(run_id, key) == {}


def _rows(db: Path) -> dict[str, list[tuple[Any, ...]]]:
    with sqlite3.connect(db) as conn:
        tables = [
            r[0]
            for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
            if r[0] not in ("alembic_version", "secondary_indexes")  # migration times
        ]
        out = {}
        for t in tables:
            cursor = conn.execute(f"SELECT * FROM {t}")
            names = [d[0] for d in cursor.description]
            keep = [i for i, n in enumerate(names) if n not in _INSERT_TIMES]
            out[t] = sorted((tuple(r[i] for i in keep) for r in cursor.fetchall()), key=repr)
        return out


_INSERT_TIMES = {"create_timestamp", "update_timestamp", "updated_timestamp"}
"""Columns SQLite fills with the wall clock of the insert (``CURRENT_TIMESTAMP``)."""


def test_the_stored_rows_are_dagsters_own(tmp_path: Path, monkeypatch) -> None:
    """The same events stored by Dagster's SQLite event log and by the pooled one (its
    statements run on the driver's cursor, a materialisation's record written around the
    event's stored JSON) leave the same rows, column for column, in every table."""
    monkeypatch.delenv("DAGSTER_HOME", raising=False)
    with open_instance(tmp_path / "source", CONFIG) as instance:
        runs = [_run(instance), _run(instance)]  # the asset row inserted, then updated
        runs.append(materialize([part_thing], partition_key="b", instance=instance).run_id)
        events = [
            r.event_log_entry for run in runs for r in instance.get_records_for_run(run).records
        ]
    homes = {"dagster": tmp_path / "dagster", "pooled": tmp_path / "pooled"}
    for name, home in homes.items():
        with open_instance(home, CONFIG if name == "pooled" else None) as instance:
            storage = instance.event_log_storage
            assert isinstance(storage, PooledSqliteEventLogStorage) == (name == "pooled")
            for event in events:
                storage.store_event(event)
    dagster_rows = {
        p.relative_to(homes["dagster"]): _rows(p)
        for p in sorted((homes["dagster"] / "history" / "runs").glob("*.db"))
    }
    pooled_rows = {
        p.relative_to(homes["pooled"]): _rows(p)
        for p in sorted((homes["pooled"] / "history" / "runs").glob("*.db"))
    }
    assert set(dagster_rows) == set(pooled_rows)
    assert len(dagster_rows) == len(runs) + 1
    for path, tables in dagster_rows.items():
        assert pooled_rows[path] == tables, path
    index = dagster_rows[Path("history/runs/index.db")]
    assert index["asset_keys"]
    assert index["asset_check_executions"]
    assert index["event_logs"]


def test_dynamic_partitions_read_as_dagsters_own(tmp_path: Path, monkeypatch) -> None:
    """The pooled storage's reads of dynamic partitions (on the driver's cursor) answer as
    Dagster's: the keys in the order added, membership per key, and after a deletion."""
    monkeypatch.delenv("DAGSTER_HOME", raising=False)
    answers = {}
    for name, config in (("dagster", None), ("pooled", CONFIG)):
        with open_instance(tmp_path / name, config) as instance:
            storage = instance.event_log_storage
            assert isinstance(storage, PooledSqliteEventLogStorage) == (name == "pooled")
            instance.add_dynamic_partitions("blocks", ["b2", "b1", "b3"])
            instance.add_dynamic_partitions("other", ["b9"])
            instance.delete_dynamic_partition("blocks", "b3")
            answers[name] = (
                storage.get_dynamic_partitions("blocks"),
                storage.get_dynamic_partitions("none"),
                [storage.has_dynamic_partition("blocks", k) for k in ("b1", "b2", "b3", "b9")],
            )
    assert answers["pooled"] == answers["dagster"]
    assert answers["pooled"] == (["b2", "b1"], [], [True, True, False, False])
