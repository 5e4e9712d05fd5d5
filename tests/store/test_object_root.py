"""Where the cube lives: the data directory, or the object-storage root the environment names."""

from __future__ import annotations

from pathlib import Path

import pytest

from store.errors import UnsupportedStorage
from store.snapshots import OBJECT_STORE_ENV, cube_location, is_object_storage


def test_the_cube_is_in_the_data_directory_by_default(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(OBJECT_STORE_ENV, raising=False)
    assert cube_location(tmp_path) == str(tmp_path / "cube.icechunk")
    assert not is_object_storage(cube_location(tmp_path))


def test_an_object_root_moves_the_cube(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(OBJECT_STORE_ENV, "s3://bucket/some/prefix/")
    assert cube_location(tmp_path) == "s3://bucket/some/prefix/cube.icechunk"
    assert is_object_storage(cube_location(tmp_path))


@pytest.mark.parametrize("root", ["gs://bucket/x", "s3://", "/local/path", "s3:///prefix"])
def test_a_bad_object_root_is_a_typed_error(
    root: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(OBJECT_STORE_ENV, root)
    with pytest.raises(UnsupportedStorage, match=OBJECT_STORE_ENV):
        cube_location(tmp_path)
