"""Object storage that fails: a missing bucket, a server gone before the commit, a store that
refuses writes — typed errors, nothing committed, and a rerun converges.

Against a real S3-compatible server on loopback (moto, tests/s3_server.py).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from store.cube.cooperative import CooperativeCommit, write_in_fork
from store.cube.write import CubeWriter
from store.errors import StorageUnavailable
from tests import s3_server

pytestmark = pytest.mark.slow  # a moto server process, and the client's retries


@pytest.fixture
def server(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[s3_server.S3Server]:
    srv = s3_server.start(tmp_path / "moto.log")
    for k, v in srv.env().items():
        monkeypatch.setenv(k, v)
    try:
        yield srv
    finally:
        srv.stop()


def test_a_missing_bucket_is_storage_unavailable(
    server: s3_server.S3Server, tmp_path: Path
) -> None:
    with pytest.raises(StorageUnavailable, match="no-such-bucket"):
        CubeWriter(tmp_path, storage="s3://no-such-bucket/cube")


def test_storage_gone_before_the_commit_is_storage_unavailable(
    server: s3_server.S3Server, tmp_path: Path
) -> None:
    server.create_bucket("faults")
    writer = CubeWriter(tmp_path, storage="s3://faults/cube")
    values = np.ones((7, 128, 128))
    with CooperativeCommit(writer) as coop:
        fork = coop.fork()
        written = write_in_fork(
            fork, "p", lambda tx: tx.write("indices.ndvi", np.arange(7), 128000, 256000, values)
        )
        server.stop()
        with pytest.raises(StorageUnavailable, match="nothing committed"):
            coop.commit([written], ["p"], "never lands")


def _series(reader: object) -> np.ndarray:
    """The NDVI of the tests' first cell over its week (7 day slots)."""
    da = reader.read_region(  # type: ignore[attr-defined]
        "indices.ndvi", 128000, 128001, 256000, 256001, 0, 7, drop_empty=False
    )
    return np.asarray(da).reshape(-1)


def _ndvi_at(storage: str) -> float:
    from store.cube import CubeReader

    return float(np.nanmax(_series(CubeReader(storage=storage))))


