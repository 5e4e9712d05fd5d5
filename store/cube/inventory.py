"""The scene inventory inside the cube: each partition's rows committed with its chunks.

The inventory (:mod:`store.inventory`: which overpasses exist per band family,
tslot and block) lives in the cube's icechunk repository as one array,
``inventory/partitions`` (Zarr ``string`` data type, ``vlen-utf8`` + Zstd),
holding **one chunk per partition key**. A partition's chunk is written by the
same :class:`~store.cube.write.CubeTransaction` as its cube chunks, so the
commit that adds the chunks adds the rows, atomically, and every snapshot holds
exactly the inventory of its own chunks; a reader of snapshot S (the tip, an id
or ``as_of`` a time) reads S's rows and nothing later.

Why one chunk per partition rather than one node (group attributes or a small
array) per partition: icechunk keeps every node's metadata, attributes included,
inside the snapshot file, and reading thousands of nodes goes through zarr's
per-node machinery; chunks live in the array's manifest and chunk objects, are
listed from the manifest in one call and fetched concurrently. Partitions
written in parallel touch different chunks, so icechunk's ``ConflictDetector``
rebases their commits like the cube's own (a partition owns its chunks).

* Position of a key's chunk: the 62-bit BLAKE2b digest of the key, split into
  two 31-bit chunk coordinates (icechunk's chunk indices are 32-bit). The chunk
  stores its key, and a write that finds another key at its position raises
  :class:`~store.errors.InvalidInventory` instead of overwriting it.
* Chunk payload: JSON text ``{"v": 1, "key", "written_at", "columns": {name:
  [values]}}`` with the row columns of :data:`store.inventory.SCHEMA` (except
  ``date``, ``partition_key``, ``snapshot_id`` and ``written_at``, which follow
  from the rest). JSON decodes straight into the lists the
  :class:`~store.inventory.OverpassIndex` is built from (no per-file Parquet or
  Arrow metadata to parse), and any Zarr reader can read it.
* A partition with no rows has no chunk (writing none deletes it).

Stores written before (a snapshot without ``inventory/partitions``) are read
from the Parquet files under ``<data_dir>/inventory/`` (:class:`store.inventory.Inventory`)
with :attr:`SnapshotInventory.versioned` false and a warning; the first
:class:`~store.cube.write.CubeWriter` opened on such a store (``earthmem ingest``,
or :func:`store.cube.write.migrate_inventory`) adds the array and imports those rows in the same
layout commit, so later snapshots are versioned. The Parquet files are left in
place (nothing stored is removed); they keep answering for the older snapshots.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import logging
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import icechunk as ic
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import zarr
from numcodecs import Zstd
from numcodecs.vlen import VLenUTF8
from zarr.abc.codec import SupportsSyncCodec
from zarr.codecs import VLenUTF8Codec, ZstdCodec
from zarr.core.buffer import Buffer, default_buffer_prototype
from zarr.core.codec_pipeline import codecs_from_list
from zarr.core.sync import sync
from zarr.errors import ArrayNotFoundError, GroupNotFoundError

from store.cube.codec import get_many, get_stored, put_many
from store.errors import InvalidInventory
from store.inventory import SCHEMA, Inventory, InventoryRow, OverpassIndex
from store.tslot import slot_to_date

__all__ = [
    "INVENTORY_ARRAY",
    "InventoryChunks",
    "PartitionRows",
    "SnapshotInventory",
    "chunk_position",
    "create_inventory_array",
    "legacy_partitions",
    "write_partitions",
]

_LOG = logging.getLogger("earthmem.inventory")

INVENTORY_ARRAY = "inventory/partitions"
"""Path of the inventory array inside the cube."""

PAYLOAD_VERSION = 1
"""Version of the chunk payload (``"v"``)."""

_SIDE = 1 << 31
_COLUMNS = (
    "band",
    "tempo",
    "tslot",
    "block",
    "item_ids",
    "clear_cells",
    "total_cells",
    "cloud_fraction",
)


def chunk_position(key: str) -> tuple[int, int]:
    """Chunk coordinates of a partition key (62 bits of its BLAKE2b digest)."""
    h = int.from_bytes(hashlib.blake2b(key.encode("utf-8"), digest_size=8).digest(), "big")
    return (h >> 33) & (_SIDE - 1), (h >> 2) & (_SIDE - 1)


@dataclass(frozen=True)
class PartitionRows:
    """One partition's inventory rows as stored in its chunk (columns of equal length)."""

    key: str
    """The inventory partition key (``"s2|<week>|<block>"``, ``"tessera|<year>"``)."""
    written_at: str | None
    """When the rows were written (ISO 8601, UTC)."""
    columns: Mapping[str, Sequence[Any]] = field(default_factory=dict)
    """Column name (see ``_COLUMNS``) -> values, one per row."""

    @property
    def n_rows(self) -> int:
        """Number of rows."""
        return len(self.columns.get("band", ()))

    @classmethod
    def from_rows(
        cls, key: str, rows: Iterable[InventoryRow], written_at: dt.datetime | None = None
    ) -> PartitionRows:
        """Validated rows of a partition.

        Raises:
            InvalidInventory: Empty key or an invalid row.
        """
        if not key:
            raise InvalidInventory("partition_key must be non-empty")
        rows = list(rows)
        for row in rows:
            row.validate()
        when = written_at or dt.datetime.now(dt.UTC)
        if when.tzinfo is None:
            when = when.replace(tzinfo=dt.UTC)
        cols: dict[str, list[Any]] = {
            "band": [r.band for r in rows],
            "tempo": [r.tempo for r in rows],
            "tslot": [int(r.tslot) for r in rows],
            "block": [r.block for r in rows],
            "item_ids": [list(r.item_ids) for r in rows],
            "clear_cells": [int(r.clear_cells) for r in rows],
            "total_cells": [int(r.total_cells) for r in rows],
            "cloud_fraction": [r.cloud_fraction for r in rows],
        }
        return cls(key, when.isoformat(), cols)

    @classmethod
    def from_table(cls, key: str, table: pa.Table) -> PartitionRows:
        """Rows of one partition from a table with :data:`store.inventory.SCHEMA` (migration)."""
        cols = {c: table[c].to_pylist() for c in _COLUMNS}
        cols["item_ids"] = [list(v or ()) for v in cols["item_ids"]]
        times = [t for t in table["written_at"].to_pylist() if t is not None]
        return cls(key, max(times).isoformat() if times else None, cols)

    def encode(self) -> str:
        """The chunk payload (JSON text)."""
        return json.dumps(
            {
                "v": PAYLOAD_VERSION,
                "key": self.key,
                "written_at": self.written_at,
                "columns": {c: list(self.columns.get(c, ())) for c in _COLUMNS},
            },
            separators=(",", ":"),
        )

    @classmethod
    def decode(cls, text: str) -> PartitionRows:
        """Parse a chunk payload.

        Raises:
            InvalidInventory: Not a payload of a known version.
        """
        try:
            doc = json.loads(text)
            if doc.get("v") != PAYLOAD_VERSION:
                raise ValueError(f"unknown payload version {doc.get('v')!r}")
            cols = {c: list(doc["columns"][c]) for c in _COLUMNS}
            key = str(doc["key"])
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise InvalidInventory(f"unreadable inventory chunk: {exc}") from exc
        if len({len(v) for v in cols.values()}) > 1:
            raise InvalidInventory(f"inventory chunk of {key!r} has columns of unequal length")
        return cls(key, doc.get("written_at"), cols)


