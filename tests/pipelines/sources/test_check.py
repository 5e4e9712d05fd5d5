"""check_readable: corrupt and missing files become Skips."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from pipelines.sources import AssetRef, check_readable
from tests.pipelines.sources.conftest import write_tif


def _ref(href: Path, shape: tuple[int, int] | None = (8, 8)) -> AssetRef:
    return AssetRef(
        href=str(href),
        role="red",
        key="B04",
        band="B04",
        scale=1e-4,
        offset=-0.1,
        scale_source="raster:bands",
        nodata=0.0,
        crs=32645,
        transform=None,
        shape=shape,
        dtype="uint16",
    )


def test_good_tiff_reads(tmp_path: Path) -> None:
    assert check_readable(_ref(write_tif(tmp_path / "ok.tif"))) is None


def test_missing_truncated_garbage_and_wrong_shape(tmp_path: Path) -> None:
    missing = check_readable(_ref(tmp_path / "nope.tif"), item_id="it-1")
    assert missing is not None
    assert missing.code == "corrupt_item"
    assert missing.item_id == "it-1"

    good = write_tif(tmp_path / "big.tif", shape=(256, 256), value=1234)
    cut = tmp_path / "cut.tif"
    cut.write_bytes(good.read_bytes()[: good.stat().st_size // 3])
    truncated = check_readable(_ref(cut, shape=(256, 256)))
    assert truncated is not None
    assert "unreadable" in truncated.reason

    junk = tmp_path / "junk.tif"
    junk.write_bytes(b"II*\x00" + b"\x00" * 64)
    assert check_readable(_ref(junk)) is not None

    wrong = check_readable(_ref(write_tif(tmp_path / "small.tif"), shape=(16, 16)))
    assert wrong is not None
    assert "(8, 8)" in wrong.reason


def test_npy_checks(tmp_path: Path) -> None:
    path = tmp_path / "grid.npy"
    np.save(path, np.zeros((6, 5, 128), dtype=np.int8))
    ok = AssetRef(
        href=str(path),
        role="embedding",
        key="embedding",
        band=None,
        scale=1.0,
        offset=0.0,
        scale_source="identity",
        nodata=None,
        crs=32645,
        transform=None,
        shape=(6, 5),
        dtype="int8",
    )
    assert check_readable(ok) is None
    path.write_bytes(path.read_bytes()[:200])
    bad = check_readable(ok)
    assert bad is not None
    assert bad.code == "corrupt_item"
