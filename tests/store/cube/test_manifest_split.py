"""Manifest splitting: a commit rewrites the manifests of the half-year it writes, not all of them.

A repository created before the split configuration (one manifest per array) opens with it,
keeps every chunk, and is split from its next commit on.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import icechunk as ic
import numpy as np
import pytest

import store.snapshots as snapshots
from store.cube import CubeReader, CubeWriter
from store.cube.inventory import INVENTORY_ARRAY
from store.inventory import InventoryRow
from store.snapshots import MANIFEST_SPLIT_TIME_CHUNKS, open_storage

Y0, X0 = 13_000 * 128, 22_000 * 128
# year slots (Tessera scale: one chunk a year) in two different manifest splits
SLOTS = [MANIFEST_SPLIT_TIME_CHUNKS + 1, 2 * MANIFEST_SPLIT_TIME_CHUNKS + 1]


def _write(writer: CubeWriter, slot: int, value: float) -> None:
    with writer.transaction(f"scale|{slot}") as tx:
        tx.write("geotessera.scale", [slot], Y0, X0, np.full((1, 2, 3), value, np.float32))


def _tip_manifests(data: Path) -> list[ic.ManifestFileInfo]:
    repo = ic.Repository.open(open_storage(data / "cube.icechunk"))
    return list(repo.lookup_snapshot(repo.lookup_branch("main")).manifests)


def test_an_unsplit_repository_is_split_from_its_next_commit_and_keeps_its_chunks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = tmp_path / "data"
    with monkeypatch.context() as m:  # a repository as the code before splitting made it
        m.setattr(snapshots, "repository_config", ic.RepositoryConfig.default)
        old = CubeWriter(data)
        _write(old, SLOTS[0], 1.0)
        _write(old, SLOTS[1], 2.0)
    before = _tip_manifests(data)
    assert [m.num_chunk_refs for m in before] == [2]  # one manifest holds both years

    writer = CubeWriter(data)  # today's open: the split configuration applies
    _write(writer, SLOTS[1] + 1, 3.0)
    after = _tip_manifests(data)
    # the array's manifest is now one per half-year split: the two slots of the second split
    # share one, the first split's slot has its own
    assert sorted(m.num_chunk_refs for m in after) == [1, 2]

    reader = CubeReader(data)
    for slot, value in zip([*SLOTS, SLOTS[1] + 1], [1.0, 2.0, 3.0], strict=True):
        da = reader.read_region(
            "geotessera.scale", Y0, Y0 + 2, X0, X0 + 3, slot, slot + 1, drop_empty=False
        )
        np.testing.assert_array_equal(da.values, np.full((1, 2, 3), value, np.float32))


def test_a_new_repository_writes_one_manifest_per_split(tmp_path: Path) -> None:
    data = tmp_path / "data"
    writer = CubeWriter(data)
    _write(writer, SLOTS[0], 1.0)
    _write(writer, SLOTS[1], 2.0)
    assert sorted(m.num_chunk_refs for m in _tip_manifests(data)) == [1, 1]


def test_a_batched_read_keeps_a_whole_batch_in_flight() -> None:
    # icechunk's default (10) would make a 32-key batch wait four request latencies on S3
    from store.cube.codec import FETCH_GROUP
    from store.snapshots import repository_config

    assert repository_config().get_partial_values_concurrency == FETCH_GROUP


def _old_config() -> ic.RepositoryConfig:
    """The configuration before the inventory was split (bands split by time only)."""
    cond, dim = ic.ManifestSplitCondition, ic.ManifestSplitDimCondition
    config = ic.RepositoryConfig.default()
    config.manifest = ic.ManifestConfig(
        splitting=ic.ManifestSplittingConfig.from_dict(
            {cond.path_matches(snapshots._SPLIT_ARRAYS): {dim.Axis(0): MANIFEST_SPLIT_TIME_CHUNKS}}
        )
    )
    return config


def _inventory_manifests(data: Path) -> list[int]:
    """Chunk refs of each manifest of the tip's inventory array, ascending."""
    repo = ic.Repository.open(open_storage(data / "cube.icechunk"))
    info = json.loads(repo.inspect_snapshot(repo.lookup_branch("main"), pretty=False))
    refs = {m["id"]: m["num_chunk_refs"] for m in info["manifests"]}
    path = "/" + INVENTORY_ARRAY
    return sorted(
        refs[m["id"]] for n in info["nodes"] if n["path"] == path for m in n["manifest_refs"]
    )


def _ingest_rows(writer: CubeWriter, keys: list[str]) -> None:
    for i, key in enumerate(keys):
        with writer.transaction(key) as tx:
            tx.write_inventory(key, [_row(i)])


def _row(i: int) -> InventoryRow:
    return InventoryRow(
        band="s2",
        tslot=3000 + i,
        block="b8.1.1",
        item_ids=(f"item{i}",),
        clear_cells=1,
        total_cells=2,
        cloud_fraction=0.5,
    )


def test_the_inventory_is_split_by_position_so_a_commit_rewrites_a_part_of_it(
    tmp_path: Path,
) -> None:
    data = tmp_path / "data"
    keys = [f"s2|2024-01-04|b8.{i}.1" for i in range(40)]
    _ingest_rows(CubeWriter(data), keys)
    counts = _inventory_manifests(data)
    # 40 partitions at hashed positions over 64 splits: several manifests, none holding all
    assert sum(counts) == 40
    assert len(counts) > 10
    assert max(counts) < 40
    assert set(CubeReader(data).inventory.partitions) == set(keys)


