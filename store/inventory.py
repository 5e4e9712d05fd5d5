"""The scene inventory: which overpasses exist, per band family, tslot and block.

The rows (:class:`InventoryRow`, one per band family, tslot and block that a
partition materialised) are stored inside the cube, committed with the
partition's chunks, so every snapshot has its own inventory
(:mod:`store.cube.inventory`; read it with ``CubeReader(...).inventory``).

:class:`Inventory` is the layout of stores written before: one Parquet file
per partition key under ``<data_dir>/inventory/`` (file name = the
percent-quoted key), not versioned with the cube. Readers of a snapshot without
the versioned inventory fall back to it, and the first writer opened on such a
store imports its rows into the cube. Writing a partition again replaces its file: the rows
are written to a hidden temporary file (``.tmp-*``, ignored by readers) and
renamed over the old one, so readers see the old rows or the new ones, never a
mix (temporaries of killed writers are removed by the next write, see
:mod:`store.leftovers`), and partitions written in parallel never touch the same file. Readers
concatenate the files with ``pyarrow.dataset``.

The API uses the inventory (:class:`OverpassIndex`) to know which overpasses
exist without listing chunks.
"""

from __future__ import annotations

import bisect
import datetime as dt
import os
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pyarrow.parquet as pq

from store.blocks import Block, block_q_range
from store.errors import InvalidInventory, StoreError
from store.leftovers import writing
from store.tslot import slot_to_date

__all__ = [
    "INVENTORY_DIRNAME",
    "SCHEMA",
    "Inventory",
    "InventoryRow",
    "OverpassIndex",
    "SourceRow",
]

INVENTORY_DIRNAME = "inventory"
"""Directory of the inventory under the data directory."""

SCHEMA = pa.schema(
    [
        pa.field("band", pa.string(), nullable=False),
        pa.field("tempo", pa.string(), nullable=False),
        pa.field("tslot", pa.int32(), nullable=False),
        pa.field("date", pa.date32(), nullable=False),
        pa.field("block", pa.string(), nullable=False),
        pa.field("partition_key", pa.string(), nullable=False),
        pa.field("item_ids", pa.list_(pa.string()), nullable=False),
        pa.field("clear_cells", pa.int64(), nullable=False),
        pa.field("total_cells", pa.int64(), nullable=False),
        pa.field("cloud_fraction", pa.float64()),
        pa.field("snapshot_id", pa.string()),
        pa.field("written_at", pa.timestamp("us", tz="UTC")),
    ]
)
"""Arrow schema of the inventory table."""


@dataclass(frozen=True)
class InventoryRow:
    """One overpass of one band family over one block."""

    band: str
    """Band family (``"s2"``, ``"s1"``, ``"geotessera"``) or a band name."""
    tslot: int
    """Day slot (``tempo="day"``) or year slot (``tempo="year"``)."""
    block: str
    """Block id, ``"b{level}.{lat_b}.{lng_b}"``."""
    item_ids: tuple[str, ...] = ()
    """STAC item ids (or Tessera tile ids) merged into this tslot and block."""
    clear_cells: int = 0
    """Cells with a clear (S2) or valid (S1, Tessera) observation."""
    total_cells: int = 0
    """Cells of the block covered by the scenes' footprints."""
    cloud_fraction: float | None = None
    """Masked fraction of covered cells (S2), ``None`` where meaningless."""
    tempo: str = "day"
    """``"day"`` or ``"year"``."""

    def validate(self) -> None:
        """Check the row's values.

        Raises:
            InvalidInventory: Negative counts, clear > total, bad tempo or tslot.
        """
        if self.tempo not in ("day", "year"):
            raise InvalidInventory(f"tempo must be 'day' or 'year', got {self.tempo!r}")
        limit = 1 << 16 if self.tempo == "day" else 256
        if not 0 <= self.tslot < limit:
            raise InvalidInventory(f"tslot {self.tslot} outside [0, {limit})")
        if self.clear_cells < 0 or self.total_cells < 0 or self.clear_cells > self.total_cells:
            raise InvalidInventory(
                f"need 0 <= clear_cells ({self.clear_cells}) <= total_cells ({self.total_cells})"
            )
        if self.cloud_fraction is not None and not 0.0 <= self.cloud_fraction <= 1.0:
            raise InvalidInventory(f"cloud_fraction {self.cloud_fraction} outside [0, 1]")
        if not self.band or not self.block:
            raise InvalidInventory("band and block must be non-empty")


