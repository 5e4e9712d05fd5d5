"""The data directory can move: nothing Dagster stores (its outputs, the asset metadata) holds an
absolute path into it, so materialising from a moved copy reads the copy."""

from __future__ import annotations

import shutil
from pathlib import Path

from dagster import AssetKey, instance_for_test, materialize

from pipelines.run import QUIET, resources_for
from pipelines.tessera.assets import geotessera_embeddings, geotessera_year_table, tessera_items
from store.cube import CubeReader

TESSERA = [tessera_items, geotessera_embeddings, geotessera_year_table]


def _materialise(data: Path) -> dict:
    """Materialise the 2024 vintage; the embeddings' metadata (after checking every asset's)."""
    res = resources_for(data, data / "sample" / "catalog.json", data / "sample" / "manifest.json")
    (data / "dagster_home").mkdir(exist_ok=True)
    with instance_for_test(temp_dir=str(data / "dagster_home")) as inst:
        result = materialize(
            TESSERA,
            partition_key="2024",
            resources=res,
            instance=inst,
            raise_on_error=False,
            run_config=QUIET,
        )
        for asset in TESSERA:
            key = AssetKey(asset.key.path)
            event = inst.get_latest_materialization_event(key)
            assert event is not None
            assert event.asset_materialization is not None
            text = repr(event.asset_materialization.metadata)
            assert str(data) not in text, (key, text)
        assert result.success
        return {
            k: v.value
            for k, v in result.asset_materializations_for_node("geotessera_embeddings")[
                0
            ].metadata.items()
        }


def test_a_moved_data_directory_materialises_from_where_it_is(tiny_sample_dir, tmp_path) -> None:
    first = tmp_path / "first" / "data"
    first.mkdir(parents=True)
    shutil.copytree(tiny_sample_dir, first / "sample")
    assert _materialise(first)["valid_cells"] > 0
    stored = first / "dagster_home" / "storage"
    for f in (p for p in stored.rglob("*") if p.is_file()) if stored.exists() else ():
        assert str(first).encode() not in f.read_bytes(), f  # no path into the data dir

    moved = tmp_path / "moved" / "data"
    moved.parent.mkdir()
    shutil.move(first.parent, moved.parent / "old")  # the old place is gone
    shutil.move(moved.parent / "old" / "data", moved)
    meta = _materialise(moved)  # reads the tiles of the moved sample
    assert meta["valid_cells"] > 0
    assert meta["snapshot_id"] == CubeReader(moved).snapshot_id
    assert (moved / "knn" / "geotessera" / "2024").exists()
