"""The overpass index holds exactly the inventory's rows (the tip snapshot's)."""

from __future__ import annotations

from typing import Any

from store.cube import CubeReader


def test_lean_sources_equal_the_inventory_table(tiny_store: Any) -> None:
    inv = CubeReader(tiny_store.data).inventory
    assert inv.versioned
    lean = inv.overpass_index().rows
    table = inv.table()
    rows = sorted(
        (fam, int(t), blk, tuple(items or ()))
        for fam, t, blk, items in zip(
            table["band"].to_pylist(),
            table["tslot"].to_pylist(),
            table["block"].to_pylist(),
            table["item_ids"].to_pylist(),
            strict=True,
        )
    )
    assert rows
    n_lean = sum(len(r) for by_t in lean.values() for r in by_t.values())
    assert n_lean == len(rows)
    for fam, t, _, items in rows:
        assert items in [r.item_ids for r in lean[fam][t]]