def test_storage_that_refuses_writes_commits_nothing_and_a_rerun_converges(
    server: s3_server.S3Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Reads pass, every write is ``403 AccessDenied`` (read-only credentials, a bucket
    policy): the write is a typed error naming the store, the branch tip does not move, and the
    same write against the store that accepts it lands."""
    server.create_bucket("faults")
    location = "s3://faults/refused"
    CubeWriter(tmp_path / "a", storage=location).write_region(
        "indices.ndvi",
        np.arange(7),
        128000,
        256000,
        np.full((7, 128, 128), 1.0),
        partition_key="first",
    )
    tip = CubeWriter(tmp_path / "a", storage=location).list_snapshots()[0].id
    proxy = s3_server.FaultProxy(server.endpoint, "refuse")
    try:
        monkeypatch.setenv("AWS_ENDPOINT_URL", proxy.endpoint)
        with pytest.raises(StorageUnavailable, match="nothing committed") as err:
            CubeWriter(tmp_path / "b", storage=location).write_region(
                "indices.ndvi",
                np.arange(7),
                128000,
                256000,
                np.full((7, 128, 128), 2.0),
                partition_key="refused",
            )
        assert location.split("/")[2] in str(err.value) or "faults" in str(err.value)
    finally:
        proxy.stop()
        monkeypatch.setenv("AWS_ENDPOINT_URL", server.endpoint)
    assert CubeWriter(tmp_path / "a", storage=location).list_snapshots()[0].id == tip
    assert _ndvi_at(location) == 1.0
    CubeWriter(tmp_path / "b", storage=location).write_region(
        "indices.ndvi",
        np.arange(7),
        128000,
        256000,
        np.full((7, 128, 128), 2.0),
        partition_key="rerun",
    )
    assert _ndvi_at(location) == 2.0


def test_a_store_that_stops_answering_is_a_timeout_not_a_hang(
    server: s3_server.S3Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Reads pass, writes are never answered: the write gives up after the storage deadline
    with a typed error (icechunk's client alone waits for ever), the tip does not move, and
    the same write against a store that answers lands. Noise makes chunk objects, whose upload
    stalls first (nothing committed); a constant region compresses into the manifest, so the
    commit itself stalls (its outcome unknown, said so)."""
    import time

    from store.errors import StorageTimeout

    server.create_bucket("faults")
    location = "s3://faults/stalled"
    _write(tmp_path / "a", location, np.full((7, 128, 128), 1.0), "first")
    noise = np.random.default_rng(3).random((7, 128, 128))
    for values, outcome in (
        (noise, "nothing committed"),
        (np.full((7, 128, 128), 2.0), "may still land"),
    ):
        tip = CubeWriter(tmp_path / "a", storage=location).list_snapshots()[0].id
        proxy = s3_server.FaultProxy(server.endpoint, "stall")
        monkeypatch.setenv("EARTHMEM_STORAGE_TIMEOUT_SECONDS", "2")
        try:
            monkeypatch.setenv("AWS_ENDPOINT_URL", proxy.endpoint)
            t0 = time.monotonic()
            with pytest.raises(StorageTimeout, match="did not answer within 2 s") as err:
                _write(tmp_path / "b", location, values, "stalled")
            assert time.monotonic() - t0 < 60
            assert outcome in str(err.value)
            assert err.value.code == "storage_timeout"
        finally:
            proxy.stop()  # the stalled connections are dropped: the abandoned calls end
            monkeypatch.setenv("AWS_ENDPOINT_URL", server.endpoint)
            monkeypatch.delenv("EARTHMEM_STORAGE_TIMEOUT_SECONDS")
        assert CubeWriter(tmp_path / "a", storage=location).list_snapshots()[0].id == tip
        assert _ndvi_at(location) == 1.0
    _write(tmp_path / "b", location, noise, "rerun")
    assert _ndvi_at(location) == float(noise[:, 0, 0].astype(np.float32).max())


def _write(data: Path, location: str, values: np.ndarray, key: str) -> None:
    CubeWriter(data, storage=location).write_region(
        "indices.ndvi", np.arange(7), 128000, 256000, values, partition_key=key
    )


def test_a_bad_storage_deadline_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    from store.deadline import storage_timeout
    from store.errors import UnsupportedStorage

    for bad in ("soon", "0", "-3", "inf"):
        monkeypatch.setenv("EARTHMEM_STORAGE_TIMEOUT_SECONDS", bad)
        with pytest.raises(UnsupportedStorage, match="EARTHMEM_STORAGE_TIMEOUT_SECONDS"):
            storage_timeout()
    monkeypatch.setenv("EARTHMEM_STORAGE_TIMEOUT_SECONDS", "12.5")
    assert storage_timeout() == 12.5


def test_reads_from_a_store_that_stops_answering_are_a_timeout_not_a_hang(
    server: s3_server.S3Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A reader (a query server's) whose store stops answering: reading chunks it has not read
    yet, opening a snapshot and loading its inventory give up after the deadline with a typed
    error; once the store answers again the same reads succeed."""
    import time

    from store.cube import CubeReader
    from store.errors import StorageTimeout

    server.create_bucket("faults")
    location = "s3://faults/reads"
    noise = np.random.default_rng(5).random((7, 128, 128))
    _write(tmp_path / "a", location, noise, "first")
    from store.inventory import InventoryRow

    with CubeWriter(tmp_path / "a", storage=location).transaction("w1|b7.1.2") as tx:
        tx.write_inventory("s2|w1|b7.1.2", [InventoryRow("s2", 3, "b7.1.2", ("item",), 5, 10)])
    proxy = s3_server.FaultProxy(server.endpoint, "pass")
    try:
        monkeypatch.setenv("AWS_ENDPOINT_URL", proxy.endpoint)
        reader = CubeReader(storage=location)
        proxy.mode = "stall_all"
        monkeypatch.setenv("EARTHMEM_STORAGE_TIMEOUT_SECONDS", "2")
        t0 = time.monotonic()
        with pytest.raises(StorageTimeout, match="did not answer within 2 s"):
            reader.read_region("indices.ndvi", 128000, 128010, 256000, 256010, 0, 7)
        with pytest.raises(StorageTimeout, match="opening the cube"):
            CubeReader(storage=location)
        with pytest.raises(StorageTimeout, match="reading the inventory"):
            _ = reader.inventory
        assert time.monotonic() - t0 < 60
        proxy.mode = "pass"
        monkeypatch.setenv("EARTHMEM_STORAGE_TIMEOUT_SECONDS", "60")  # a busy machine's proxy
        # a new reader (the old one's abandoned requests may still hold its fetches: icechunk
        # shares a fetch in flight, and the stalled connections never answer)
        fresh = CubeReader(storage=location)
        assert fresh.inventory.table().num_rows == 1
        np.testing.assert_allclose(_series(fresh), noise[:, 0, 0].astype(np.float32))
    finally:
        proxy.stop()


def test_a_server_recovers_when_its_store_answers_again(
    server: s3_server.S3Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A query server's context over object storage: while the store stops answering its reads
    are ``storage_timeout``; once it answers again the next request opens a new reader of the
    same snapshot (the stalled one may still wait on its abandoned fetches) and answers.
    Requests right behind a timeout fail at once for a short back-off."""
    import time

    from api.context import ServiceContext
    from api.errors import Unavailable
    from store.errors import StorageTimeout

    server.create_bucket("faults")
    monkeypatch.setenv("EARTHMEM_OBJECT_STORE", "s3://faults/served")
    monkeypatch.setenv("EARTHMEM_REFRESH_SECONDS", "0")
    noise = np.random.default_rng(9).random((7, 128, 128))
    _write(tmp_path / "ingest", "s3://faults/served/cube.icechunk", noise, "first")
    proxy = s3_server.FaultProxy(server.endpoint, "pass")
    try:
        monkeypatch.setenv("AWS_ENDPOINT_URL", proxy.endpoint)
        replica = tmp_path / "replica"
        replica.mkdir()
        ctx = ServiceContext(replica)
        first = ctx.reader()
        proxy.mode = "stall_all"
        monkeypatch.setenv("EARTHMEM_STORAGE_TIMEOUT_SECONDS", "2")
        ctx.storage_backoff.seconds = 1.0
        # the tip check (Unavailable, 503) or the read (StorageTimeout, 503): either way
        with pytest.raises((StorageTimeout, Unavailable), match="did not answer") as err:
            ctx.reader().read_region("indices.ndvi", 128000, 128004, 256000, 256004, 0, 7)
        assert err.value.code == "storage_timeout"
        t0 = time.monotonic()  # a request right behind it fails at once, not after 2 s more
        with pytest.raises(Unavailable, match="retry in a few seconds") as err:
            ctx.reader()
        assert err.value.code == "storage_timeout"
        assert time.monotonic() - t0 < 1.0
        time.sleep(1.1)  # the back-off is over: the next request asks the store again
        proxy.mode = "pass"
        monkeypatch.setenv("EARTHMEM_STORAGE_TIMEOUT_SECONDS", "60")  # a busy machine's proxy
        again = ctx.reader()
        assert again is not first
        assert again.snapshot_id == first.snapshot_id
        np.testing.assert_allclose(_series(again), noise[:, 0, 0].astype(np.float32))
    finally:
        proxy.stop()


def test_a_cooperative_commit_to_a_store_that_stops_answering_is_a_timeout(
    server: s3_server.S3Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The Dask path's coordinator: forks written, then the store stops answering the commit.
    The commit is a typed error within the deadline and leaving the block does not wait on
    the abandoned commit's session; a rerun once the store answers lands."""
    import time

    from store.errors import StorageTimeout

    server.create_bucket("faults")
    location = "s3://faults/coop"
    proxy = s3_server.FaultProxy(server.endpoint, "pass")
    try:
        monkeypatch.setenv("AWS_ENDPOINT_URL", proxy.endpoint)
        noise = np.random.default_rng(11).random((7, 128, 128))

        def write(tx: object) -> None:
            tx.write("indices.ndvi", np.arange(7), 128000, 256000, noise)  # type: ignore[attr-defined]

        def stalled_commit() -> None:
            with CooperativeCommit(CubeWriter(tmp_path, storage=location)) as coop:
                written = write_in_fork(coop.fork(), "p", write, remote=coop.remote)
                proxy.mode = "stall"
                monkeypatch.setenv("EARTHMEM_STORAGE_TIMEOUT_SECONDS", "2")
                coop.commit([written], ["p"], "stalled")

        t0 = time.monotonic()
        with pytest.raises(StorageTimeout, match="may still land"):
            stalled_commit()
        assert time.monotonic() - t0 < 60  # the block's exit did not wait on the session
        proxy.mode = "pass"
        monkeypatch.setenv("EARTHMEM_STORAGE_TIMEOUT_SECONDS", "60")
        with CooperativeCommit(CubeWriter(tmp_path, storage=location)) as coop:
            written = write_in_fork(coop.fork(), "p", write, remote=coop.remote)
            coop.commit([written], ["p"], "rerun")
        assert _ndvi_at(location) == float(noise[:, 0, 0].astype(np.float32).max())
    finally:
        proxy.stop()
