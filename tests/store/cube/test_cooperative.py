"""Cooperative writes: forks merged into one commit, and two coordinator processes at once.

The coordinators are separate processes that fork, write and merge, then wait for a go
signal, so both sessions start from the same snapshot and the second commit must get past
the first through icechunk's conflict detection: different chunks both land (rebased), the
same chunk changed by both is a CommitConflict for one of them, and the tip holds exactly the
winner's values with everything committed before kept.
"""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from store.cube import CubeReader, CubeWriter
from store.cube.cooperative import CooperativeCommit, write_in_fork
from store.errors import TransactionClosed
from tests import s3_server

ROOT = Path(__file__).resolve().parents[3]
SIDE = 128
ROW, COL = 1000 * SIDE, 2000 * SIDE


def _fill(value: float, t0: int = 0) -> Any:
    def write(tx: Any) -> None:
        tx.write("indices.ndvi", np.arange(t0, t0 + 7), ROW, COL, np.full((7, SIDE, SIDE), value))

    return write


def _value(data: Path, t: int, row: int = ROW, col: int = COL) -> float:
    da = CubeReader(data).read_region(
        "indices.ndvi", row, row + 1, col, col + 1, t, t + 1, drop_empty=False
    )
    return float(np.asarray(da).reshape(-1)[0])


def test_forks_pickled_merged_and_committed_once(tmp_path: Path) -> None:
    writer = CubeWriter(tmp_path)
    n = len(writer.list_snapshots())
    with CooperativeCommit(writer) as coop:
        forks = [pickle.loads(pickle.dumps(coop.fork())) for _ in range(3)]
        done = [
            pickle.loads(pickle.dumps(write_in_fork(f, f"p{i}", _fill(i + 1.0, 7 * i))))
            for i, f in enumerate(forks)
        ]
        dropped = done.pop()  # e.g. its checks failed: never merged, never visible
        snapshot, committed = coop.commit(done, ["p0", "p1"], "two weeks")
    assert committed
    assert dropped.chunks_written == 1
    snaps = writer.list_snapshots()
    assert len(snaps) == n + 1
    assert snaps[0].id == snapshot
    assert snaps[0].metadata["partition_keys"] == ["p0", "p1"]
    assert (_value(tmp_path, 0), _value(tmp_path, 7)) == (1.0, 2.0)
    assert np.isnan(_value(tmp_path, 14))
    with pytest.raises(TransactionClosed):
        coop.fork()


def test_a_failed_coordinator_commits_nothing(tmp_path: Path) -> None:
    writer = CubeWriter(tmp_path)
    tip = writer.list_snapshots()[0].id

    def coordinate() -> None:
        with CooperativeCommit(writer) as coop:
            write_in_fork(coop.fork(), "p0", _fill(1.0))
            raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom"):
        coordinate()
    assert writer.list_snapshots()[0].id == tip


COORDINATOR = textwrap.dedent(
    """
    import json, sys, time
    from pathlib import Path
    import numpy as np
    from store.cube.write import CubeWriter
    from store.cube.cooperative import CooperativeCommit, write_in_fork
    from store.errors import CommitConflict
    data, name, value, col, storage = sys.argv[1:6]
    # on object storage each coordinator has its own data directory, as on two machines:
    # no lock file they could share
    writer = CubeWriter(Path(data) / name if storage else data, storage=storage or None)
    values = np.full((7, 128, 128), float(value))
    with CooperativeCommit(writer) as coop:
        w = write_in_fork(coop.fork(), name, lambda tx: tx.write(
            "indices.ndvi", np.arange(7), 1000 * 128, int(col), values))
        (Path(data) / f"{name}.ready").touch()
        while not (Path(data) / "go").exists():
            time.sleep(0.02)
        try:
            snap, _ = coop.commit([w], [name], f"coordinator {name}")
            print(json.dumps({"ok": snap}))
        except CommitConflict as exc:
            print(json.dumps({"conflict": str(exc)}))
    """
)


