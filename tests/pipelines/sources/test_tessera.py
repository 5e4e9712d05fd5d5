"""Tessera registry source over the geotessera layout (local root and loopback base URL)."""

from __future__ import annotations

import functools
import threading
from collections.abc import Iterator
from datetime import date
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import numpy as np
import pytest

from pipelines.sources import TesseraRegistrySource, UnknownCollection, check_readable, open_source
from pipelines.sources.tessera import EMBEDDINGS_DIR, LANDMASKS_DIR, grid_name, tiles_for_bbox
from tests.pipelines.sources.conftest import write_tif


def test_tiles_for_bbox() -> None:
    assert tiles_for_bbox((85.31, 23.31, 85.39, 23.39)) == [(85.35, 23.35)]
    assert tiles_for_bbox((85.31, 23.31, 85.41, 23.39)) == [(85.35, 23.35), (85.45, 23.35)]
    assert grid_name(85.35, -0.05) == "grid_85.35_-0.05"
    with pytest.raises(ValueError, match="more than"):
        tiles_for_bbox((0.0, 0.0, 20.0, 20.0))


@pytest.fixture(scope="module")
def registry(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("tessera")
    for year in (2023, 2024):
        for lon in (85.35, 85.45):
            grid = grid_name(lon, 23.35)
            tile = root / EMBEDDINGS_DIR / str(year) / grid
            tile.mkdir(parents=True)
            np.save(tile / f"{grid}.npy", np.zeros((6, 5, 128), dtype=np.int8))
            if not (year == 2024 and lon == 85.45):  # one tile-year lacks its scales
                np.save(tile / f"{grid}_scales.npy", np.ones((6, 5), dtype=np.float32))
    for lon in (85.35, 85.45):
        write_tif(
            root / LANDMASKS_DIR / f"{grid_name(lon, 23.35)}.tiff",
            shape=(6, 5),
            dtype="uint8",
            value=1,
        )
    return root


def _check(res, root_label: str) -> None:
    assert res.ids == (
        "tessera_2023_grid_85.35_23.35",
        "tessera_2023_grid_85.45_23.35",
        "tessera_2024_grid_85.35_23.35",
    ), root_label
    assert [(s.item_id, s.code) for s in res.skipped] == [
        ("tessera_2024_grid_85.45_23.35", "missing_asset")
    ]
    item = res.items[0]
    assert item.kind == "tessera"
    assert item.tessera_year == 2023
    assert set(item.assets) == {"embedding", "scales", "landmask"}
    emb = item.assets["embedding"]
    assert emb.crs == 32645
    assert emb.shape == (6, 5)
    assert emb.transform is not None


def test_local_registry(registry: Path) -> None:
    src = open_source({"kind": "tessera_registry", "path": str(registry)})
    res = src.search(
        "tessera-embeddings", (85.31, 23.31, 85.49, 23.39), date(2023, 3, 1), date(2024, 2, 1)
    )
    _check(res, "local")
    assert all(check_readable(a) is None for a in res.items[0].assets.values())
    only_2024 = src.search(
        "tessera-embeddings", (85.31, 23.31, 85.39, 23.39), date(2024, 1, 1), date(2024, 12, 31)
    )
    assert only_2024.ids == ("tessera_2024_grid_85.35_23.35",)
    with pytest.raises(UnknownCollection):
        src.search(
            "sentinel-2-l2a", (85.31, 23.31, 85.39, 23.39), date(2024, 1, 1), date(2024, 12, 31)
        )


def test_missing_landmask_is_unknown_crs(registry: Path, tmp_path: Path) -> None:
    import shutil

    copy = tmp_path / "reg"
    shutil.copytree(registry, copy)
    (copy / LANDMASKS_DIR / "grid_85.35_23.35.tiff").unlink()
    res = TesseraRegistrySource(copy).search(
        "tessera-embeddings", (85.31, 23.31, 85.39, 23.39), date(2023, 1, 1), date(2023, 12, 31)
    )
    assert res.ids == ()
    assert [s.code for s in res.skipped] == ["unknown_crs"]


@pytest.fixture
def http_registry(registry: Path) -> Iterator[str]:
    class Quiet(SimpleHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(
        ("127.0.0.1", 0), functools.partial(Quiet, directory=str(registry))
    )
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def test_registry_over_http_base_url(http_registry: str) -> None:
    res = TesseraRegistrySource(http_registry).search(
        "tessera-embeddings", (85.31, 23.31, 85.49, 23.39), date(2023, 3, 1), date(2024, 2, 1)
    )
    _check(res, "http")
    assert res.items[0].assets["embedding"].href.startswith(http_registry)
