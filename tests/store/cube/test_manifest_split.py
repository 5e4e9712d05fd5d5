"""Manifest splitting: a commit rewrites the manifests of the half-year it writes, not all of them.

A repository created before the split configuration (one manifest per array) opens with it,
keeps every chunk, and is split from its next commit on.
"""

from __future__ import annotations

from pathlib import Path

import icechunk as ic
import numpy as np
import pytest

import store.snapshots as snapshots
from store.cube import CubeReader, CubeWriter
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
