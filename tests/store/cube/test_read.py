"""The reader's chunk fetch and decode path gives what zarr gives."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from store.cube import CubeReader


@pytest.fixture(scope="module")
def reader(tiny_store: Any) -> CubeReader:
    return CubeReader(tiny_store.data)


def test_chunks_read_through_zarr_when_codecs_are_not_plain(
    tiny_store: Any, reader: CubeReader, monkeypatch: pytest.MonkeyPatch
) -> None:
    coords = reader.chunks("indices.ndvi")[:5]
    keys = [(int(c[0]), int(c[1]), int(c[2])) for c in coords]
    direct = reader.read_chunks("indices.ndvi", keys)
    plain = CubeReader(tiny_store.data)
    monkeypatch.setattr(plain, "codec", lambda band: None)  # as if the codecs were not plain
    via_zarr = plain.read_chunks("indices.ndvi", keys)
    for a, b in zip(direct, via_zarr, strict=True):
        assert a is not None
        assert b is not None
        np.testing.assert_array_equal(a, b)


def test_chunks_fetched_in_batched_store_calls(
    tiny_store: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A read of many chunks hands them to the store a group at a time, not one ``get`` each."""
    from store.cube.codec import FETCH_GROUP

    reader = CubeReader(tiny_store.data)
    coords = reader.chunks("indices.ndvi")
    keys = [(int(c[0]), int(c[1]), int(c[2])) for c in coords]
    expected = [
        np.asarray(a) for a in CubeReader(tiny_store.data).read_chunks("indices.ndvi", keys)
    ]
    reader.codec("indices.ndvi")  # the array's metadata read before counting
    store_type = type(reader.session.store)
    calls = {"get": 0, "get_partial_values": 0}
    for name in calls:
        real = getattr(store_type, name)

        def spy(self: Any, *a: Any, _real: Any = real, _name: str = name, **k: Any) -> Any:
            calls[_name] += 1
            return _real(self, *a, **k)

        monkeypatch.setattr(store_type, name, spy)
    got = reader.read_chunks("indices.ndvi", keys)
    assert calls == {"get": 0, "get_partial_values": -(-len(keys) // FETCH_GROUP)}
    for a, b in zip(got, expected, strict=True):
        assert a is not None
        np.testing.assert_array_equal(a, b)


def test_absent_chunk_reads_as_none_among_stored_ones(tiny_store: Any) -> None:
    reader = CubeReader(tiny_store.data)
    coords = reader.chunks("indices.ndvi")[:3]
    keys = [(int(c[0]), int(c[1]), int(c[2])) for c in coords]
    stored = {tuple(int(v) for v in c) for c in reader.chunks("indices.ndvi")}
    absent = next(
        (t, y, x)
        for t, y, x in ((k[0] + d, k[1], k[2]) for k in keys for d in range(1, 99))
        if (t, y, x) not in stored
    )
    got = reader.read_chunks("indices.ndvi", [*keys, absent])
    assert got[-1] is None
    assert all(a is not None for a in got[:-1])