def _inventory_leftovers(root: Path) -> list[Path]:
    """Temporary files of killed writers (meaningful only while no writer is live)."""
    return sorted(root.glob(".tmp-*.parquet"))


def _file_name(partition_key: str) -> str:
    return quote(partition_key, safe="-_.") + ".parquet"


class Inventory:
    """The legacy (Parquet, unversioned) scene inventory of a data directory.

    Args:
        data_dir: Data directory; files live in ``<data_dir>/inventory/``.
    """

    def __init__(self, data_dir: str | os.PathLike[str]) -> None:
        self.root = Path(data_dir) / INVENTORY_DIRNAME

    def write_partition(
        self,
        partition_key: str,
        rows: Iterable[InventoryRow],
        *,
        snapshot_id: str | None = None,
        written_at: dt.datetime | None = None,
    ) -> Path:
        """Replace a partition's rows (atomically; idempotent).

        Args:
            partition_key: The partition key; its file is replaced.
            rows: The partition's rows (may be empty: the partition then has
                no overpasses, which is recorded too).
            snapshot_id: Cube snapshot that committed the partition.
            written_at: Commit time (default: now, UTC).

        Returns:
            Path of the partition's file.

        Raises:
            InvalidInventory: Empty key or invalid rows.
        """
        if not partition_key:
            raise InvalidInventory("partition_key must be non-empty")
        rows = list(rows)
        for row in rows:
            row.validate()
        when = written_at or dt.datetime.now(dt.UTC)
        if when.tzinfo is None:
            when = when.replace(tzinfo=dt.UTC)
        table = pa.table(
            {
                "band": [r.band for r in rows],
                "tempo": [r.tempo for r in rows],
                "tslot": [int(r.tslot) for r in rows],
                "date": [slot_to_date(int(r.tslot), r.tempo) for r in rows],
                "block": [r.block for r in rows],
                "partition_key": [partition_key] * len(rows),
                "item_ids": [list(r.item_ids) for r in rows],
                "clear_cells": [r.clear_cells for r in rows],
                "total_cells": [r.total_cells for r in rows],
                "cloud_fraction": [r.cloud_fraction for r in rows],
                "snapshot_id": [snapshot_id] * len(rows),
                "written_at": [when] * len(rows),
            },
            schema=SCHEMA,
        )
        final = self.root / _file_name(partition_key)
        with writing(self.root, _inventory_leftovers):
            tmp = self.root / f".tmp-{uuid.uuid4().hex}.parquet"
            try:
                pq.write_table(table, tmp)
                os.replace(tmp, final)
            finally:
                tmp.unlink(missing_ok=True)
        return final

    def partition_item_ids(self, partition_key: str) -> frozenset[str]:
        """The item ids of a partition's stored rows (empty when it has none, or no file).

        The pipelines compare them with what a re-ingest would write, so a week
        never drops an overpass it already stores.

        Raises:
            InvalidInventory: The partition's file cannot be read.
        """
        path = self.root / _file_name(partition_key)
        if not path.exists():
            return frozenset()
        try:
            column = pq.read_table(path, columns=["item_ids"])["item_ids"]
        except (OSError, pa.ArrowException) as err:
            raise InvalidInventory(
                f"inventory partition {partition_key!r} unreadable: {err}"
            ) from err
        return frozenset(i for ids in column.to_pylist() for i in ids or ())

    def delete_partition(self, partition_key: str) -> bool:
        """Remove a partition's rows.

        Args:
            partition_key: The partition key.

        Returns:
            Whether a file was removed.
        """
        path = self.root / _file_name(partition_key)
        existed = path.exists()
        path.unlink(missing_ok=True)
        return existed

    def table(self) -> pa.Table:
        """All rows, sorted by band, tslot, block.

        Returns:
            A table with :data:`SCHEMA` (empty when nothing was written).
        """
        if not self.root.is_dir():
            return SCHEMA.empty_table()
        files = sorted(str(p) for p in self.root.glob("*.parquet") if not p.name.startswith("."))
        if not files:
            return SCHEMA.empty_table()
        table = ds.dataset(files, schema=SCHEMA, format="parquet").to_table()
        return table.sort_by(
            [("band", "ascending"), ("tslot", "ascending"), ("block", "ascending")]
        )

    def _select(
        self,
        band: str,
        block_ids: Sequence[str] | None,
        t0: int | None,
        t1: int | None,
        min_clear_cells: int,
    ) -> pa.Table:
        table = self.table()
        mask = pc.equal(table["band"], band)
        if block_ids is not None:
            mask = pc.and_(
                mask, pc.is_in(table["block"], value_set=pa.array(list(block_ids), pa.string()))
            )
        if t0 is not None:
            mask = pc.and_(mask, pc.greater_equal(table["tslot"], t0))
        if t1 is not None:
            mask = pc.and_(mask, pc.less(table["tslot"], t1))
        if min_clear_cells > 0:
            mask = pc.and_(mask, pc.greater_equal(table["clear_cells"], min_clear_cells))
        return table.filter(mask)

    def available_tslots(
        self,
        band: str,
        block_ids: Sequence[str] | None = None,
        t0: int | None = None,
        t1: int | None = None,
        *,
        min_clear_cells: int = 0,
    ) -> list[int]:
        """Tslots with an overpass of a band family.

        Args:
            band: Band family as written in the rows.
            block_ids: Only these blocks (default: all).
            t0: First tslot (inclusive).
            t1: End tslot (exclusive).
            min_clear_cells: Only overpasses with at least this many clear cells.

        Returns:
            Sorted distinct tslots.
        """
        selected = self._select(band, block_ids, t0, t1, min_clear_cells)
        return sorted({int(t) for t in selected["tslot"].to_pylist()})

    def overpasses(
        self,
        band: str,
        bbox_blocks: Sequence[str],
        t0: int | None = None,
        t1: int | None = None,
        *,
        min_clear_cells: int = 0,
    ) -> pa.Table:
        """Inventory rows of a band family over some blocks and a tslot range.

        Args:
            band: Band family as written in the rows.
            bbox_blocks: Block ids covering the area (e.g. from
                ``store.blocks.blocks_for_bbox``).
            t0: First tslot (inclusive).
            t1: End tslot (exclusive).
            min_clear_cells: Only overpasses with at least this many clear cells.

        Returns:
            Rows sorted by tslot then block.
        """
        selected = self._select(band, bbox_blocks, t0, t1, min_clear_cells)
        return selected.sort_by([("tslot", "ascending"), ("block", "ascending")])


