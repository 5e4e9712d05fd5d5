"""`earthmem gc`: re-ingests grow the data directory; collection shrinks it, keeps the tip's
values and answers ``as_of`` before the kept history with a typed error naming the oldest kept."""

from __future__ import annotations

import datetime as dt
import shutil

import numpy as np
import pytest
from dagster import DagsterInstance

from api.context import ServiceContext
from api.errors import NotFound
from cli.ingest import ingest
from cli.main import main
from store.cube import CubeReader


def _size(path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def _stored(path) -> dict[str, int]:
    """Every file and its size, but SQLite's own: closing the last connection to a WAL database
    checkpoints it (the -wal file goes, the .db file changes) without changing what it holds."""
    return {
        str(p.relative_to(path)): p.stat().st_size
        for p in path.rglob("*")
        if p.is_file() and not p.name.endswith((".db", ".db-wal", ".db-shm"))
    }


def _run_ids() -> list[str]:
    with DagsterInstance.get() as inst:
        return sorted(r.run_id for r in inst.get_runs())


def _ndvi(data) -> list[np.ndarray]:
    """The tip's NDVI chunks (every stored one)."""
    reader = CubeReader(data)
    arr = reader.array("indices.ndvi")
    return [
        np.asarray(arr[t * 7 : t * 7 + 7, y * 128 : y * 128 + 128, x * 128 : x * 128 + 128])
        for t, y, x in reader.chunks("indices.ndvi")[:, :3]
    ]


def test_gc_after_identical_reingests(tiny_store, tmp_path, monkeypatch, capsys) -> None:
    data = tmp_path / "data"
    # the session's ingest of the tiny sample stands in for the first ingest (same assets)
    shutil.copytree(tiny_store.data, data, symlinks=True)
    shutil.copytree(tiny_store.sample, data / "sample")
    monkeypatch.delenv("DAGSTER_HOME", raising=False)
    between = dt.datetime.now(dt.UTC)
    ingest(data, workers=1)  # identical re-ingest: new snapshots, new runs
    tip = CubeReader(data).snapshot_id
    tip_values = _ndvi(data)
    size = _size(data)
    stored, runs = _stored(data), _run_ids()
    capsys.readouterr()
    assert main(["gc", "--data", str(data), "--keep-days", "0", "--dry-run"]) == 0
    assert "would expire" in capsys.readouterr().out
    assert _stored(data) == stored  # a dry run deletes nothing: not a cube object, not a run
    assert _run_ids() == runs
    assert main(["gc", "--data", str(data), "--keep-days", "0"]) == 0
    out = capsys.readouterr().out
    assert "expired" in out
    assert _size(data) < size
    assert CubeReader(data).snapshot_id == tip
    after = _ndvi(data)
    assert len(after) == len(tip_values) > 0
    for a, b in zip(after, tip_values, strict=True):
        np.testing.assert_array_equal(a, b)
    with pytest.raises(NotFound) as err:
        ServiceContext(data).reader(as_of_signed_at=between.isoformat())
    assert err.value.code == "snapshot_expired"
    assert tip in str(err.value)
    with DagsterInstance.get() as inst:  # the latest materialisation of each partition stays
        runs = inst.get_runs()
        assert runs
        assert all(r.status.value in ("SUCCESS", "FAILURE") for r in runs)
    assert main(["gc", "--data", str(data), "--keep-days", "soon"]) == 2
    assert main(["gc", "--data", str(data), "--grace-hours", "soon"]) == 2
    assert main(["gc", "--data", str(data), "--grace-hours", "-1"]) == 2
    assert "--grace-hours must be a number of hours in [0, " in capsys.readouterr().err
    # "keep everything" past the calendar: a typed error, not an OverflowError's traceback
    assert main(["gc", "--data", str(data), "--keep-days", "999999"]) == 2
    assert "--keep-days must be a number of days in [0, 36500]" in capsys.readouterr().err