def create_inventory_array(root: zarr.Group) -> zarr.Array:
    """Create the (empty) inventory array in a writable session's root group."""
    group = root.require_group(INVENTORY_ARRAY.split("/")[0])
    return group.create_array(
        INVENTORY_ARRAY.split("/")[1],
        shape=(_SIDE, _SIDE),
        chunks=(1, 1),
        dtype=str,
        fill_value="",
        dimension_names=("partition_hi", "partition_lo"),
        attributes={
            "earthmem_inventory": PAYLOAD_VERSION,
            "description": "one chunk per partition key: JSON of its inventory rows; "
            "position = 62-bit BLAKE2b of the key (store.cube.inventory)",
        },
        config={"write_empty_chunks": False},
    )


class InventoryChunks:
    """Direct reads and writes of inventory chunks in a writable session (no zarr indexing).

    zarr's ``getitem`` / ``setitem`` of one ``(1, 1)`` chunk costs an array open and
    two event-loop calls with their thread-pool hops (about 10 ms CPU a transaction,
    measured); this does the check read and the write of all a transaction's partitions
    in one batched call each, with the array's own codecs (``vlen-utf8`` + Zstd: the
    bytes zarr stores, a test compares them). A writer opens it once
    (:class:`~store.cube.write.CubeWriter`: arrays are never removed).
    """

    def __init__(self, arr: zarr.Array) -> None:
        meta = arr.metadata
        self._meta = meta
        self.prototype = default_buffer_prototype()
        self._spec = meta.get_chunk_spec((0, 0), arr.async_array.config, self.prototype)
        array_array, array_bytes, bytes_bytes = codecs_from_list(meta.codecs)  # type: ignore[union-attr]
        self._array_bytes: Any = array_bytes
        self._bytes_bytes: tuple[Any, ...] = tuple(bytes_bytes)
        self._decode = _direct_decoder(array_array, array_bytes, bytes_bytes)
        self.supported = (
            self._decode is not None
            and isinstance(array_bytes, VLenUTF8Codec)
            and all(isinstance(c, SupportsSyncCodec) for c in bytes_bytes)
        )
        """Whether the direct path applies (otherwise :func:`write_partitions` uses zarr's)."""

    @classmethod
    def open(cls, session: ic.Session) -> InventoryChunks:
        """The inventory array of a session's cube.

        Raises:
            InvalidInventory: The cube has no inventory array.
        """
        return cls(_open_inventory(session))

    def key(self, y: int, x: int) -> str:
        """Store key of the chunk at ``(y, x)``."""
        return f"{INVENTORY_ARRAY}/{self._meta.encode_chunk_key((y, x))}"

    def encode(self, text: str) -> Buffer:
        """Stored bytes of a chunk holding ``text``."""
        value = np.empty((1, 1), dtype=object)
        value[0, 0] = text
        data: Any = self._array_bytes._encode_sync(
            self.prototype.nd_buffer.from_numpy_array(value), self._spec
        )
        for codec in self._bytes_bytes:
            data = codec._encode_sync(data, self._spec)
        assert isinstance(data, Buffer)
        return data

    def decode(self, data: Buffer) -> str:
        """The text of a stored chunk."""
        assert self._decode is not None
        return self._decode(data.to_bytes())


