"""The transactional cube: positions, chunks, transactions, time travel, readers."""

from __future__ import annotations

import datetime as dt
import multiprocessing as mp
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import icechunk as ic
import numpy as np
import pytest

from store.address import LAT_STEP, LNG_STEP, bbox_q_range, q_center
from store.blocks import Block
from store.cube import (
    BANDS,
    TIME_CHUNK_DAYS,
    CubeReader,
    CubeTransaction,
    CubeWriter,
    band_spec,
    geotransform,
)
from store.errors import (
    CommitConflict,
    CubeNotFound,
    InvalidWrite,
    RegionOutOfBounds,
    RegionTooLarge,
    SnapshotNotFound,
    TransactionClosed,
    UnknownBand,
    UnsupportedStorage,
)
from store.snapshots import open_storage

REPO_ROOT = Path(__file__).resolve().parents[3]
SIDE = 128  # default block level 7
# A block-aligned origin near 23 N, 90 E, with a write straddling two blocks in x.
BY, BX = 13_000, 22_000  # block indices (level 7)
Y0, X0 = BY * SIDE, BX * SIDE
T_WEEK = 19_796  # a Thursday (2024-03-14): start of a time chunk


def _values(t: int, h: int, w: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return rng.uniform(-1, 1, size=(t, h, w)).astype(np.float32)


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    return tmp_path / "data"


@pytest.fixture
def writer(data_dir: Path) -> CubeWriter:
    return CubeWriter(data_dir)


def test_day_slot_zero_is_thursday_and_chunks_are_weeks() -> None:
    assert dt.date(1970, 1, 1).weekday() == 3
    assert TIME_CHUNK_DAYS == 7
    assert dt.date.fromordinal(dt.date(1970, 1, 1).toordinal() + T_WEEK).weekday() == 3
    assert T_WEEK % TIME_CHUNK_DAYS == 0
    spec = band_spec("indices.ndvi")
    assert spec.chunks(7) == (7, 128, 128)
    assert band_spec("geotessera").chunks(7) == (1, 128, 128, 128)
    assert band_spec("geotessera").shape == (256, 1 << 21, 1 << 22, 128)


def test_round_trip_lands_at_computed_positions(writer: CubeWriter, data_dir: Path) -> None:
    # 3 rows x 6 columns straddling the x block edge; two non-contiguous days.
    tslots = np.array([T_WEEK + 1, T_WEEK + 4])
    lat_q0, lng_q0 = Y0 + 10, X0 + SIDE - 3
    vals = _values(2, 3, 6)
    with writer.transaction("2024-03-14|b7.13000.22000", {"items": ["S2A_x"]}) as tx:
        tx.write("indices.ndvi", tslots, lat_q0, lng_q0, vals)
    assert tx.committed
    assert tx.snapshot_id is not None

    reader = CubeReader(data_dir)
    assert reader.snapshot_id == tx.snapshot_id
    assert reader.snapshot.metadata["partition_key"] == "2024-03-14|b7.13000.22000"
    assert reader.snapshot.metadata["items"] == ["S2A_x"]

    # Cell series of one cell: exactly the two written days.
    slots, series = reader.cell_series("indices.ndvi", lat_q0 + 2, lng_q0 + 4)
    np.testing.assert_array_equal(slots, tslots)
    np.testing.assert_array_equal(series, vals[:, 2, 4])
    assert reader.cell_series("indices.ndvi", lat_q0 + 2, lng_q0 + 4, t0=T_WEEK + 2)[
        0
    ].tolist() == [T_WEEK + 4]
    # A neighbouring cell outside the write has no series.
    assert reader.cell_series("indices.ndvi", lat_q0 - 1, lng_q0)[0].size == 0

    # Region read with one cell of margin: coordinates are cell centres.
    da = reader.read_region("indices.ndvi", lat_q0 - 1, lat_q0 + 4, lng_q0 - 1, lng_q0 + 7)
    assert da.dims == ("tslot", "lat", "lng")
    assert da["tslot"].values.tolist() == tslots.tolist()
    assert da["date"].values[0] == np.datetime64("2024-03-15")
    lat_c, lng_c = q_center(np.arange(lat_q0 - 1, lat_q0 + 4), np.arange(lng_q0 - 1, lng_q0 + 7))
    np.testing.assert_allclose(da["lat"].values, lat_c)
    np.testing.assert_allclose(da["lng"].values, lng_c)
    np.testing.assert_array_equal(da.values[:, 1:4, 1:7], vals)
    assert np.isnan(da.values[:, 0, :]).all()
    assert np.isnan(da.values[:, :, 0]).all()
    assert da.attrs["snapshot_id"] == reader.snapshot_id
    # Dense read returns every slot of the range, the unwritten ones as NaN.
    dense = reader.read_region(
        "indices.ndvi", lat_q0, lat_q0 + 3, lng_q0, lng_q0 + 6, T_WEEK, T_WEEK + 7, drop_empty=False
    )
    assert dense.sizes["tslot"] == 7
    assert np.isnan(dense.values[0]).all()
    np.testing.assert_array_equal(dense.values[4], vals[1])


def test_xarray_opens_through_icechunk_in_the_right_place(
    writer: CubeWriter, data_dir: Path
) -> None:
    vals = _values(1, 2, 2, seed=3)
    writer.write_region("indices.ndwi", [T_WEEK], Y0 + 5, X0 + 7, vals, partition_key="p")

    import xarray as xr  # imported here: keeps spawned test workers light

    # The documented two lines.
    session = ic.Repository.open(open_storage(data_dir / "cube.icechunk")).readonly_session("main")
    ds = xr.open_zarr(session.store, group="indices", chunks=None, consolidated=False)

    assert ds["ndwi"].dims == ("tslot", "y", "x")
    assert ds["ndwi"].shape == (1 << 16, 1 << 21, 1 << 22)
    assert ds["ndwi"].attrs["grid_mapping"] == "spatial_ref"
    np.testing.assert_array_equal(
        ds["ndwi"][T_WEEK, Y0 + 5 : Y0 + 7, X0 + 7 : X0 + 9].values, vals[0]
    )
    ref = ds["spatial_ref"].attrs
    assert "WGS 84" in ref["crs_wkt"]
    gt = [float(v) for v in ref["GeoTransform"].split()]
    assert gt == pytest.approx(list(geotransform()))
    # Pixel-edge origin, rows northward: the centre of (y, x) is gt applied at +0.5.
    lat, lng = q_center(Y0 + 5, X0 + 7)
    assert gt[3] + (Y0 + 5 + 0.5) * gt[5] == pytest.approx(lat, abs=1e-9)
    assert gt[0] + (X0 + 7 + 0.5) * gt[1] == pytest.approx(lng, abs=1e-9)
    assert gt[5] == pytest.approx(LAT_STEP)
    assert gt[1] == pytest.approx(LNG_STEP)
    # No full-lattice coordinate arrays were written.
    assert "y" not in ds.coords
    assert "x" not in ds.coords


def test_only_touched_chunks_exist(writer: CubeWriter, data_dir: Path) -> None:
    vals = _values(2, 4, 4)
    vals[1] = np.nan  # the second slot carries nothing
    # Slot T_WEEK + 6 is the last day of a chunk; T_WEEK + 7 starts the next one.
    with writer.transaction("p") as tx:
        tx.write("indices.evi", [T_WEEK + 6, T_WEEK + 7], Y0 + SIDE - 2, X0, vals)
    reader = CubeReader(data_dir)
    tc = T_WEEK // 7
    got = {tuple(c) for c in reader.chunks("indices.evi").tolist()}
    # Only the first slot has values: it straddles two y blocks in one time chunk.
    assert got == {(tc, BY, BX), (tc, BY + 1, BX)}
    assert reader.chunks("indices.ndvi").shape == (0, 3)

    # Writing fill values over a chunk removes it (write_empty_chunks=False).
    nan = np.full((1, 2, 4), np.nan, dtype=np.float32)
    with writer.transaction("p-clear") as tx:
        tx.write("indices.evi", [T_WEEK + 6], Y0 + SIDE - 2, X0, nan)
    got = {tuple(c) for c in CubeReader(data_dir).chunks("indices.evi").tolist()}
    assert got == {(tc, BY + 1, BX)}


def test_aborted_transaction_leaves_no_change(writer: CubeWriter, data_dir: Path) -> None:
    before = CubeReader(data_dir).snapshot_id
    opened: list[CubeTransaction] = []

    def fail_midway() -> None:
        with writer.transaction("p") as tx:
            opened.append(tx)
            tx.write("indices.ndvi", [T_WEEK], Y0, X0, _values(1, 4, 4))
            raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom"):
        fail_midway()
    tx = opened[0]
    reader = CubeReader(data_dir)
    assert reader.snapshot_id == before
    assert reader.chunks("indices.ndvi").size == 0
    assert tx.snapshot_id is None
    with pytest.raises(TransactionClosed):
        tx.write("indices.ndvi", [T_WEEK], Y0, X0, _values(1, 4, 4))


def test_rematerialising_is_idempotent(writer: CubeWriter, data_dir: Path) -> None:
    vals = _values(3, 8, 8, seed=7)

    def materialise() -> str:
        with writer.transaction("2024-03-14|b7.13000.22000") as tx:
            tx.write("indices.ndvi", [T_WEEK, T_WEEK + 2, T_WEEK + 5], Y0, X0, vals)
            tx.write("s2.clear", [T_WEEK, T_WEEK + 2, T_WEEK + 5], Y0, X0, np.full((3, 8, 8), 2))
        assert tx.snapshot_id is not None
        return tx.snapshot_id

    first, second = materialise(), materialise()
    assert first != second  # a re-run commits (allowed), with the same contents
    a, b = CubeReader(data_dir, snapshot_id=first), CubeReader(data_dir, snapshot_id=second)
    for band in ("indices.ndvi", "s2.clear"):
        np.testing.assert_array_equal(
            a.read_region(band, Y0, Y0 + SIDE, X0, X0 + SIDE).values,
            b.read_region(band, Y0, Y0 + SIDE, X0, X0 + SIDE).values,
        )
        np.testing.assert_array_equal(a.chunks(band), b.chunks(band))
    # A transaction that writes nothing commits nothing.
    with writer.transaction("empty") as tx:
        pass
    assert not tx.committed
    assert tx.snapshot_id == second
    assert writer.list_snapshots()[0].id == second


_BARRIER: Any = None


def _init_worker(barrier: Any) -> None:
    global _BARRIER
    _BARRIER = barrier


def _commit_partition(data_dir: str, block_x: int) -> str:
    writer = CubeWriter(data_dir)
    vals = np.full((1, SIDE, SIDE), float(block_x % 100), dtype=np.float32)
    with writer.transaction(f"2024-03-14|b7.{BY}.{block_x}") as tx:
        tx.write("indices.ndvi", [T_WEEK], Y0, block_x * SIDE, vals)
        _BARRIER.wait(timeout=60)  # both have written; both commit at once
    assert tx.snapshot_id is not None
    return tx.snapshot_id


def test_two_processes_commit_partitions_concurrently(writer: CubeWriter, data_dir: Path) -> None:
    ctx = mp.get_context("spawn")
    barrier = ctx.Barrier(2)
    pool = ctx.Pool(2, initializer=_init_worker, initargs=(barrier,))
    try:
        ids = pool.starmap(_commit_partition, [(str(data_dir), BX), (str(data_dir), BX + 1)])
    finally:
        # close + join lets the workers exit on their own; Pool.__exit__ terminates
        # them with SIGTERM, which a worker holding icechunk's runtime threads
        # occasionally never acted on (seen once: the test hung in join)
        pool.close()
        pool.join()
    assert len(set(ids)) == 2
    reader = CubeReader(data_dir)
    assert reader.cell_series("indices.ndvi", Y0 + 5, X0 + 5)[1].tolist() == [float(BX % 100)]
    assert reader.cell_series("indices.ndvi", Y0 + 5, X0 + SIDE + 5)[1].tolist() == [
        float((BX + 1) % 100)
    ]
    keys = {s.metadata.get("partition_key") for s in reader.list_snapshots()}
    assert {f"2024-03-14|b7.{BY}.{BX}", f"2024-03-14|b7.{BY}.{BX + 1}"} <= keys


def test_same_chunk_changed_concurrently_is_a_typed_conflict(
    writer: CubeWriter, data_dir: Path
) -> None:
    def overlapped() -> None:
        with writer.transaction("a") as outer:
            outer.write("indices.ndvi", [T_WEEK], Y0, X0, _values(1, 2, 2, seed=1))
            # Another run of an overlapping partition commits first.
            writer.write_region(
                "indices.ndvi", [T_WEEK], Y0, X0, _values(1, 2, 2, seed=2), partition_key="b"
            )

    with pytest.raises(CommitConflict) as err:
        overlapped()
    assert err.value.code == "commit_conflict"
    # Different chunks rebase cleanly (same process, same base snapshot).
    with writer.transaction("c") as outer:
        outer.write("indices.ndvi", [T_WEEK], Y0, X0 + SIDE, _values(1, 2, 2, seed=3))
        writer.write_region(
            "indices.ndvi", [T_WEEK], Y0 + SIDE, X0, _values(1, 2, 2), partition_key="d"
        )
    assert outer.committed
    assert CubeReader(data_dir).chunks("indices.ndvi").shape == (3, 3)


_KILLED_WRITER = textwrap.dedent(
    """
    import sys, time
    import numpy as np
    from store.cube import CubeWriter
    data_dir, flag, y0, x0, t = sys.argv[1], sys.argv[2], *map(int, sys.argv[3:6])
    writer = CubeWriter(data_dir)
    with writer.transaction("killed") as tx:
        for i in range(4):
            tx.write("indices.ndvi", [t + i], y0, x0, np.full((1, 128, 128), 0.5, np.float32))
        open(flag, "w").close()
        time.sleep(120)
    """
)


def test_sigkill_mid_transaction_then_rerun(
    writer: CubeWriter, data_dir: Path, tmp_path: Path
) -> None:
    before = CubeReader(data_dir).snapshot_id
    flag = tmp_path / "written"
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    args = [str(data_dir), str(flag), str(Y0), str(X0), str(T_WEEK)]
    proc = subprocess.Popen([sys.executable, "-c", _KILLED_WRITER, *args], env=env, cwd=REPO_ROOT)
    try:
        deadline = time.monotonic() + 60
        while not flag.exists():
            assert proc.poll() is None, "writer exited early"
            assert time.monotonic() < deadline, "writer never reached the middle"
            time.sleep(0.05)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == -signal.SIGKILL

    reader = CubeReader(data_dir)
    assert reader.snapshot_id == before  # the last committed snapshot is intact
    assert reader.chunks("indices.ndvi").size == 0
    # A rerun (new writer, new process state) completes; the lock was released.
    rerun = CubeWriter(data_dir)
    sid = rerun.write_region(
        "indices.ndvi",
        [T_WEEK],
        Y0,
        X0,
        np.full((1, 4, 4), 0.5, np.float32),
        partition_key="killed",
    )
    assert CubeReader(data_dir).snapshot_id == sid != before
    assert CubeReader(data_dir).cell_series("indices.ndvi", Y0, X0)[1].tolist() == [0.5]


def test_time_travel_by_commit_time(writer: CubeWriter, data_dir: Path) -> None:
    ones = np.ones((1, 2, 2), np.float32)
    old = writer.write_region("s1.vv", [T_WEEK], Y0, X0, ones, partition_key="p")
    time.sleep(0.02)
    between = dt.datetime.now(dt.UTC)
    time.sleep(0.02)
    new = writer.write_region("s1.vv", [T_WEEK], Y0, X0, ones * 2, partition_key="p")

    snaps = writer.list_snapshots()
    assert [s.id for s in snaps[:2]] == [new, old]
    assert snaps[0].written_at > between > snaps[1].written_at
    found = writer.snapshot_at(between)
    assert found is not None
    assert found.id == old
    # Naive datetimes are UTC.
    naive = between.replace(tzinfo=None)
    assert writer.snapshot_at(naive) == found

    assert CubeReader(data_dir, as_of=between).cell_series("s1.vv", Y0, X0)[1].tolist() == [1.0]
    assert CubeReader(data_dir, snapshot_id=old).snapshot_id == old
    assert CubeReader(data_dir).cell_series("s1.vv", Y0, X0)[1].tolist() == [2.0]
    assert writer.snapshot_at(dt.datetime(2000, 1, 1, tzinfo=dt.UTC)) is None
    with pytest.raises(SnapshotNotFound):
        CubeReader(data_dir, as_of=dt.datetime(2000, 1, 1, tzinfo=dt.UTC))
    with pytest.raises(SnapshotNotFound):
        CubeReader(data_dir, snapshot_id="0" * 20)


def test_reader_is_read_only(writer: CubeWriter, data_dir: Path) -> None:
    writer.write_region("indices.ndvi", [T_WEEK], Y0, X0, _values(1, 2, 2), partition_key="p")
    reader = CubeReader(data_dir)
    assert reader.session.read_only
    with pytest.raises(ic.IcechunkError, match="read-only"):
        reader.array("indices.ndvi")[T_WEEK, Y0, X0] = 0.0
    with pytest.raises(CubeNotFound):
        CubeReader(data_dir.parent / "nowhere")


def test_limits_and_typed_errors(writer: CubeWriter, data_dir: Path) -> None:
    writer.write_region("indices.ndvi", [T_WEEK], Y0, X0, _values(1, 8, 8), partition_key="p")
    small = CubeReader(data_dir, max_region_elements=7 * 100)  # one time chunk of 10 x 10
    assert small.read_region("indices.ndvi", Y0, Y0 + 10, X0, X0 + 10).shape == (1, 10, 10)
    with pytest.raises(RegionTooLarge) as err:
        small.read_region("indices.ndvi", Y0, Y0 + 10, X0, X0 + 11)
    assert err.value.code == "region_too_large"
    with pytest.raises(RegionTooLarge):
        small.read_region("indices.ndvi", Y0, Y0 + 1, X0, X0 + 1, 0, 701, drop_empty=False)

    reader = CubeReader(data_dir)
    with pytest.raises(RegionOutOfBounds):
        reader.read_region("indices.ndvi", Y0, Y0, X0, X0 + 1)
    with pytest.raises(RegionOutOfBounds):
        reader.cell_series("indices.ndvi", 1 << 21, 0)
    with pytest.raises(RegionOutOfBounds):
        reader.cell_series("indices.ndvi", Y0, X0, t0=5, t1=5)
    with pytest.raises(UnknownBand):
        reader.cell_series("indices.nope", Y0, X0)
    with writer.transaction("bad") as tx:
        with pytest.raises(InvalidWrite):  # shape mismatch
            tx.write("indices.ndvi", [T_WEEK, T_WEEK + 1], Y0, X0, _values(1, 2, 2))
        with pytest.raises(InvalidWrite):  # unsorted tslots
            tx.write("indices.ndvi", [T_WEEK + 1, T_WEEK], Y0, X0, _values(2, 2, 2))
        with pytest.raises(InvalidWrite):  # int8 overflow
            tx.write("geotessera", [54], Y0, X0, np.full((1, 1, 1, 128), 300))
        with pytest.raises(RegionOutOfBounds):
            tx.write("indices.ndvi", [T_WEEK], (1 << 21) - 1, X0, _values(1, 2, 2))
        with pytest.raises(RegionOutOfBounds):
            tx.write("indices.ndvi", [1 << 16], Y0, X0, _values(1, 2, 2))
    assert not tx.committed


def test_bbox_block_and_tessera_reads(writer: CubeWriter, data_dir: Path) -> None:
    emb = np.random.default_rng(1).integers(-127, 128, size=(1, 2, 3, 128)).astype(np.int8)
    scale = np.array([[[0.5, np.nan, np.inf], [0.25, 0.125, 1.0]]], np.float32)
    bits = np.arange(2 * 3 * 16, dtype=np.uint8).reshape(1, 2, 3, 16)
    with writer.transaction("2024") as tx:
        tx.write("geotessera", [2024 - 1970], Y0 + 1, X0 + 1, emb)
        tx.write("geotessera.scale", [2024 - 1970], Y0 + 1, X0 + 1, scale)
        tx.write("geotessera.bin128", [2024 - 1970], Y0 + 1, X0 + 1, bits)
        tx.write("indices.ndvi", [T_WEEK], Y0, X0, _values(1, SIDE, SIDE))
    reader = CubeReader(data_dir)
    vec, s = reader.cell_vector(Y0 + 2, X0 + 2, 2024)
    assert vec.dtype == np.int8
    np.testing.assert_array_equal(vec, emb[0, 1, 1])
    assert s == 0.125
    assert np.isnan(reader.cell_vector(Y0 + 1, X0 + 2, 2024)[1])  # water
    assert reader.cell_vector(Y0 + 1, X0 + 3, 2024)[1] == np.inf  # no data
    assert reader.cell_vector(Y0 + 50, X0 + 50, 2024)[1] == np.inf  # never written
    multi, scales = reader.cell_multi_year(Y0 + 2, X0 + 2, [2024, 2023])
    assert multi.shape == (256,)
    assert scales.tolist()[0] == 0.125
    assert scales[1] == np.inf
    slots, vecs = reader.cell_series("geotessera", Y0 + 1, X0 + 1)
    assert slots.tolist() == [54]
    assert vecs.shape == (1, 128)
    da = reader.read_region("geotessera.bin128", Y0 + 1, Y0 + 3, X0 + 1, X0 + 4)
    assert da.dims == ("tslot", "lat", "lng", "byte")
    assert da["year"].values.tolist() == [2024]
    np.testing.assert_array_equal(da.values, bits)

    block = Block(7, BY, BX)
    whole = reader.read_block("indices.ndvi", block)
    assert whole.shape == (1, SIDE, SIDE)
    assert np.isfinite(whole.values).all()
    lat0, lng0 = q_center(Y0 + 10, X0 + 20)
    lat1, lng1 = q_center(Y0 + 12, X0 + 25)
    bbox = (lat0 - 1e-7, lng0 - 1e-7, lat1 + 1e-7, lng1 + 1e-7)
    assert bbox_q_range(*bbox) == (Y0 + 10, Y0 + 13, X0 + 20, X0 + 26)
    sub = reader.read_bbox("indices.ndvi", bbox)
    assert sub["lat_q"].values.tolist() == [Y0 + 10, Y0 + 11, Y0 + 12]
    np.testing.assert_array_equal(sub.values, whole.values[:, 10:13, 20:26])


def test_open_storage_local_and_s3_without_network(tmp_path: Path) -> None:
    s3 = open_storage("s3://some-bucket/cubes/demo")
    assert "some-bucket" in repr(s3)
    assert "cubes/demo" in repr(s3)
    assert isinstance(open_storage(tmp_path / "c"), ic.Storage)
    assert isinstance(open_storage(f"file://{tmp_path}/c"), ic.Storage)
    with pytest.raises(UnsupportedStorage):
        open_storage("ftp://x/y")
    with pytest.raises(UnsupportedStorage):
        open_storage("s3://")


def test_band_registry_is_complete() -> None:
    assert set(BANDS) >= {
        "indices.ndvi", "indices.ndwi", "indices.ndmi", "indices.lswi", "indices.evi",
        "s1.vv", "s1.vh", "indices.vh_vv", "geotessera", "geotessera.bin128",
    }  # fmt: skip
    for spec in BANDS.values():
        assert spec.dims[:3] == ("tslot", "y", "x")
        assert spec.tempo in ("day", "year")
