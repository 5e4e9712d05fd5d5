"""One partition's writes to the cube, held until :meth:`~store.cube.write.CubeWriter.transaction`
commits them (or a coordinator merges the fork they were written into).

Contiguous writes are checked at once, held (copied), and encoded with
:class:`store.cube.codec.ChunkCodec` (the arrays' own codecs) at the end of the
transaction, the stored versions of all their partly covered chunks fetched in one
round trip; the chunks are then stored together. The partition's inventory rows
(:meth:`CubeTransaction.write_inventory`) are stored in the same session
(:mod:`store.cube.inventory`, one batched read and one batched write), so one commit
adds both. On object storage the writes that go through Zarr run under the storage
deadline (:mod:`store.deadline`).
"""

from __future__ import annotations

from collections.abc import Iterable
from functools import partial
from typing import Any

import icechunk as ic
import numpy as np
import numpy.typing as npt
import zarr
from zarr.core.buffer import Buffer
from zarr.core.sync import sync

from store.cube import summaries
from store.cube.bands import FAMILY_FLAGS, BandSpec, band_spec
from store.cube.boxes import cast_values, check_tslots, chunk_boxes
from store.cube.codec import ChunkCodec, check_box, get_many, is_contiguous, put_many
from store.cube.inventory import (
    INVENTORY_ARRAY,
    InventoryChunks,
    PartitionRows,
    write_partitions,
)
from store.deadline import UNSENT, within_deadline
from store.errors import (
    InvalidWrite,
    StorageUnavailable,
    TransactionClosed,
)
from store.inventory import InventoryRow
from store.snapshots import (
    storage_error_text,
)

__all__ = ["CubeTransaction"]


_Staged = tuple[
    ChunkCodec,
    npt.NDArray[Any],
    list[tuple[tuple[int, ...], tuple[slice, ...], tuple[slice, ...], bool]],
]
"""A held write: its array's codec, its values, the chunks its box meets (:func:`chunk_boxes`)."""


