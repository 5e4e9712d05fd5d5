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


def test_sources_many_equals_sources_per_cell(tiny_store: Any) -> None:
    index = CubeReader(tiny_store.data).inventory.overpass_index()
    # a family with footprints (the order of families follows the inventory's chunk order)
    fam, by_t = next(
        (f, t) for f, t in index.rows.items() if any(r.box for rows in t.values() for r in rows)
    )
    boxes = [r.box for rows in by_t.values() for r in rows if r.box is not None]
    lat0, _, lng0, _ = boxes[0]
    lats = [lat0 - 1, lat0, lat0 + 3, lat0 + 4000, lat0]
    lngs = [lng0, lng0, lng0 + 5, lng0, lng0 - 1]
    for t in [*list(by_t)[:5], -1]:
        got = index.sources_many(fam, t, lats, lngs)
        assert got == [index.sources(fam, t, a, b) for a, b in zip(lats, lngs, strict=True)]
    assert any(index.sources(fam, t, lat0, lng0) for t in by_t)


def test_overpasses_in_a_window_are_the_filtered_whole_history() -> None:
    """overpasses with t0/t1 (found by bisection) equals the unbounded list filtered, at the
    window's edges too; repeated calls give the same."""
    from store.inventory import OverpassIndex, SourceRow

    rows = {
        "s2": {
            t: [SourceRow((0, 10, 0, 10) if t % 3 else (20, 30, 20, 30), (f"i{t}",))]
            for t in (5, 9, 12, 12 + 7, 40, 41, 100)
        },
        "s1": {3: [SourceRow(None, ("a", "b"))]},
    }
    index = OverpassIndex(rows)
    box = (0, 25, 0, 25)
    whole = index.overpasses("s2", box)
    assert [t for t, _ in whole] == sorted(t for t in rows["s2"])
    for t0 in (None, 0, 5, 6, 12, 41, 101):
        for t1 in (None, 4, 5, 19, 40, 100, 200):
            want = [
                (t, ids) for t, ids in whole if (t0 is None or t >= t0) and (t1 is None or t <= t1)
            ]
            assert index.overpasses("s2", box, t0, t1) == want
    assert index.overpasses("s2", (50, 60, 50, 60)) == []
    assert index.overpasses("s1", box, 3, 3) == [(3, ["a", "b"])]
    assert index.overpasses("none", box) == []
