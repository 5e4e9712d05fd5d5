"""The refresh interval of a running server is a setting: argument, environment, default."""

from __future__ import annotations

import numpy as np
import pytest

from api.context import ServiceContext
from api.errors import InvalidArgument
from api.refresh import DEFAULT_TIP_CHECK_SECONDS, ENV_REFRESH_SECONDS
from store.cube import CubeWriter


def test_default_env_and_argument(tmp_path, monkeypatch) -> None:
    monkeypatch.delenv(ENV_REFRESH_SECONDS, raising=False)
    assert ServiceContext(tmp_path).tip_check_seconds == DEFAULT_TIP_CHECK_SECONDS
    monkeypatch.setenv(ENV_REFRESH_SECONDS, "7.5")
    assert ServiceContext(tmp_path).tip_check_seconds == 7.5
    assert ServiceContext(tmp_path, tip_check_seconds=0).tip_check_seconds == 0.0


@pytest.mark.parametrize("bad", ["-1", "soon", "inf", "nan"])
def test_a_bad_value_is_a_typed_error(tmp_path, monkeypatch, bad) -> None:
    monkeypatch.setenv(ENV_REFRESH_SECONDS, bad)
    with pytest.raises(InvalidArgument) as err:
        ServiceContext(tmp_path)
    assert err.value.code == "invalid_refresh_seconds"


def _commit(data, value: float) -> str:
    writer = CubeWriter(data)
    vals = np.full((1, 4, 4), value, dtype=np.float32)
    return writer.write_region("indices.ndvi", [19797], 1000, 2000, vals, partition_key="t|b")


@pytest.mark.parametrize(("seconds", "moves"), [("3600", False), ("0", True)])
def test_a_new_snapshot_is_served_after_the_interval(tmp_path, monkeypatch, seconds, moves):
    monkeypatch.setenv(ENV_REFRESH_SECONDS, seconds)
    first = _commit(tmp_path, 0.25)
    ctx = ServiceContext(tmp_path)
    assert ctx.reader().snapshot_id == first
    second = _commit(tmp_path, 0.5)
    assert ctx.reader().snapshot_id == (second if moves else first)


def _publish_table(data, n: int) -> None:
    """A k-NN vintage of ``n`` cells written on ``data``'s host and published to the root."""
    from store import address
    from store.knn import write_table
    from store.knn.remote import publish_local

    rng = np.random.default_rng(n)
    cells = np.sort(address.q_to_raw_array(np.arange(n) + 1_200_000, np.full(n, 2_300_000)))
    write_table(
        data / "knn" / "geotessera" / "2024",
        cells,
        rng.integers(-127, 128, (n, 128), dtype=np.int8),
        np.full(n, 1 / 127, np.float32),
        {"band": "geotessera", "tslot": 54, "vintage": 2024},
        replace=True,
        calibrate=False,
    )
    assert publish_local(data, "geotessera/2024") is not None


@pytest.mark.slow  # a moto server
@pytest.mark.parametrize(("seconds", "moves"), [("3600", False), ("0", True)])
def test_a_replica_on_object_storage_picks_up_new_snapshots_and_tables(
    tmp_path, monkeypatch, seconds, moves
) -> None:
    """A running replica (its own empty data directory) over an object store that another host
    writes to: new cube snapshots and a newly published k-NN table are served after the
    refresh interval, not before; every answer names the snapshot it read."""
    from tests import s3_server

    server = s3_server.start(tmp_path / "moto.log")
    try:
        server.create_bucket("refresh")
        for k, v in server.env().items():
            monkeypatch.setenv(k, v)
        monkeypatch.setenv("EARTHMEM_OBJECT_STORE", "s3://refresh/root")
        monkeypatch.setenv(ENV_REFRESH_SECONDS, seconds)
        ingest_host, replica = tmp_path / "ingest", tmp_path / "replica"
        replica.mkdir()
        first = _commit(ingest_host, 0.25)
        _publish_table(ingest_host, 40)
        ctx = ServiceContext(replica)
        assert ctx.reader().snapshot_id == first
        assert ctx.table("geotessera/2024").n == 40
        second = _commit(ingest_host, 0.5)
        _publish_table(ingest_host, 60)
        assert ctx.reader().snapshot_id == (second if moves else first)
        assert ctx.table("geotessera/2024").n == (60 if moves else 40)
        assert not (replica / "cube.icechunk").exists()
    finally:
        server.stop()