def _open_inventory(session: ic.Session) -> zarr.Array:
    try:
        arr = zarr.open_array(session.store, path=INVENTORY_ARRAY, mode="r+", zarr_format=3)
    except (ArrayNotFoundError, GroupNotFoundError, FileNotFoundError) as exc:
        raise InvalidInventory(
            "the cube has no inventory array; open a CubeWriter to upgrade its layout"
        ) from exc
    return arr


def _other_key(part: PartitionRows, old: str, y: int, x: int) -> None:
    if old and PartitionRows.decode(old).key != part.key:
        raise InvalidInventory(
            f"inventory chunk ({y}, {x}) of {part.key!r} holds another partition's rows"
        )


def write_partitions(
    session: ic.Session, parts: Iterable[PartitionRows], chunks: InventoryChunks | None = None
) -> None:
    """Store partitions' rows in a writable session (a partition with no rows: its chunk removed).

    Args:
        session: A writable session of the cube.
        parts: The partitions' rows.
        chunks: The inventory array's direct access, when the caller keeps one
            (:class:`InventoryChunks`); opened here otherwise.

    Raises:
        InvalidInventory: The cube has no inventory array, or another key owns a
            partition's chunk position.
    """
    parts = list(parts)
    if not parts:
        return
    if chunks is None:
        chunks = InventoryChunks.open(session)
    if chunks.supported:
        _write_direct(session, parts, chunks)
        return
    arr = _open_inventory(session).with_config({"write_empty_chunks": False})
    for part in parts:
        y, x = chunk_position(part.key)
        old = str(np.asarray(arr[y, x]).item())
        _other_key(part, old, y, x)
        text = part.encode() if part.n_rows else ""
        if text == old:
            continue
        value = np.empty((1, 1), dtype=object)
        value[0, 0] = text
        arr[y : y + 1, x : x + 1] = value