@dataclass(frozen=True)
class SourceRow:
    """One inventory row as the overpass index holds it."""

    box: tuple[int, int, int, int] | None
    """Lattice range ``(lat_q0, lat_q1, lng_q0, lng_q1)`` of the row's block; None = any."""
    item_ids: tuple[str, ...]
    """Source scene ids."""


_INDEX_COLUMNS = ("band", "tslot", "block", "item_ids")


@dataclass(frozen=True, eq=False)
class OverpassIndex:
    """Which overpasses (and source scenes) exist, per band family, tslot and block.

    Built once per snapshot (:meth:`from_columns`; :meth:`load` for the legacy
    files) and read by every fact id and area query: the API never lists chunks to know what was observed.
    """

    rows: Mapping[str, Mapping[int, Sequence[SourceRow]]]
    """``{family: {tslot: [SourceRow]}}``."""
    _by_tslot: dict[str, tuple[list[int], list[tuple[int, Sequence[SourceRow]]]]] = field(
        default_factory=dict, compare=False, repr=False
    )

    @classmethod
    def load(cls, inventory: Inventory) -> OverpassIndex:
        """Read the four columns the index needs, file by file.

        Falls back to :meth:`Inventory.table` when a file cannot be read that way.
        """
        parts: list[list[list[Any]]] = []
        try:
            root = inventory.root
            files = (
                sorted(p for p in root.glob("*.parquet") if not p.name.startswith("."))
                if root.is_dir()
                else []
            )
            for path in files:
                with pa.OSFile(str(path)) as fh:
                    part = pq.ParquetFile(fh, pre_buffer=False).read(
                        columns=list(_INDEX_COLUMNS), use_threads=False
                    )
                parts.append([part[c].to_pylist() for c in _INDEX_COLUMNS])
        except (OSError, KeyError, ValueError, pa.ArrowException):
            table = inventory.table()
            parts = [[table[c].to_pylist() for c in _INDEX_COLUMNS]]
        return cls.from_columns(parts)

    @classmethod
    def from_columns(cls, parts: Iterable[Sequence[Sequence[Any]]]) -> OverpassIndex:
        """Build the index from ``(bands, tslots, blocks, item_ids)`` column groups."""
        rows: dict[str, dict[int, list[SourceRow]]] = {}
        boxes: dict[str, tuple[int, int, int, int] | None] = {}
        for fams, tslots, blocks, items_col in parts:
            for fam, tslot, block, items in zip(fams, tslots, blocks, items_col, strict=True):
                if block not in boxes:
                    try:
                        boxes[block] = block_q_range(Block.parse(block))
                    except StoreError:
                        boxes[block] = None
                rows.setdefault(fam, {}).setdefault(int(tslot), []).append(
                    SourceRow(boxes[block], tuple(items or ()))
                )
        return cls(rows)

    def sources(self, family: str, tslot: int, lat_q: int, lng_q: int) -> list[str]:
        """Source item ids of the rows covering a cell at a tslot (sorted)."""
        out: set[str] = set()
        for row in self.rows.get(family, {}).get(int(tslot), ()):
            b = row.box
            if b is None or (b[0] <= lat_q < b[1] and b[2] <= lng_q < b[3]):
                out.update(row.item_ids)
        return sorted(out)

    def sources_many(
        self, family: str, tslot: int, lat_qs: npt.ArrayLike, lng_qs: npt.ArrayLike
    ) -> list[list[str]]:
        """:meth:`sources` of many cells at one tslot (each cell's list as it gives it).

        Cells covered by the same rows share one list object (callers do not mutate it).
        """
        lat = np.asarray(lat_qs, np.int64)
        lng = np.asarray(lng_qs, np.int64)
        rows = self.rows.get(family, {}).get(int(tslot), ())
        if not rows:
            empty: list[str] = []
            return [empty] * lat.size
        cover = np.ones((len(rows), lat.size), bool)
        for r, row in enumerate(rows):
            b = row.box
            if b is not None:
                cover[r] = (b[0] <= lat) & (lat < b[1]) & (b[2] <= lng) & (lng < b[3])
        keys = np.packbits(cover, axis=0).T
        lists: dict[bytes, list[str]] = {}
        out = []
        for j in range(lat.size):
            k = keys[j].tobytes()
            got = lists.get(k)
            if got is None:
                ids: set[str] = set()
                for r in np.flatnonzero(cover[:, j]).tolist():
                    ids.update(rows[r].item_ids)
                got = lists[k] = sorted(ids)
            out.append(got)
        return out

    def sources_any(self, family: str, tslot: int) -> list[str]:
        """Source item ids of every row of a family at a tslot (sorted)."""
        out: set[str] = set()
        for row in self.rows.get(family, {}).get(int(tslot), ()):
            out.update(row.item_ids)
        return sorted(out)

    def overpasses(
        self,
        family: str,
        box: tuple[int, int, int, int],
        t0: int | None = None,
        t1: int | None = None,
    ) -> list[tuple[int, list[str]]]:
        """Overpasses of a family touching a lattice box, ``t0 <= tslot <= t1``.

        Args:
            family: ``"s2"``, ``"s1"`` or ``"geotessera"``.
            box: ``(lat_q0, lat_q1, lng_q0, lng_q1)`` half-open.
            t0: First tslot (inclusive), or None.
            t1: Last tslot (inclusive), or None.

        Returns:
            ``[(tslot, sorted source item ids)]`` ascending by tslot.
        """
        got = self._by_tslot.get(family)
        if got is None:  # the family's rows in tslot order, made once (the index is immutable)
            ordered = sorted(self.rows.get(family, {}).items())
            got = self._by_tslot[family] = ([t for t, _ in ordered], ordered)
        keys, ordered = got
        lo = 0 if t0 is None else bisect.bisect_left(keys, t0)
        hi = len(keys) if t1 is None else bisect.bisect_right(keys, t1)
        out = []
        for tslot, rows in ordered[lo:hi]:
            items: set[str] = set()
            hit = False
            for row in rows:
                b = row.box
                if b is None or (
                    b[0] < box[1] and box[0] < b[1] and b[2] < box[3] and box[2] < b[3]
                ):
                    hit = True
                    items.update(row.item_ids)
            if hit:
                out.append((tslot, sorted(items)))
        return out
