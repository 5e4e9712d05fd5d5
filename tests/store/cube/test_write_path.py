"""The writer's chunk-by-chunk write path stores exactly what zarr's setitem stores."""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import zarr
from zarr.codecs import BloscCodec, ZstdCodec
from zarr.core.buffer import default_buffer_prototype

import store.cube as cube
import store.cube.codec as cube_codec
import store.cube.layout as layout
import store.cube.transaction as cube_transaction
from store.cube import CubeReader, CubeWriter, band_spec

SIDE = 128  # default block level 7
Y0, X0 = 13_000 * SIDE, 22_000 * SIDE
T0 = 19_796  # a Thursday: start of a time chunk


def _raw_chunks(data_dir: Path, band: str) -> dict[str, bytes]:
    """Every stored chunk of a band as raw (encoded) bytes, by key."""
    reader = CubeReader(data_dir)
    spec = band_spec(band)
    arr = reader.array(band)
    store = reader.session.store

    async def fetch(keys: list[str]) -> list[Any]:
        proto = default_buffer_prototype()
        return list(await asyncio.gather(*(store.get(k, proto) for k in keys)))

    keys = [
        f"{spec.path}/{arr.metadata.encode_chunk_key(tuple(int(i) for i in c))}"
        for c in reader.chunks(band)
    ]
    values = asyncio.run(fetch(keys))
    return {k: v.to_bytes() for k, v in zip(keys, values, strict=True)}


def _writes(rng: np.random.Generator) -> list[tuple[str, int, int, int, np.ndarray]]:
    """A partial write over 2 x 3 chunks, an overwrite of part of it, a whole-chunk write, an all-fill clear."""
    ndvi = rng.uniform(-1, 1, (7, 142, 231)).astype(np.float32)
    ndvi[2:5] = np.nan  # days without a scene
    again = rng.uniform(-1, 1, (7, 40, 50)).astype(np.float32)
    whole = rng.uniform(-1, 1, (7, SIDE, SIDE)).astype(np.float32)
    clear = rng.integers(0, 3, (7, 142, 231), dtype=np.uint8)
    return [
        ("indices.ndvi", T0, Y0 + 30, X0 + 70, ndvi),
        ("indices.ndvi", T0, Y0 + 100, X0 + 100, again),  # read-modify-write of stored chunks
        ("indices.ndvi", T0 + 7, Y0, X0, whole),  # exactly one chunk: no read
        ("indices.ndvi", T0 + 7, Y0, X0, np.full((7, SIDE, SIDE), np.nan, np.float32)),  # deleted
        ("s2.clear", T0, Y0 + 30, X0 + 70, clear),
        ("s2.clear", T0, Y0 + 30, X0 + 70, np.zeros_like(clear)),  # all fill again: chunks removed
        ("s2.clear", T0, Y0 + 30, X0 + 70, clear),
    ]


def _ingest(
    data_dir: Path, writes: list[tuple[str, int, int, int, np.ndarray]], one_tx: bool = False
) -> None:
    writer = CubeWriter(data_dir)
    if one_tx:  # later writes read-modify-write chunks not stored yet
        with writer.transaction("all") as tx:
            for band, t, y, x, values in writes:
                tx.write(band, np.arange(t, t + values.shape[0]), y, x, values)
        return
    for i, (band, t, y, x, values) in enumerate(writes):
        with writer.transaction(f"p{i}") as tx:
            tx.write(band, np.arange(t, t + values.shape[0]), y, x, values)