def _write_direct(session: ic.Session, parts: list[PartitionRows], chunks: InventoryChunks) -> None:
    """:func:`write_partitions` through :class:`InventoryChunks`: one batched read, one write."""
    store = session.store
    pos = [chunk_position(p.key) for p in parts]
    keys = [chunks.key(y, x) for y, x in pos]
    unique = list(dict.fromkeys(keys))  # partitions sharing a position are read once
    got = sync(get_many(store, unique, chunks.prototype))
    current = {k: ("" if b is None else chunks.decode(b)) for k, b in zip(unique, got, strict=True)}
    puts: dict[str, Buffer | None] = {}
    for part, (y, x), key in zip(parts, pos, keys, strict=True):
        old = current[key]
        _other_key(part, old, y, x)
        text = part.encode() if part.n_rows else ""
        if text == old:
            continue
        current[key] = text
        puts[key] = chunks.encode(text) if text else None  # "" is the fill: no chunk
    if puts:
        sync(put_many(store, list(puts.items())))


async def _coords(session: ic.Session) -> list[tuple[int, ...]]:
    return [c async for c in session.chunk_coordinates("/" + INVENTORY_ARRAY, batch_size=10_000)]


def _direct_decoder(
    array_array: Sequence[Any], array_bytes: Any, bytes_bytes: Sequence[Any]
) -> Callable[[bytes], str] | None:
    """The text of one chunk of the inventory's own codecs (vlen-utf8 after Zstd), decoded by
    the numcodecs codecs zarr itself calls, without zarr's per-chunk buffer wrapping (about
    two thirds of a cold inventory load's CPU: 334 one-element chunks); None for other codecs.
    """
    if array_array or not isinstance(array_bytes, VLenUTF8Codec):
        return None
    if not all(isinstance(c, ZstdCodec) for c in bytes_bytes):
        return None
    zstds = [Zstd(level=c.level, checksum=c.checksum) for c in reversed(bytes_bytes)]
    vlen = VLenUTF8()

    def decode(raw: bytes) -> str:
        data: Any = raw
        for z in zstds:
            data = z.decode(data)
        return str(vlen.decode(data).reshape(-1)[0])

    return decode


def _read_chunks(arr: zarr.Array, coords: Sequence[tuple[int, ...]]) -> list[PartitionRows]:
    """Fetch chunks concurrently (one event-loop call) and decode them with the array's codecs."""
    if not coords:
        return []
    meta = arr.metadata
    proto = default_buffer_prototype()
    keys = [f"{INVENTORY_ARRAY}/{meta.encode_chunk_key(tuple(c))}" for c in coords]
    bufs = sync(get_stored(arr.store, keys, proto))  # listed by the manifest: batched calls
    spec = meta.get_chunk_spec((0, 0), arr.async_array.config, proto)
    array_array, array_bytes, bytes_bytes = codecs_from_list(meta.codecs)  # type: ignore[union-attr]
    direct = _direct_decoder(array_array, array_bytes, bytes_bytes)
    sync_ok = not array_array and all(
        isinstance(c, SupportsSyncCodec) for c in (array_bytes, *bytes_bytes)
    )
    out = []
    for c, buf in zip(coords, bufs, strict=True):
        if buf is None:
            continue
        if direct is not None:
            text = direct(buf.to_bytes())
        elif sync_ok:
            data: Any = buf
            for codec in reversed(bytes_bytes):
                data = codec._decode_sync(data, spec)  # type: ignore[attr-defined]
            text = str(array_bytes._decode_sync(data, spec).as_numpy_array().reshape(-1)[0])  # type: ignore[attr-defined]
        else:  # other codecs: zarr's own read of the one chunk
            text = str(np.asarray(arr[c[0], c[1]]).item())
        if text:
            out.append(PartitionRows.decode(text))
    return out


