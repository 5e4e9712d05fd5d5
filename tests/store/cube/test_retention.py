"""Retention: old snapshots expire and their objects are collected; the window, the tip and
tags stay readable; ``as_of`` before the kept history is a typed error naming the oldest kept."""

from __future__ import annotations

import datetime as dt
import time

import icechunk as ic
import numpy as np
import pytest

from store.cube import CubeReader, CubeWriter
from store.errors import SnapshotExpired, UnsupportedStorage
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


def _in_flight_write_survives(tmp_path, monkeypatch, prefix: str, grace) -> bool:
    """Host B uploads a write's chunks, host A collects (each with its own data directory: no
    lock in common), then B commits; whether B's values read back."""
    monkeypatch.setenv("EARTHMEM_OBJECT_STORE", f"s3://gc-grace/{prefix}")
    host_a, host_b = tmp_path / f"{prefix}-a", tmp_path / f"{prefix}-b"
    _commit(host_a, 0.1)  # the cube exists, with a first value
    # noise: chunks that compress to more than icechunk inlines in a manifest (real objects)
    values = np.random.default_rng(7).random((7, 64, 64), dtype=np.float32)
    with CubeWriter(host_b).transaction("w|b") as tx:
        tx.write("indices.ndvi", list(range(19796, 19803)), 1000, 2000, values)
        tx.store_pending()  # B's chunks are on the object store, not yet reachable
        time.sleep(1.1)  # older than "now" at the store's one-second timestamps
        collect_cube(host_a, keep_days=0, grace_hours=grace)
    try:
        return bool(np.array_equal(_ndvi(host_b), values))
    except Exception as exc:  # a read of a deleted chunk fails
        if "chunk" in str(exc).lower() or "not found" in str(exc).lower():
            return False
        raise


@pytest.mark.slow  # a moto server
def test_collection_on_object_storage_spares_writes_in_flight_on_other_machines(
    tmp_path, monkeypatch
) -> None:
    """On S3 no host-local lock sees another machine's write between its upload and its
    commit: only unreachable objects older than the grace are collected (24 h by default)."""
    from tests import s3_server

    server = s3_server.start(tmp_path / "moto.log")
    try:
        server.create_bucket("gc-grace")
        for k, v in server.env().items():
            monkeypatch.setenv(k, v)
        monkeypatch.delenv("EARTHMEM_GC_GRACE_HOURS", raising=False)
        assert _in_flight_write_survives(tmp_path, monkeypatch, "default", None)
        # without the grace the collection deletes the uploaded chunks and the commit then
        # names chunks that are gone: what the grace is for
        assert not _in_flight_write_survives(tmp_path, monkeypatch, "none", 0.0)
        # the grace comes from the environment too, and a bad one is a clear error
        monkeypatch.setenv("EARTHMEM_GC_GRACE_HOURS", "soon")
        with pytest.raises(UnsupportedStorage, match="EARTHMEM_GC_GRACE_HOURS"):
            collect_cube(tmp_path / "default-a", keep_days=0)
    finally:
        server.stop()


@pytest.mark.slow  # a moto server
def test_a_store_that_refuses_the_collection_is_storage_unavailable(tmp_path, monkeypatch) -> None:
    """Storage that may be read but refuses changes: the open succeeds, the expiry's writes are
    refused, and that is a typed StorageUnavailable (the CLI's one line, exit 1), not
    icechunk's own error with its trace; once the store accepts writes, the rerun collects."""
    from store.errors import StorageUnavailable
    from tests import s3_server

    server = s3_server.start(tmp_path / "moto.log")
    try:
        server.create_bucket("gc-refused")
        for k, v in server.env().items():
            monkeypatch.setenv(k, v)
        monkeypatch.setenv("EARTHMEM_OBJECT_STORE", "s3://gc-refused/cube")
        _commit(tmp_path, 0.1)
        _commit(tmp_path, 0.2)
        proxy = s3_server.FaultProxy(server.endpoint, "refuse")
        try:
            monkeypatch.setenv("AWS_ENDPOINT_URL", proxy.endpoint)
            with pytest.raises(StorageUnavailable, match="collecting the cube") as err:
                collect_cube(tmp_path, keep_days=0, grace_hours=0.0)
            assert "run it again" in err.value.message
        finally:
            proxy.stop()
        monkeypatch.setenv("AWS_ENDPOINT_URL", server.endpoint)
        done = collect_cube(tmp_path, keep_days=0, grace_hours=0.0)
        assert done.expired >= 1
    finally:
        server.stop()


def test_a_negative_grace_is_refused(tmp_path) -> None:
    _commit(tmp_path, 0.1)
    with pytest.raises(ValueError, match="grace"):
        collect_cube(tmp_path, grace_hours=-1)
