"""The inventory committed with the cube: one snapshot holds its own rows, and only them."""

from __future__ import annotations

import shutil
import threading
from pathlib import Path

import numpy as np
import pytest
import zarr

from store.cube import CubeReader, CubeWriter
from store.cube.inventory import INVENTORY_ARRAY, PartitionRows, chunk_position
from store.cube.write import migrate_inventory
from store.errors import InvalidInventory
from store.inventory import Inventory, InventoryRow
from store.snapshots import MAIN_BRANCH

T = 19796  # a Thursday: the first day of a week chunk
WEEK = np.arange(T, T + 7)


def _row(t: int, item: str, block: str = "b7.1.2") -> InventoryRow:
    return InventoryRow("s2", t, block, (item,), 5, 10, 0.5)


def _commit(writer: CubeWriter, week: int, item: str, value: float = 1.0) -> str:
    t0 = T + 7 * week
    with writer.transaction(f"w{week}|b7.1.2") as tx:
        tx.write("indices.ndvi", np.arange(t0, t0 + 7), 1000, 2000, np.full((7, 4, 4), value))
        tx.write_inventory(f"s2|w{week}|b7.1.2", [_row(t0 + 1, item)])
    assert tx.snapshot_id is not None
    return tx.snapshot_id


def _items(reader: CubeReader) -> list[str]:
    return sorted(i for ids in reader.inventory.table()["item_ids"].to_pylist() for i in ids)


def test_each_snapshot_reads_its_own_inventory(tmp_path: Path) -> None:
    w = CubeWriter(tmp_path)
    s1 = _commit(w, 0, "A")
    s2 = _commit(w, 1, "B")
    s3 = _commit(w, 0, "A2")  # the partition rewritten: its rows replaced
    assert _items(CubeReader(tmp_path, snapshot_id=s1)) == ["A"]
    assert _items(CubeReader(tmp_path, snapshot_id=s2)) == ["A", "B"]
    assert _items(CubeReader(tmp_path, snapshot_id=s3)) == ["A2", "B"]
    assert _items(CubeReader(tmp_path)) == ["A2", "B"]
    # as_of a time: the snapshot then, rows added later absent
    at_s1 = CubeReader(tmp_path, as_of=CubeReader(tmp_path, snapshot_id=s1).snapshot.written_at)
    assert at_s1.snapshot_id == s1
    assert at_s1.inventory.versioned
    assert at_s1.inventory.overpass_index().overpasses("s2", (0, 1 << 21, 0, 1 << 22)) == [
        (T + 1, ["A"])
    ]
    row = CubeReader(tmp_path, snapshot_id=s3).inventory.table().to_pylist()[0]
    assert row["partition_key"] == "s2|w0|b7.1.2"
    assert row["snapshot_id"] is None  # the rows belong to the snapshot they are read from


def test_a_failed_transaction_commits_neither_chunks_nor_rows(tmp_path: Path) -> None:
    w = CubeWriter(tmp_path)
    s1 = _commit(w, 0, "A")

    def killed() -> None:
        with w.transaction("w1|b7.1.2") as tx:
            tx.write("indices.ndvi", WEEK + 7, 1000, 2000, np.ones((7, 4, 4)))
            tx.write_inventory("s2|w1|b7.1.2", [_row(T + 8, "B")])
            raise RuntimeError("killed")

    with pytest.raises(RuntimeError):
        killed()
    tip = CubeReader(tmp_path)
    assert tip.snapshot_id == s1
    assert _items(tip) == ["A"]
    with pytest.raises(InvalidInventory), w.transaction("w1|b7.1.2") as tx:
        tx.write_inventory("s2|w1|b7.1.2", [InventoryRow("s2", T, "b7.1.2", (), 5, 4)])
    assert CubeReader(tmp_path).snapshot_id == s1


def test_no_rows_removes_a_partition_and_an_unchanged_one_commits_nothing(tmp_path: Path) -> None:
    w = CubeWriter(tmp_path)
    _commit(w, 0, "A")
    s2 = _commit(w, 1, "B")
    with w.transaction("nothing") as tx:
        tx.write_inventory("s2|never-written", [])
    assert not tx.committed
    assert tx.snapshot_id == s2
    with w.transaction("w0|b7.1.2") as tx:
        tx.write_inventory("s2|w0|b7.1.2", [])
    assert tx.committed
    assert _items(CubeReader(tmp_path)) == ["B"]
    assert _items(CubeReader(tmp_path, snapshot_id=s2)) == ["A", "B"]  # nothing lost


def test_a_reader_updated_from_an_earlier_one_equals_a_fresh_read(tmp_path: Path) -> None:
    w = CubeWriter(tmp_path)
    _commit(w, 0, "A")
    _commit(w, 1, "B")
    old = CubeReader(tmp_path)
    assert _items(old) == ["A", "B"]
    _commit(w, 2, "C")
    _commit(w, 0, "A2")
    with w.transaction("w1|b7.1.2") as tx:
        tx.write_inventory("s2|w1|b7.1.2", [])
    updated = CubeReader(tmp_path, inventory_from=old)
    fresh = CubeReader(tmp_path)
    assert (
        updated.inventory.table()
        .drop_columns(["written_at"])
        .equals(fresh.inventory.table().drop_columns(["written_at"]))
    )
    assert _items(updated) == ["A2", "C"]
    assert updated.inventory.overpass_index().rows == fresh.inventory.overpass_index().rows


