"""Leftovers of killed writers are swept, a live writer's temporaries never are."""

from __future__ import annotations

import os

import numpy as np

from store.knn import KnnTable, write_table
from store.knn.write import table_leftovers
from store.leftovers import sweep, writing


def _tmps(root):
    return sorted(p.name for p in root.glob(".tmp-*"))


def test_a_live_writers_temporaries_are_kept(tmp_path) -> None:
    def listing(root):
        return list(root.glob(".tmp-*"))

    with writing(tmp_path, listing):
        (tmp_path / ".tmp-live").write_text("half")
        assert sweep(tmp_path, listing) == []  # another writer is live
        assert _tmps(tmp_path) == [".tmp-live"]
    assert [p.name for p in sweep(tmp_path, listing)] == [".tmp-live"]  # now stale
    assert _tmps(tmp_path) == []


def _table(root, value: int) -> None:
    cells = np.arange(1, 5, dtype=np.uint64)
    vectors = np.full((4, 8), value, dtype=np.int8)
    write_table(
        root / "2023",
        cells,
        vectors,
        np.ones(4, np.float32),
        {"band": "b", "tslot": 1},
        replace=True,
    )


def test_the_next_table_write_removes_a_killed_writers_folders(tmp_path) -> None:
    _table(tmp_path, 3)
    current = os.readlink(tmp_path / "2023")
    (tmp_path / ".2023.tmp-abc123_x").mkdir()  # killed while filling
    (tmp_path / ".2023@0123456789abcdef-0badcafe").mkdir()  # killed before the swap
    os.symlink(current, tmp_path / ".2023.link-deadbeef")  # killed before the rename
    assert len(table_leftovers(tmp_path)) == 3
    _table(tmp_path, 3)  # identical content: a no-op write, which still sweeps
    assert sorted(p.name for p in tmp_path.iterdir() if p.name != ".writers.lock") == [
        current,
        "2023",
    ]
    assert KnnTable.open(tmp_path / "2023").n == 4
    _table(tmp_path, 5)  # a replacing write keeps exactly the new version
    assert len([p for p in tmp_path.iterdir() if "@" in p.name]) == 1
