"""Retention: old snapshots expire and their objects are collected; the window, the tip and
tags stay readable; ``as_of`` before the kept history is a typed error naming the oldest kept."""

from __future__ import annotations

import datetime as dt
import time

import icechunk as ic
import numpy as np
import pytest

from store.cube import CubeReader, CubeWriter
from store.errors import SnapshotExpired
from store.retention import collect_cube
from store.snapshots import cube_location, open_repository, open_storage, snapshot_at


def _size(path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def _commit(data, value: float) -> tuple[str, dt.datetime]:
    vals = np.full((7, 64, 64), value, dtype=np.float32)
    sid = CubeWriter(data).write_region(
        "indices.ndvi", list(range(19796, 19803)), 1000, 2000, vals, partition_key="w|b"
    )
    time.sleep(0.05)  # distinct commit instants
    return sid, dt.datetime.now(dt.UTC)


def _ndvi(data, snapshot_id: str | None = None) -> np.ndarray:
    reader = CubeReader(data, snapshot_id=snapshot_id)
    return np.asarray(reader.array("indices.ndvi")[19796:19803, 1000:1064, 2000:2064])


def _repo(data) -> ic.Repository:
    return open_repository(open_storage(cube_location(data)))


def test_collection_keeps_the_window_and_answers_before_it_with_a_typed_error(tmp_path):
    data = tmp_path
    a, after_a = _commit(data, 0.1)
    _, after_b = _commit(data, 0.2)
    c, _ = _commit(data, 0.3)
    _repo(data).create_tag("cited", a)  # a tagged snapshot
    size = _size(data / "cube.icechunk")
    # the window starts between b's commit and c's: the layout commit, a and b are older
    dry = collect_cube(data, keep_days=1, now=after_b + dt.timedelta(days=1), dry_run=True)
    assert (dry.expired, dry.bytes_deleted) == (3, 0)
    assert _size(data / "cube.icechunk") == size
    done = collect_cube(data, keep_days=1, now=after_b + dt.timedelta(days=1))
    assert done.expired == 3
    assert done.oldest_kept is not None
    assert done.oldest_kept.id == c
    assert done.bytes_deleted > 0
    assert _size(data / "cube.icechunk") < size
    np.testing.assert_allclose(_ndvi(data), 0.3)  # the tip is unchanged
    np.testing.assert_allclose(_ndvi(data, a), 0.1)  # the tagged snapshot stays readable
    repo = _repo(data)
    assert snapshot_at(repo, dt.datetime.now(dt.UTC)).id == c
    with pytest.raises(SnapshotExpired) as err:
        snapshot_at(repo, after_a)
    assert err.value.oldest_kept == c
    assert c in err.value.message


def test_the_tip_is_kept_whatever_its_age(tmp_path) -> None:
    _commit(tmp_path, 0.1)
    tip, _ = _commit(tmp_path, 0.2)
    done = collect_cube(tmp_path, keep_days=0, now=dt.datetime.now(dt.UTC) + dt.timedelta(days=9))
    assert done.expired == 2  # the layout commit and the first
    assert CubeReader(tmp_path).snapshot_id == tip
    np.testing.assert_allclose(_ndvi(tmp_path), 0.2)


def test_a_cube_never_expired_answers_before_its_first_commit_as_before(tmp_path) -> None:
    CubeWriter(tmp_path)  # the layout commit
    before = dt.datetime.now(dt.UTC)
    time.sleep(0.05)
    first, _ = _commit(tmp_path, 0.1)
    found = snapshot_at(_repo(tmp_path), before)
    assert found is not None
    assert found.id != first