def test_partitions_committed_concurrently_all_land(tmp_path: Path) -> None:
    CubeWriter(tmp_path)  # layout first
    errors: list[BaseException] = []

    def ingest(weeks: range) -> None:
        try:
            writer = CubeWriter(tmp_path)
            for week in weeks:
                _commit(writer, week, f"I{week}")
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=ingest, args=(range(i, 12, 3),)) for i in range(3)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert errors == []
    assert _items(CubeReader(tmp_path)) == sorted(f"I{w}" for w in range(12))


def test_a_chunk_holding_another_key_is_never_overwritten(tmp_path: Path) -> None:
    w = CubeWriter(tmp_path)
    _commit(w, 0, "A")
    y, x = chunk_position("s2|victim")
    session = w.repo.writable_session(MAIN_BRANCH)
    arr = zarr.open_array(session.store, path=INVENTORY_ARRAY, mode="r+")
    value = np.empty((1, 1), dtype=object)
    value[0, 0] = PartitionRows.from_rows("s2|other", [_row(T, "O")]).encode()
    arr[y : y + 1, x : x + 1] = value
    session.commit("a chunk at the victim's position holding another key")
    with pytest.raises(InvalidInventory, match="another partition"), w.transaction("v") as tx:
        tx.write_inventory("s2|victim", [_row(T, "V")])
    assert _items(CubeReader(tmp_path)) == ["A", "O"]


def _old_layout_store(tmp_path: Path) -> Path:
    """A data directory as written before: Parquet inventory, cube without the inventory array."""
    data = tmp_path / "made"
    w = CubeWriter(data)
    _commit(w, 0, "A")
    session = w.repo.writable_session(MAIN_BRANCH)
    del zarr.open_group(session.store, mode="a")["inventory"]
    session.commit("as before the versioned inventory")
    inv = Inventory(data)
    inv.write_partition("s2|w0|b7.1.2", [_row(T + 1, "A")], snapshot_id="OLD")
    inv.write_partition("s1|w0|b7.1.2", [InventoryRow("s1", T + 2, "b7.1.2", ("S1",), 4, 4)])
    old = tmp_path / "old"  # a new directory: this process has not checked its layout
    shutil.copytree(data, old)
    return old


def test_stores_written_before_answer_and_migrate(tmp_path: Path) -> None:
    data = _old_layout_store(tmp_path)
    before = CubeReader(data)
    assert not before.inventory.versioned
    assert _items(before) == ["A", "S1"]
    assert sorted(before.inventory.overpass_index().rows) == ["s1", "s2"]
    assert migrate_inventory(data)
    tip = CubeReader(data)
    assert tip.inventory.versioned
    assert tip.snapshot.metadata["inventory_imported_rows"] == 2
    legacy = Inventory(data).table()
    assert (
        tip.inventory.table()
        .drop_columns(["snapshot_id", "written_at"])
        .equals(legacy.drop_columns(["snapshot_id", "written_at"]))
    )
    assert (data / "inventory" / "s2%7Cw0%7Cb7.1.2.parquet").exists()  # left in place
    assert not CubeReader(data, snapshot_id=before.snapshot_id).inventory.versioned
    assert migrate_inventory(data)  # idempotent: no second import
    assert CubeReader(data).snapshot_id == tip.snapshot_id
    _commit(CubeWriter(data), 1, "B")
    assert _items(CubeReader(data)) == ["A", "B", "S1"]


def test_a_writer_reads_only_the_partitions_it_names(tiny_store) -> None:
    """``inventory_of(keys)`` holds those partitions' rows, equal to the whole inventory's, and
    no other partition (a range's ingest reads its own partitions, not the store's)."""
    full = CubeReader(tiny_store.data).inventory
    keys = sorted(full.partitions)[:3]
    assert len(keys) == 3
    some = CubeReader(tiny_store.data).inventory_of([*keys, "s2|no-such-partition"])
    assert some.versioned
    assert sorted(some.partitions) == keys
    for k in keys:
        assert some.partition_item_ids(k) == full.partition_item_ids(k)
        assert some.partition_item_ids(k)
    assert some.partition_item_ids("s2|no-such-partition") == frozenset()
    assert sorted(full.partitions)[3] not in some.partitions


def test_inventory_decoded_directly_equals_zarrs_decode(
    tiny_store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The inventory's chunks decoded by the numcodecs codecs directly give zarr's rows."""
    from store.cube import inventory

    calls: list[int] = []
    real = inventory._direct_decoder

    def counted(*a: object) -> object:
        got = real(*a)  # type: ignore[arg-type]
        calls.append(got is not None)
        return got

    monkeypatch.setattr(inventory, "_direct_decoder", counted)
    direct = CubeReader(tiny_store.data).inventory
    assert calls == [True]  # the store's codecs take the direct path
    monkeypatch.setattr(inventory, "_direct_decoder", lambda *a: None)
    through_zarr = CubeReader(tiny_store.data).inventory
    assert direct.partitions
    assert {k: (p.written_at, dict(p.columns)) for k, p in direct.partitions.items()} == {
        k: (p.written_at, dict(p.columns)) for k, p in through_zarr.partitions.items()
    }
