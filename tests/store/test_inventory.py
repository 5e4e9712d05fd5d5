"""The scene inventory: round trip, idempotent replace, queries."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pyarrow as pa
import pytest

from store.errors import InvalidInventory
from store.inventory import SCHEMA, Inventory, InventoryRow

T = 19_796  # 2024-03-14


def _rows(block: str, *, items: str = "S2A") -> list[InventoryRow]:
    return [
        InventoryRow("s2", T + 1, block, (f"{items}_1", f"{items}_2"), 900, 1000, 0.1),
        InventoryRow("s2", T + 4, block, (f"{items}_3",), 0, 1000, 1.0),
        InventoryRow("s1", T + 2, block, ("S1A_1",), 1000, 1000, None),
    ]


def test_empty_inventory_has_the_schema(tmp_path: Path) -> None:
    inv = Inventory(tmp_path)
    assert inv.table().schema == SCHEMA
    assert inv.table().num_rows == 0
    assert inv.available_tslots("s2") == []


def test_round_trip(tmp_path: Path) -> None:
    inv = Inventory(tmp_path)
    when = dt.datetime(2024, 3, 21, 12, tzinfo=dt.UTC)
    path = inv.write_partition(
        "2024-03-14|b7.1.2", _rows("b7.1.2"), snapshot_id="SNAP", written_at=when
    )
    assert path.parent == tmp_path / "inventory"
    assert path.name.endswith(".parquet")
    table = inv.table()
    assert table.num_rows == 3
    first = table.filter(pa.compute.equal(table["band"], "s2")).to_pylist()[0]
    assert first["tslot"] == T + 1
    assert first["date"] == dt.date(2024, 3, 15)
    assert first["block"] == "b7.1.2"
    assert first["item_ids"] == ["S2A_1", "S2A_2"]
    assert (first["clear_cells"], first["total_cells"], first["cloud_fraction"]) == (900, 1000, 0.1)
    assert first["snapshot_id"] == "SNAP"
    assert first["written_at"] == when
    assert first["partition_key"] == "2024-03-14|b7.1.2"
    year = InventoryRow("geotessera", 54, "b7.1.2", ("tile",), 5, 5, tempo="year")
    inv.write_partition("2024|b7.1.2", [year])
    assert inv.table().filter(pa.compute.equal(inv.table()["tempo"], "year"))[
        "date"
    ].to_pylist() == [dt.date(2024, 1, 1)]


def test_rewriting_a_partition_replaces_its_rows(tmp_path: Path) -> None:
    inv = Inventory(tmp_path)
    inv.write_partition("2024-03-14|b7.1.2", _rows("b7.1.2"))
    inv.write_partition("2024-03-14|b7.1.3", _rows("b7.1.3"))
    before = inv.table()
    inv.write_partition("2024-03-14|b7.1.2", _rows("b7.1.2"))  # same again: no duplicates
    after = inv.table()
    assert after.drop_columns(["written_at"]).equals(before.drop_columns(["written_at"]))
    # A changed rerun replaces only its own rows.
    inv.write_partition("2024-03-14|b7.1.2", _rows("b7.1.2", items="S2B")[:1])
    table = inv.table()
    assert table.num_rows == 4
    mine = table.filter(pa.compute.equal(table["block"], "b7.1.2")).to_pylist()
    assert [r["item_ids"] for r in mine] == [["S2B_1", "S2B_2"]]
    assert not any(p.name.startswith(".tmp") for p in (tmp_path / "inventory").iterdir())
    assert inv.delete_partition("2024-03-14|b7.1.2")
    assert not inv.delete_partition("nope")
    assert set(inv.table()["block"].to_pylist()) == {"b7.1.3"}


def test_queries(tmp_path: Path) -> None:
    inv = Inventory(tmp_path)
    inv.write_partition("w|b7.1.2", _rows("b7.1.2"))
    inv.write_partition("w|b7.1.3", [InventoryRow("s2", T + 6, "b7.1.3", ("x",), 10, 20, 0.5)])
    assert inv.available_tslots("s2") == [T + 1, T + 4, T + 6]
    assert inv.available_tslots("s2", block_ids=["b7.1.3"]) == [T + 6]
    assert inv.available_tslots("s2", t0=T + 2, t1=T + 6) == [T + 4]
    assert inv.available_tslots("s2", min_clear_cells=1) == [T + 1, T + 6]
    assert inv.available_tslots("s1") == [T + 2]
    assert inv.available_tslots("geotessera") == []
    over = inv.overpasses("s2", ["b7.1.2", "b7.1.3"], T, T + 7)
    assert over["tslot"].to_pylist() == [T + 1, T + 4, T + 6]
    assert over["block"].to_pylist() == ["b7.1.2", "b7.1.2", "b7.1.3"]
    assert inv.overpasses("s2", [], T, T + 7).num_rows == 0


def test_invalid_rows_are_rejected(tmp_path: Path) -> None:
    inv = Inventory(tmp_path)
    with pytest.raises(InvalidInventory):
        inv.write_partition("p", [InventoryRow("s2", T, "b7.1.2", (), 5, 4)])
    with pytest.raises(InvalidInventory):
        inv.write_partition("p", [InventoryRow("s2", 1 << 16, "b7.1.2")])
    with pytest.raises(InvalidInventory):
        inv.write_partition("p", [InventoryRow("s2", T, "b7.1.2", cloud_fraction=1.5)])
    with pytest.raises(InvalidInventory):
        inv.write_partition("", [])
    assert inv.table().num_rows == 0