class SnapshotInventory:
    """The inventory of one cube snapshot: its partitions' rows, table and overpass index.

    Built by :meth:`load`; the table and the index are built once, on first use.
    """

    def __init__(
        self,
        snapshot_id: str,
        partitions: Mapping[str, PartitionRows],
        *,
        versioned: bool,
        legacy: Inventory | None = None,
    ) -> None:
        self.snapshot_id = snapshot_id
        """The snapshot these rows belong to."""
        self.partitions = dict(partitions)
        """Partition key -> rows (versioned stores)."""
        self.versioned = versioned
        """False: the snapshot predates the versioned inventory and the rows are the legacy
        Parquet files' (not tied to this snapshot)."""
        self._legacy = legacy
        self._table: pa.Table | None = None
        self._index: OverpassIndex | None = None

    @classmethod
    def load(
        cls,
        session: ic.Session,
        *,
        data_dir: str | os.PathLike[str] | None = None,
        previous: SnapshotInventory | None = None,
        diff: Any | None = None,
    ) -> SnapshotInventory:
        """Read a snapshot's inventory.

        Args:
            session: A read-only session on the snapshot.
            data_dir: Data directory whose ``inventory/*.parquet`` answer for a
                snapshot without the inventory array (stores written before).
            previous: The inventory of an ancestor snapshot: only the partitions
                changed since (``diff``) are read.
            diff: icechunk's diff from ``previous``'s snapshot to this one; without it (none
                could be had: a reset branch, storage that did not answer) every partition
                is read.
        """
        snap = str(session.snapshot_id)
        try:
            arr = zarr.open_array(session.store, path=INVENTORY_ARRAY, mode="r", zarr_format=3)
        except (ArrayNotFoundError, GroupNotFoundError, FileNotFoundError):
            legacy = Inventory(data_dir) if data_dir is not None else None
            _LOG.warning(
                "snapshot %s has no versioned inventory: reading the Parquet files of %s "
                "(not tied to the snapshot); an ingest migrates them",
                snap,
                legacy.root if legacy is not None else "(no data directory)",
            )
            return cls(snap, {}, versioned=False, legacy=legacy)
        changed = _changed_since(previous, snap, diff)
        if changed is not None and previous is not None:
            parts = dict(previous.partitions)
            found = {p.key: p for p in _read_chunks(arr, changed)}
            for y, x in changed:
                gone = [k for k in parts if chunk_position(k) == (y, x) and k not in found]
                for k in gone:
                    del parts[k]
            parts.update(found)
            # in chunk position order, as a whole load lists them
            ordered = sorted(parts.items(), key=lambda kv: chunk_position(kv[0]))
            return cls(snap, dict(ordered), versioned=True)
        # sorted: the same order whatever manifests (splits) list the chunks
        rows = _read_chunks(arr, sorted(sync(_coords(session))))
        return cls(snap, {p.key: p for p in rows}, versioned=True)

    @classmethod
    def load_partitions(
        cls,
        session: ic.Session,
        keys: Iterable[str],
        *,
        data_dir: str | os.PathLike[str] | None = None,
    ) -> SnapshotInventory:
        """Read only the rows of the partitions ``keys`` of a snapshot: one chunk each.

        For a writer that needs a few partitions of a large inventory (the item ids a range's
        weeks already store): its cost follows ``keys``, not the store. The result's
        :meth:`table` and overpass index cover those partitions only. A snapshot without the
        inventory array answers from the legacy Parquet files, as :meth:`load` does.
        """
        snap = str(session.snapshot_id)
        try:
            arr = zarr.open_array(session.store, path=INVENTORY_ARRAY, mode="r", zarr_format=3)
        except (ArrayNotFoundError, GroupNotFoundError, FileNotFoundError):
            legacy = Inventory(data_dir) if data_dir is not None else None
            return cls(snap, {}, versioned=False, legacy=legacy)
        wanted = set(keys)
        rows = _read_chunks(arr, sorted({chunk_position(k) for k in wanted}))
        return cls(snap, {p.key: p for p in rows if p.key in wanted}, versioned=True)

    def partition_item_ids(self, key: str) -> frozenset[str]:
        """Every item id a partition's rows name (empty when it has none)."""
        if not self.versioned:
            return self._legacy.partition_item_ids(key) if self._legacy is not None else frozenset()
        part = self.partitions.get(key)
        if part is None:
            return frozenset()
        return frozenset(i for ids in part.columns.get("item_ids", ()) for i in (ids or ()))

    def table(self) -> pa.Table:
        """All rows as a table with :data:`store.inventory.SCHEMA`, sorted by band, tslot, block.

        ``snapshot_id`` is null for rows stored in the cube (they belong to this snapshot).
        """
        if self._table is None:
            self._table = self._legacy.table() if self._legacy is not None else self._build()
        return self._table

    def _build(self) -> pa.Table:
        cols: dict[str, list[Any]] = {c: [] for c in _COLUMNS}
        keys: list[str] = []
        written: list[dt.datetime | None] = []
        for part in self.partitions.values():
            n = part.n_rows
            for c in _COLUMNS:
                cols[c].extend(part.columns[c])
            keys.extend([part.key] * n)
            when = dt.datetime.fromisoformat(part.written_at) if part.written_at else None
            written.extend([when] * n)
        dates = [
            slot_to_date(int(t), te) for t, te in zip(cols["tslot"], cols["tempo"], strict=True)
        ]
        table = (
            pa.table(
                {
                    **cols,
                    "date": dates,
                    "partition_key": keys,
                    "snapshot_id": [None] * len(keys),
                    "written_at": written,
                },
            )
            .select(SCHEMA.names)
            .cast(SCHEMA)
        )
        return table.sort_by(
            [("band", "ascending"), ("tslot", "ascending"), ("block", "ascending")]
        )

    def overpass_index(self) -> OverpassIndex:
        """The :class:`~store.inventory.OverpassIndex` of this snapshot's rows."""
        if self._index is None:
            if self._legacy is not None:
                self._index = OverpassIndex.load(self._legacy)
            else:
                self._index = OverpassIndex.from_columns(
                    (
                        p.columns["band"],
                        p.columns["tslot"],
                        p.columns["block"],
                        p.columns["item_ids"],
                    )
                    for p in self.partitions.values()
                )
        return self._index


def _changed_since(
    previous: SnapshotInventory | None, snap: str, diff: Any
) -> list[tuple[int, int]] | None:
    """Inventory chunks changed from ``previous`` to ``snap`` by icechunk's ``diff`` between
    them; None = read everything."""
    if previous is None or not previous.versioned:
        return None
    if previous.snapshot_id == snap:
        return []
    if diff is None:
        return None  # no diff to be had (the reader asked once: store.cube.carry.diff_since)
    path = "/" + INVENTORY_ARRAY
    if path in diff.new_arrays or path in diff.deleted_arrays or path in diff.updated_arrays:
        return None
    return [(int(c[0]), int(c[1])) for c in diff.updated_chunks.get(path, ())]


def legacy_partitions(data_dir: str | os.PathLike[str]) -> list[PartitionRows]:
    """The rows of the legacy Parquet files under ``<data_dir>/inventory/``, per partition."""
    table = Inventory(data_dir).table()
    if not table.num_rows:
        return []
    out = []
    keys = table["partition_key"]
    for key in sorted(set(keys.to_pylist())):
        out.append(PartitionRows.from_table(key, table.filter(pc.equal(keys, key))))
    return out