def test_an_unsplit_inventory_is_split_by_its_next_commit_and_keeps_every_partition(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = tmp_path / "data"
    old_keys = [f"s2|2024-01-04|b8.{i}.1" for i in range(20)]
    with monkeypatch.context() as m:  # a repository as the code before the split wrote it
        m.setattr(snapshots, "repository_config", _old_config)
        _ingest_rows(CubeWriter(data), old_keys)
    assert _inventory_manifests(data) == [20]

    _ingest_rows(CubeWriter(data), ["s2|2024-01-11|b8.0.1"])  # today's open
    counts = _inventory_manifests(data)
    assert sum(counts) == 21
    assert len(counts) > 1
    inv = CubeReader(data).inventory
    assert set(inv.partitions) == {*old_keys, "s2|2024-01-11|b8.0.1"}
    assert inv.partition_item_ids(old_keys[3]) == frozenset({"item3"})


def test_manifests_are_not_preloaded() -> None:
    # the cube has no coordinate arrays to preload, and deciding so cost icechunk six regex
    # compilations per manifest on every session open (bench/HISTORY.md, session 13)
    from store.snapshots import repository_config

    preload = repository_config().manifest.preload
    assert preload is not None
    assert preload.max_total_refs == 0


def test_the_inventory_split_names_the_inventory_array() -> None:
    """store.snapshots repeats the inventory's path (store.cube.inventory imports it)."""
    import re

    assert re.fullmatch(snapshots._INVENTORY_PATH, "/" + INVENTORY_ARRAY)


def test_every_array_but_the_inventory_is_one_the_time_split_names(tmp_path: Path) -> None:
    """repository_config splits every array but the inventory by time with ``AnyArray`` (no
    pattern to compile per array); that is the pattern's split only while the layout has no
    array outside it."""
    import re

    writer = CubeWriter(tmp_path / "data")
    info = json.loads(writer.repo.inspect_snapshot(writer.repo.lookup_branch("main"), pretty=False))
    arrays = [n["path"] for n in info["nodes"] if n["node_type"] == "array"]
    assert "/" + INVENTORY_ARRAY in arrays
    others = [p for p in arrays if p != "/" + INVENTORY_ARRAY]
    assert others
    assert all(re.fullmatch(snapshots._SPLIT_ARRAYS, p) for p in others)


_CONFIG = snapshots.repository_config


def _pattern_config() -> ic.RepositoryConfig:
    """The split configuration of session 13: the time split named by its pattern."""
    cond, dim = ic.ManifestSplitCondition, ic.ManifestSplitDimCondition
    config = _CONFIG()
    config.manifest = ic.ManifestConfig(
        preload=config.manifest.preload,
        splitting=ic.ManifestSplittingConfig.from_dict(
            {
                cond.path_matches(snapshots._SPLIT_ARRAYS): {
                    dim.Axis(0): MANIFEST_SPLIT_TIME_CHUNKS
                },
                cond.path_matches(snapshots._INVENTORY_PATH): {
                    dim.Axis(0): snapshots._INVENTORY_SPLIT_CHUNKS
                },
            }
        ),
    )
    return config


def _split_extents(data: Path) -> dict[str, list[tuple[str, int]]]:
    """Per array of the tip: its manifests' extents and chunk refs, sorted."""
    repo = ic.Repository.open(open_storage(data / "cube.icechunk"))
    info = json.loads(repo.inspect_snapshot(repo.lookup_branch("main"), pretty=False))
    refs = {m["id"]: m["num_chunk_refs"] for m in info["manifests"]}
    return {
        n["path"]: sorted(
            (json.dumps(m.get("extents")), refs[m["id"]]) for m in n.get("manifest_refs", [])
        )
        for n in info["nodes"]
    }


def test_the_split_is_the_one_the_pattern_gave(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Same commits, the pattern configuration and today's: the same manifests per array."""
    import store.cube.write as cube_write

    def fill(data: Path) -> None:
        writer = CubeWriter(data)
        for slot, value in ((SLOTS[0], 1.0), (SLOTS[1], 2.0)):
            _write(writer, slot, value)
        for week, t0 in (("a", 19_796), ("b", 19_796 + 7 * MANIFEST_SPLIT_TIME_CHUNKS)):
            with writer.transaction(f"b|{week}") as tx:
                tx.write(
                    "indices.ndvi", np.arange(t0, t0 + 7), Y0, X0, np.ones((7, 3, 3), np.float32)
                )
                tx.write("s2.clear", np.arange(t0, t0 + 7), Y0, X0, np.ones((7, 3, 3), np.uint8))
                tx.write_inventory(f"s2|b8.1.1|{week}", [_row(t0 - 3000)])

    fill(tmp_path / "now")
    with monkeypatch.context() as m:
        m.setattr(snapshots, "repository_config", _pattern_config)
        m.setattr(cube_write, "open_repository", _open_with(_pattern_config))
        cube_write._LAYOUT_CHECKED.clear()
        fill(tmp_path / "pattern")
    cube_write._LAYOUT_CHECKED.clear()
    now, before = _split_extents(tmp_path / "now"), _split_extents(tmp_path / "pattern")
    assert now == before
    assert len(now["/indices/ndvi"]) == 2  # two half-years: split
    assert len(now["/" + INVENTORY_ARRAY]) >= 1


def _open_with(config: Any) -> Any:
    def open_repository(storage: ic.Storage, *, create: bool = False) -> ic.Repository:
        if create:
            return ic.Repository.open_or_create(storage, config=config())
        return ic.Repository.open(storage, config=config())

    return open_repository
