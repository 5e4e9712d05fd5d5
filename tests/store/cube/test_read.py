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