def _race(
    data: Path, cols: tuple[int, int], storage: str = "", env_extra: dict[str, str] | None = None
) -> dict[str, dict[str, str]]:
    """Two coordinator processes writing ``indices.ndvi`` at columns ``cols``, committing at once."""
    CubeWriter(data, storage=storage or None)  # the layout exists before the race
    env = {**os.environ, "PYTHONPATH": str(ROOT), **(env_extra or {})}
    procs = {
        name: subprocess.Popen(
            [sys.executable, "-c", COORDINATOR, str(data), name, value, str(col), storage],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for name, value, col in (("a", "1.0", cols[0]), ("b", "2.0", cols[1]))
    }
    deadline = time.monotonic() + 120
    while not all((data / f"{n}.ready").exists() for n in procs):
        assert all(p.poll() is None for p in procs.values()), [
            p.communicate() for p in procs.values()
        ]
        assert time.monotonic() < deadline
        time.sleep(0.05)
    (data / "go").touch()
    out = {}
    for name, p in procs.items():
        stdout, stderr = p.communicate(timeout=120)
        assert p.returncode == 0, stderr
        out[name] = json.loads(stdout.strip().splitlines()[-1])
    return out


@pytest.mark.slow  # two processes importing the store
def test_two_coordinators_on_different_chunks_both_land(tmp_path: Path) -> None:
    result = _race(tmp_path, (COL, COL + SIDE))
    assert set(result["a"]) == set(result["b"]) == {"ok"}
    messages = {s.message for s in CubeWriter(tmp_path).list_snapshots()}
    assert {"coordinator a", "coordinator b"} <= messages
    assert (_value(tmp_path, 0, col=COL), _value(tmp_path, 0, col=COL + SIDE)) == (1.0, 2.0)


@pytest.mark.slow
def test_two_coordinators_on_the_same_chunk_one_fails_clearly(tmp_path: Path) -> None:
    writer = CubeWriter(tmp_path)
    writer.write_region(
        "indices.ndvi",
        np.arange(7, 14),
        ROW,
        COL,
        np.full((7, SIDE, SIDE), 5.0),
        partition_key="before",
    )
    result = _race(tmp_path, (COL, COL))
    outcomes = sorted(next(iter(r)) for r in result.values())
    assert outcomes == ["conflict", "ok"]
    winner, loser = sorted(result, key=lambda n: "ok" not in result[n])
    assert "indices/ndvi" in result[loser]["conflict"]
    assert _value(tmp_path, 0) == {"a": 1.0, "b": 2.0}[winner]  # the winner's, whole
    assert _value(tmp_path, 7) == 5.0  # what was committed before is kept
    messages = [s.message for s in CubeWriter(tmp_path).list_snapshots()]
    assert f"coordinator {winner}" in messages
    assert f"coordinator {loser}" not in messages


@pytest.mark.slow  # a moto server and two coordinator processes
def test_two_coordinators_on_object_storage_need_no_lock(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On S3 no host-local lock orders the commits (each coordinator has its own data
    directory): the store's conditional writes do."""
    server = s3_server.start(tmp_path / "moto.log")
    try:
        server.create_bucket("race")
        for k, v in server.env().items():
            monkeypatch.setenv(k, v)
        apart, same = "s3://race/apart", "s3://race/same"
        result = _race(tmp_path / "a", (COL, COL + SIDE), apart, server.env())
        assert set(result["a"]) == set(result["b"]) == {"ok"}
        reader = CubeReader(storage=apart)
        for col, want in ((COL, 1.0), (COL + SIDE, 2.0)):
            da = reader.read_region(
                "indices.ndvi", ROW, ROW + 1, col, col + 1, 0, 1, drop_empty=False
            )
            assert float(np.asarray(da).reshape(-1)[0]) == want
        result = _race(tmp_path / "s", (COL, COL), same, server.env())
        assert sorted(next(iter(r)) for r in result.values()) == ["conflict", "ok"]
        winner = next(n for n, r in result.items() if "ok" in r)
        da = CubeReader(storage=same).read_region(
            "indices.ndvi", ROW, ROW + 1, COL, COL + 1, 0, 1, drop_empty=False
        )
        assert float(np.asarray(da).reshape(-1)[0]) == {"a": 1.0, "b": 2.0}[winner]
    finally:
        server.stop()
