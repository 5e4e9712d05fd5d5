"""The local Dagster instance's SQLite files are written without an fsync per event; other
SQLite databases of the process keep their own settings."""

from __future__ import annotations

from pathlib import Path

import sqlalchemy as sa

from pipelines.dagster_sqlite import is_instance_file
from pipelines.instance import open_instance


def _synchronous(conn: sa.Connection) -> int:
    return int(conn.exec_driver_sql("PRAGMA synchronous").scalar_one())


def test_the_instances_sqlite_files_skip_the_fsync_and_others_do_not(
    tmp_path: Path, monkeypatch
) -> None:
    monkeypatch.delenv("DAGSTER_HOME", raising=False)
    home = tmp_path / "dagster_home"
    with open_instance(home) as instance:
        storage = instance.event_log_storage
        with storage.index_connection() as conn:  # type: ignore[attr-defined]
            assert _synchronous(conn) == 0  # OFF
        with instance.run_storage.connect() as conn:  # type: ignore[attr-defined]
            assert _synchronous(conn) == 0
        other = sa.create_engine(f"sqlite:///{tmp_path / 'memory.sqlite'}")
        with other.connect() as conn:
            assert _synchronous(conn) == 2  # SQLite's default (FULL), untouched
        other.dispose()


def test_only_files_under_the_home_count(tmp_path: Path) -> None:
    home = tmp_path / "home"
    assert is_instance_file(str(home / "history" / "runs.db"), str(home))
    assert not is_instance_file(str(tmp_path / "memory.sqlite"), str(home))
    assert not is_instance_file("", str(home))  # an in-memory database
    assert not is_instance_file(str(home / "x.db"), "")