@pytest.mark.parametrize("one_tx", [False, True], ids=["tx-per-write", "one-tx"])
@pytest.mark.parametrize("old_codecs", [False, True], ids=["zstd", "blosc-store"])
def test_chunk_path_stores_the_bytes_zarr_stores(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, old_codecs: bool, one_tx: bool
) -> None:
    if old_codecs:  # a store created before the codec change: Blosc on float day bands
        monkeypatch.setattr(
            layout,
            "_compressor",
            lambda spec: (
                BloscCodec(cname="zstd", clevel=3, shuffle="shuffle")
                if np.dtype(spec.dtype).kind == "f"
                else ZstdCodec(level=3)
            ),
        )
    writes = _writes(np.random.default_rng(3))
    fast, slow = tmp_path / "fast", tmp_path / "slow"
    calls: list[str] = []
    chunked = cube.CubeTransaction._stage

    def spy(self: Any, codec: Any, *args: Any) -> None:
        calls.append(codec.path)
        chunked(self, codec, *args)

    monkeypatch.setattr(cube.CubeTransaction, "_stage", spy)
    _ingest(fast, writes, one_tx)
    assert len(calls) == len(writes)  # every write took the chunk path
    with monkeypatch.context() as m:  # zarr's own setitem for every write
        m.setattr(
            cube_codec.ChunkCodec, "__init__", _unsupported_init(cube_codec.ChunkCodec.__init__)
        )
        _ingest(slow, writes, one_tx)
    assert len(calls) == len(writes)  # ... and none here
    for band in ("indices.ndvi", "s2.clear"):
        got, want = _raw_chunks(fast, band), _raw_chunks(slow, band)
        assert got  # chunks were stored
        assert got.keys() == want.keys()  # the same ones (all-fill ones removed)
        assert got == want  # byte for byte
        codec = zarr.open_array(
            CubeReader(fast).session.store, path=band_spec(band).path, mode="r"
        ).metadata.codecs[-1]
        assert isinstance(codec, BloscCodec if old_codecs and band != "s2.clear" else ZstdCodec)
    # and the values read back are the last ones written
    r = CubeReader(fast)
    ndvi = r.read_region(
        "indices.ndvi", Y0, Y0 + SIDE * 2, X0, X0 + SIDE * 3, T0, T0 + 14, drop_empty=False
    )
    expect = np.full((14, SIDE * 2, SIDE * 3), np.nan, np.float32)
    expect[:7, 30:172, 70:301] = writes[0][4]
    expect[:7, 100:140, 100:150] = writes[1][4]
    np.testing.assert_array_equal(ndvi.values, expect)
    assert ((r.chunks("indices.ndvi")[:, 0]) != (T0 + 7) // 7).all()  # the cleared chunk is gone


def test_a_zarr_path_write_sees_the_chunks_of_its_transaction(tmp_path: Path) -> None:
    rng = np.random.default_rng(8)
    first = rng.uniform(-1, 1, (7, 60, 60)).astype(np.float32)
    second = rng.uniform(-1, 1, (2, 20, 20)).astype(np.float32)
    with CubeWriter(tmp_path).transaction("mixed") as tx:
        tx.write("indices.ndvi", np.arange(T0, T0 + 7), Y0 + 10, X0 + 10, first)  # chunk path
        # non-contiguous days go through Zarr, which reads the chunk back from the store
        tx.write("indices.ndvi", [T0 + 1, T0 + 5], Y0 + 30, X0 + 30, second)
    got = CubeReader(tmp_path).read_region(
        "indices.ndvi", Y0 + 10, Y0 + 70, X0 + 10, X0 + 70, T0, T0 + 7, drop_empty=False
    )
    expect = first.copy()
    expect[[1, 5], 20:40, 20:40] = second
    np.testing.assert_array_equal(got.values, expect)


def test_a_failed_transaction_stores_none_of_its_chunks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    writer = CubeWriter(tmp_path)
    with writer.transaction("ok") as tx:
        tx.write("indices.ndvi", np.arange(T0, T0 + 7), Y0, X0, np.ones((7, 8, 8), np.float32))
    before = _raw_chunks(tmp_path, "indices.ndvi")
    puts: list[Any] = []
    put_all = cube_transaction.put_many

    async def spy(store: Any, items: Any) -> None:
        puts.append(items)
        await put_all(store, items)

    monkeypatch.setattr(cube_transaction, "put_many", spy)
    sessions: list[Any] = []

    def fail_after_writing() -> None:
        with writer.transaction("fails") as tx:
            zeros = np.zeros((7, 8, 8), np.float32)
            tx.write("indices.ndvi", np.arange(T0, T0 + 7), Y0, X0, zeros)
            sessions.append(tx._session)
            raise RuntimeError("the asset failed after writing")

    with pytest.raises(RuntimeError):
        fail_after_writing()
    assert puts == []  # the chunks never reached the store's session
    assert not sessions[0].has_uncommitted_changes
    assert _raw_chunks(tmp_path, "indices.ndvi") == before


def _unsupported_init(init: Any) -> Any:
    def wrapped(self: Any, *args: Any, **kwargs: Any) -> None:
        init(self, *args, **kwargs)
        self.supported = False

    return wrapped


def test_vector_band_writes_through_the_chunk_path(tmp_path: Path) -> None:
    rng = np.random.default_rng(5)
    vec = rng.integers(-127, 128, (1, 20, 30, 128), dtype=np.int8)
    writer = CubeWriter(tmp_path)
    with writer.transaction("2024") as tx:
        tx.write("geotessera", [54], Y0 + 120, X0 + 5, vec)  # straddles two chunks in y
    r = CubeReader(tmp_path)
    got = r.read_region("geotessera", Y0 + 120, Y0 + 140, X0 + 5, X0 + 35, 54, 55)
    np.testing.assert_array_equal(got.values, vec)
    assert len(r.chunks("geotessera")) == 2


def test_a_repository_recreated_at_the_same_path_gets_its_layout(tmp_path: Path) -> None:
    data = tmp_path / "data"
    values = np.ones((7, 4, 4), np.float32)
    with CubeWriter(data).transaction("a") as tx:
        tx.write("indices.ndvi", np.arange(T0, T0 + 7), Y0, X0, values)
    shutil.rmtree(data)  # same path, new repository: the in-process layout cache must not match
    with CubeWriter(data).transaction("b") as tx:
        tx.write("indices.ndvi", np.arange(T0, T0 + 7), Y0, X0, 2 * values)
    got = CubeReader(data).read_region("indices.ndvi", Y0, Y0 + 4, X0, X0 + 4)
    np.testing.assert_array_equal(got.values, 2 * values)


def test_a_held_write_is_the_values_at_the_call_not_at_the_commit(tmp_path: Path) -> None:
    """Writes are encoded at the end of the transaction: a caller that reuses its buffer after
    ``tx.write`` (as a week loop does) must not change what is stored."""
    rng = np.random.default_rng(9)
    values = rng.uniform(-1, 1, (7, 40, 40)).astype(np.float32)
    stored = values.copy()
    with CubeWriter(tmp_path).transaction("reuse") as tx:
        tx.write("indices.ndvi", np.arange(T0, T0 + 7), Y0 + 5, X0 + 5, values)
        values[:] = 0.25  # the caller's buffer, reused before the commit
    got = CubeReader(tmp_path).read_region(
        "indices.ndvi", Y0 + 5, Y0 + 45, X0 + 5, X0 + 45, T0, T0 + 7, drop_empty=False
    )
    np.testing.assert_array_equal(got.values, stored)


@pytest.mark.parametrize(
    ("dy", "dx", "shape"),
    [(100, 60, (7, 150, 140)), (0, 0, (7, SIDE, SIDE))],  # partial chunks; one whole chunk
)
def test_a_write_without_copy_stores_the_same_chunks(
    tmp_path: Path, dy: int, dx: int, shape: tuple[int, int, int]
) -> None:
    """``copy=False`` (the ingest's weeks) holds the caller's array instead of a copy: the
    stored chunks and summaries are the bytes a copying write stores, and the caller's
    (read-only) arrays are left as they were."""
    rng = np.random.default_rng(11)
    values = rng.uniform(-1, 1, shape).astype(np.float32)
    values[:, :20] = np.nan
    flags = (rng.uniform(0, 1, values.shape) > 0.3).astype(np.uint8)
    before = values.copy(), flags.copy()
    values.flags.writeable = False
    flags.flags.writeable = False
    t = np.arange(T0, T0 + 7)
    for name, copy in (("copy", True), ("held", False)):
        with CubeWriter(tmp_path / name).transaction("p") as tx:
            tx.write("indices.ndvi", t, Y0 + dy, X0 + dx, values, copy=copy)
            tx.write("s2.clear", t, Y0 + dy, X0 + dx, flags, copy=copy)
    np.testing.assert_array_equal(values, before[0])
    np.testing.assert_array_equal(flags, before[1])
    for band in ("indices.ndvi", "s2.clear"):
        assert _raw_chunks(tmp_path / "held", band) == _raw_chunks(tmp_path / "copy", band)
    assert _raw_prefix(tmp_path / "held", "summaries/") == _raw_prefix(
        tmp_path / "copy", "summaries/"
    )


def _raw_prefix(data_dir: Path, prefix: str) -> dict[str, bytes]:
    """Every stored object under a prefix (the summary chunks among them), by key."""
    store = CubeReader(data_dir).session.store

    async def fetch() -> dict[str, bytes]:
        proto = default_buffer_prototype()
        keys = [k async for k in store.list_prefix(prefix) if "/c/" in k]
        got = await asyncio.gather(*(store.get(k, proto) for k in keys))
        return {k: b.to_bytes() for k, b in zip(keys, got, strict=True) if b is not None}

    out = asyncio.run(fetch())
    assert out  # the write summarised something
    return out


@pytest.mark.parametrize(
    ("cells", "fill"),
    [
        ({}, True),
        ({(0, 0, 0): 1.5}, False),
        ({(6, 127, 127): np.inf}, False),
        ({(3, 5, 9): -np.inf}, False),
        ({(2, 1, 1): -0.0}, False),
    ],
)
def test_a_chunk_is_fill_only_where_every_value_is_nan(
    tmp_path: Path, cells: dict[tuple[int, int, int], float], fill: bool
) -> None:
    writer = CubeWriter(tmp_path)
    with writer.transaction("open") as tx:
        codec = tx._codec(band_spec("indices.ndvi"))
    chunk = np.full(codec.chunks, np.nan, np.float32)
    for (d, y, x), v in cells.items():
        chunk[d, y, x] = v
    assert codec.is_fill(chunk) is fill