class CubeTransaction:
    """Writes of one partition; committed once by :meth:`CubeWriter.transaction`.

    Writes through the codec path are held and encoded, then stored together (one
    round trip each way), when the transaction ends normally, or before a write that
    goes through Zarr; a later write to the same chunk in the transaction sees them.
    """

    def __init__(
        self,
        session: ic.Session,
        partition_key: str,
        codecs: dict[str, ChunkCodec] | None = None,
        inventory: dict[str, InventoryChunks] | None = None,
        remote: bool = False,
    ) -> None:
        self._session = session
        self._remote = remote  # object storage: writes through Zarr under the storage deadline
        self._inventory_chunks = inventory if inventory is not None else {}
        self._arrays: dict[str, zarr.Array] = {}
        self._codecs = codecs if codecs is not None else {}
        self._pending: dict[str, Buffer | None] = {}
        self._staged: list[_Staged] = []
        self._inventory: dict[str, PartitionRows] = {}
        self._decoded: dict[tuple[str, tuple[int, int, int]], npt.NDArray[Any] | None] = {}
        self._touched: set[tuple[str, tuple[int, int, int]]] = set()
        self._written: set[tuple[str, tuple[int, ...]]] = set()
        self._open = True
        self.partition_key = partition_key
        """The partition this transaction materialises."""
        self.snapshot_id: str | None = None
        """Snapshot id after a successful exit (the tip if nothing changed)."""
        self.committed = False
        """Whether exiting created a new snapshot."""

    @property
    def chunks_written(self) -> int:
        """Distinct chunks (of every band) this transaction's writes cover, all-fill ones included."""
        return len(self._written)

    def _array(self, spec: BandSpec) -> zarr.Array:
        arr = self._arrays.get(spec.array_path)
        if arr is None:
            opened = zarr.open_array(
                self._session.store, path=spec.array_path, mode="r+", zarr_format=3
            )
            arr = opened.with_config({"write_empty_chunks": False})
            self._arrays[spec.array_path] = arr
        return arr

    def _codec(self, spec: BandSpec) -> ChunkCodec:
        # array metadata never changes once the layout exists: open it once per writer
        codec = self._codecs.get(spec.array_path)
        if codec is None:
            codec = ChunkCodec(self._array(spec), spec.array_path)
            self._codecs[spec.array_path] = codec
        return codec

    def _stage(
        self, codec: ChunkCodec, start: tuple[int, ...], data: npt.NDArray[Any], copy: bool
    ) -> None:
        """Hold a validated contiguous box until its chunks are encoded (a copy unless ``copy``
        is false: the caller may then reuse its array once ``write`` returns)."""
        stop = tuple(a + n for a, n in zip(start, data.shape, strict=True))
        boxes = list(chunk_boxes(codec, start, stop))
        held = np.array(data, copy=True, order="C") if copy else data
        self._staged.append((codec, held, boxes))
        self._written.update((codec.path, tuple(c)) for c, _, _, _ in boxes)
        self._touch(codec.path, [(c[0], c[1], c[2]) for c, _, _, _ in boxes])

    def _encode_staged(self) -> None:
        """Encode the staged boxes chunk by chunk into the pending set, in write order.

        Partly covered chunks are read-modify-write: the stored versions of all of them
        (those no earlier write of the transaction holds) are fetched in one round trip
        for the whole transaction, not one per write. A failure leaves the pending set
        and the held writes as they were.
        """
        staged, self._staged = self._staged, []
        if not staged:
            return
        try:
            self._encode(staged)
        except BaseException:
            self._staged = staged  # nothing encoded: still held
            raise

    def _encode(self, staged: list[_Staged]) -> None:
        fetch: dict[str, ChunkCodec] = {}
        for codec, _, boxes in staged:
            for c, _, _, whole in boxes:
                key = codec.key(c)
                if not whole and key not in self._pending:
                    fetch[key] = codec
        stored: dict[str, Buffer | None] = {}
        if fetch:
            keys = list(fetch)
            got = sync(get_many(self._session.store, keys, next(iter(fetch.values())).prototype))
            stored = dict(zip(keys, got, strict=True))
        encoded: dict[str, Buffer | None] = {}
        decoded: dict[tuple[str, tuple[int, int, int]], npt.NDArray[Any] | None] = {}
        for codec, data, boxes in staged:
            summarised = codec.path in _SUMMARY_INPUTS
            for coords, inner, outer, whole in boxes:
                key = codec.key(coords)
                if whole:
                    chunk = np.ascontiguousarray(data[outer])
                else:
                    # newest first: this encoding, earlier ones of the transaction, the store
                    old = (
                        encoded[key] if key in encoded else self._pending.get(key, stored.get(key))
                    )
                    if old is None:
                        chunk = np.full(codec.chunks, codec.fill_value, dtype=codec.dtype)
                    else:
                        chunk = codec.decode(old)
                    chunk[inner] = data[outer]
                fill = codec.is_fill(chunk)
                encoded[key] = None if fill else codec.encode(chunk)
                if summarised:
                    decoded[(codec.path, (coords[0], coords[1], coords[2]))] = (
                        None if fill else chunk
                    )
        self._pending.update(encoded)
        self._decoded.update(decoded)

    def _flush(self) -> None:
        """Encode what is staged and store the chunks encoded so far, all at once (one round
        trip to the store)."""
        self._encode_staged()
        if self._pending:
            sync(put_many(self._session.store, list(self._pending.items())))
            self._pending = {}

    def write(
        self,
        band: str,
        tslots: npt.ArrayLike,
        lat_q0: int,
        lng_q0: int,
        values: npt.ArrayLike,
        *,
        copy: bool = True,
    ) -> None:
        """Write a region of one band at its lattice position.

        Args:
            band: Band name (see :data:`BANDS`).
            tslots: Strictly increasing time slots of ``values``' first axis
                (day slots or year slots by the band's tempo); need not be
                contiguous.
            lat_q0: Row (``lat_q``) of ``values[:, 0]``.
            lng_q0: Column (``lng_q``) of ``values[:, :, 0]``.
            values: Array ``(len(tslots), h, w)`` (or ``(..., d)`` for vector
                bands). Fill values (NaN, 0, +inf for the Tessera scale) mean
                "no value"; chunks left all-fill are removed.
            copy: False: the transaction may hold ``values`` itself until it ends
                (then the caller must not change them before that); True: it holds a
                copy, and the caller may reuse its array once ``write`` returns.

        Raises:
            TransactionClosed: The transaction already committed or aborted.
            UnknownBand: Unknown band name.
            InvalidWrite: Shape or dtype mismatch, unsorted tslots.
            RegionOutOfBounds: The region leaves the lattice or the time axis.
        """
        if not self._open:
            raise TransactionClosed(f"transaction {self.partition_key!r} is closed")
        spec = band_spec(band)
        t = check_tslots(spec, tslots)
        data = cast_values(spec, values)
        extra = (spec.extra_dim[1],) if spec.extra_dim else ()
        if data.ndim != 3 + len(extra) or data.shape[0] != t.size or data.shape[3:] != extra:
            raise InvalidWrite(
                f"{spec.name} values shape {data.shape} does not match "
                f"({t.size}, h, w{', ' + str(extra[0]) if extra else ''})"
            )
        h, w = data.shape[1], data.shape[2]
        check_box(lat_q0, lat_q0 + h, lng_q0, lng_q0 + w)
        contiguous = is_contiguous(t)
        if contiguous:
            codec = self._codec(spec)
            if codec.supported:
                self._stage(codec, (int(t[0]), lat_q0, lng_q0, *(0,) * len(extra)), data, copy)
                return
        write = partial(self._write_zarr, spec, t, lat_q0, lng_q0, data, contiguous)
        # Zarr reads and writes the store now: under the storage deadline on object storage
        within_deadline(write, f"writing {spec.name}", UNSENT, remote=self._remote)

    def _write_zarr(
        self, spec: BandSpec, t: Any, lat_q0: int, lng_q0: int, data: Any, contiguous: bool
    ) -> None:
        h, w = data.shape[1], data.shape[2]
        ys, xs = slice(lat_q0, lat_q0 + h), slice(lng_q0, lng_q0 + w)
        self._flush()  # Zarr reads the store: it must see this transaction's chunks
        side = self._array(spec).chunks[1]
        tcs = sorted({int(x) // spec.time_chunk for x in t})
        coords = [
            (tc, cy, cx)
            for tc in tcs
            for cy in range(lat_q0 // side, (lat_q0 + h - 1) // side + 1)
            for cx in range(lng_q0 // side, (lng_q0 + w - 1) // side + 1)
        ]
        self._written.update((spec.array_path, c) for c in coords)
        if spec.array_path in _SUMMARY_INPUTS:  # the store holds these chunks now
            path = spec.array_path
            self._decoded = {k: v for k, v in self._decoded.items() if k[0] != path}
            self._touch(path, coords)
        if contiguous:
            self._array(spec)[(slice(int(t[0]), int(t[-1]) + 1), ys, xs)] = data
        else:
            self._array(spec).oindex[(t, ys, xs)] = data

    def write_inventory(self, key: str, rows: Iterable[InventoryRow]) -> None:
        """Record a partition's inventory rows, replacing its previous ones, in this commit.

        Args:
            key: The inventory partition key (``"<family>|<partition key>"``); no
                rows removes the partition's rows.
            rows: The partition's rows.

        Raises:
            TransactionClosed: The transaction already committed or aborted.
            InvalidInventory: Empty key or an invalid row.
        """
        if not self._open:
            raise TransactionClosed(f"transaction {self.partition_key!r} is closed")
        self._inventory[key] = PartitionRows.from_rows(key, rows)

    def _touch(self, path: str, coords: Iterable[tuple[int, int, int]]) -> None:
        """Mark the summaries that depend on these chunks of ``path`` as to be recomputed."""
        for band in _SUMMARY_INPUTS.get(path, ()):
            self._touched.update((band, c) for c in coords)

    def _chunks_of(
        self, spec: BandSpec, coords: list[tuple[int, int, int]]
    ) -> list[npt.NDArray[Any] | None]:
        """This transaction's view of some chunks ``(tc, cy, cx)`` of a band (None: not stored)."""
        codec = self._codec(spec)
        path = spec.array_path
        out: list[npt.NDArray[Any] | None] = [None] * len(coords)
        fetch: list[int] = []
        for i, c in enumerate(coords):
            if (path, c) in self._decoded:
                out[i] = self._decoded[(path, c)]
            else:
                fetch.append(i)
        if fetch:
            extra = (0,) * (len(codec.chunks) - 3)
            keys = [codec.key((*coords[i], *extra)) for i in fetch]
            pend = [self._pending.get(k, _ABSENT) for k in keys]
            missing = [k for k, p in zip(keys, pend, strict=True) if p is _ABSENT]
            got = sync(get_many(self._session.store, missing, codec.prototype)) if missing else []
            stored = dict(zip(missing, got, strict=True))
            for i, k, p in zip(fetch, keys, pend, strict=True):
                raw = stored[k] if p is _ABSENT else p
                out[i] = None if raw is None else codec.decode(raw)
        return out

    def _store_summaries(self) -> None:
        """Recompute the block summaries of every chunk this transaction changed (or whose flag it changed).

        They are stored with the chunks, so a snapshot's summaries always describe its chunks.
        """
        self._encode_staged()
        if not self._touched:
            return
        root: zarr.Group | None = None
        by_band: dict[str, list[tuple[int, int, int]]] = {}
        for band, c in sorted(self._touched):
            by_band.setdefault(band, []).append(c)
        self._touched = set()
        for band, coords in by_band.items():
            spec = band_spec(band)
            path = summaries.summary_path(band)
            codec = self._codecs.get(path)  # arrays are never removed: known once opened
            if codec is None:
                if root is None:
                    root = zarr.open_group(self._session.store, mode="r")
                if path not in root:  # a layout from before summaries: nothing to keep current
                    continue
                arr = zarr.open_array(self._session.store, path=path, mode="r+", zarr_format=3)
                codec = self._codecs[path] = ChunkCodec(arr, path)
            flag_band, clear_value = FAMILY_FLAGS[spec.family]
            values = self._chunks_of(spec, coords)
            flags = self._chunks_of(band_spec(flag_band), coords)
            grid = summaries.Grid.of(spec)
            side = self._codec(spec).chunks[1]
            sub = side // codec.chunks[1]
            for (tc, cy, cx), v, f in zip(coords, values, flags, strict=True):
                if v is None and f is None:
                    rows = np.broadcast_to(summaries.empty(), codec.chunks)
                else:
                    rows = summaries.summarise_chunk(v, f, clear_value, cy * side, grid, sub)
                chunk = np.ascontiguousarray(rows.reshape(codec.chunks))
                self._pending[codec.key((tc, cy, cx, 0))] = codec.encode(chunk)

    def _store_inventory(self) -> None:
        if not self._inventory:
            return
        chunks = self._inventory_chunks.get(INVENTORY_ARRAY)  # opened once per writer
        if chunks is None:
            chunks = self._inventory_chunks[INVENTORY_ARRAY] = InventoryChunks.open(self._session)
        write_partitions(self._session, self._inventory.values(), chunks)
        self._inventory = {}

    def store_pending(self) -> None:
        """Store what the transaction holds back (summaries, encoded chunks, inventory rows) in its
        session and close it: what :meth:`CubeWriter.transaction` does before committing, and a
        forked session's writer (:mod:`store.cube.cooperative`) before handing the fork back."""
        try:
            self._store_summaries()
            self._flush()
            self._store_inventory()
        except ic.IcechunkError as exc:
            raise StorageUnavailable(
                f"storing the chunks of {self.partition_key!r} failed, nothing committed:"
                f" {storage_error_text(exc)}"
            ) from exc
        finally:
            self._close()

    def _close(self) -> None:
        self._open = False
        self._pending = {}
        self._staged = []
        self._inventory = {}
        self._decoded = {}
        self._touched = set()
        self._arrays.clear()


_SUMMARY_INPUTS = summaries.summary_inputs()
"""Array path -> the summarised bands whose summaries depend on it."""
_ABSENT: Any = object()
