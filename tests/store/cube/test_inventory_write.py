"""Inventory chunks written directly (:class:`store.cube.inventory.InventoryChunks`) are the bytes
zarr's own ``setitem`` writes, and read back the same."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from zarr.core.buffer import default_buffer_prototype

from store.cube import CubeReader, CubeWriter
from store.cube import inventory as inv
from store.cube.inventory import InventoryChunks, PartitionRows, chunk_position
from store.inventory import InventoryRow
from store.snapshots import MAIN_BRANCH


def _parts(n_rows: int) -> list[PartitionRows]:
    return [
        PartitionRows.from_rows(
            f"s2|8_1_{i}|2023-01-05",
            [
                InventoryRow(
                    "s2", 19362 + d, f"8_1_{i}", (f"S2A_{i}_{d}", "S2B_é"), 10 + d, 20, 0.5
                )
                for d in range(n_rows)
            ],
        )
        for i in range(3)
    ]


def _write(data_dir: Path, parts: list[PartitionRows], direct: bool) -> dict[str, bytes | None]:
    writer = CubeWriter(data_dir)
    session = writer.repo.writable_session(MAIN_BRANCH)
    chunks = InventoryChunks.open(session)
    assert chunks.supported
    if not direct:
        chunks.supported = False  # zarr's getitem / setitem
    inv.write_partitions(session, parts, chunks)
    writer.commit_session(session, "rows", {})
    store = writer.repo.readonly_session(MAIN_BRANCH).store

    async def fetch(keys: list[str]) -> list[Any]:
        proto = default_buffer_prototype()
        return list(await asyncio.gather(*(store.get(k, proto) for k in keys)))

    keys = [chunks.key(*chunk_position(p.key)) for p in parts]
    return {
        k: None if b is None else b.to_bytes()
        for k, b in zip(keys, asyncio.run(fetch(keys)), strict=True)
    }


@pytest.mark.parametrize("n_rows", [1, 4])
def test_direct_inventory_writes_store_zarrs_bytes(tmp_path: Path, n_rows: int) -> None:
    parts = _parts(n_rows)
    fast = _write(tmp_path / "fast", parts, direct=True)
    slow = _write(tmp_path / "slow", parts, direct=False)
    assert all(v is not None for v in fast.values())
    assert fast == slow
    blocks = CubeReader(tmp_path / "fast").inventory.table()["block"].to_pylist()
    assert set(blocks) == {"8_1_0", "8_1_1", "8_1_2"}
    assert len(blocks) == 3 * n_rows


def test_direct_inventory_write_without_rows_removes_the_chunk(tmp_path: Path) -> None:
    parts = _parts(2)
    _write(tmp_path / "d", parts, direct=True)
    emptied = [PartitionRows.from_rows(parts[0].key, []), *parts[1:]]
    after = _write(tmp_path / "d", emptied, direct=True)
    assert after[next(iter(after))] is None
    assert sum(v is not None for v in after.values()) == 2
