"""Reading the cube: one snapshot, its chunk index, and every way the API reads it.

:class:`CubeReader` opens a read-only session on one snapshot (the tip, an id or
``as_of`` a time). It knows which chunks exist from the snapshot's chunk
manifest (:meth:`CubeReader.chunk_index`), so reads never touch absent chunks,
and reads in three shapes:

* **regions** as ``xarray.DataArray`` (:meth:`~CubeReader.read_region`,
  ``read_bbox``, ``read_block``, ``cell_series``), through zarr; reads above
  ``max_region_elements`` raise :class:`~store.errors.RegionTooLarge`;
* **columns**: one block's whole time column of a band, cached, for per-cell
  queries (:meth:`~CubeReader.column`, :meth:`~CubeReader.column_series`);
* **tiles**: single decoded chunks, cached, fetched concurrently and decoded
  with the band's own codecs (:meth:`~CubeReader.tiles`,
  :meth:`~CubeReader.read_chunks`), for area queries.

Columns and tiles live in a :class:`~store.cube.cache.ChunkCache` keyed by
snapshot; a server gives all its readers one cache. :attr:`CubeReader.inventory`
is the snapshot's own scene inventory (:mod:`store.cube.inventory`).
"""

from __future__ import annotations

import asyncio
import datetime as dt
import math
import os
from collections.abc import AsyncIterator, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt
import zarr
from zarr.core.sync import sync

from store.address import bbox_q_range
from store.blocks import Block, block_q_range
from store.cube.bands import X_SIZE, YEAR_SLOTS, BandSpec, band_spec
from store.cube.cache import ChunkCache, Column
from store.cube.codec import ChunkCodec, check_box, fill_mask, is_contiguous
from store.cube.inventory import SnapshotInventory
from store.cube.labels import region_dataarray
from store.cube.layout import DEFAULT_BLOCK_LEVEL, MAX_REGION_ELEMENTS, block_level_of
from store.errors import RegionOutOfBounds, RegionTooLarge, SnapshotNotFound
from store.snapshots import (
    MAIN_BRANCH,
    SnapshotInfo,
    cube_location,
    list_snapshots,
    lookup_snapshot,
    open_repository,
    open_storage,
    snapshot_at,
)
from store.threads import worker_pool

if TYPE_CHECKING:
    import xarray as xr

__all__ = ["THREADED_DECODE_MIN", "CubeReader"]

THREADED_DECODE_MIN = 4
"""Chunks per :meth:`CubeReader.read_chunks` call from which decoding runs on the worker pool."""


class CubeReader:
    """Read-only view of one cube snapshot.

    Args:
        data_dir: Data directory holding ``cube.icechunk`` (ignored when
            ``storage`` is given).
        storage: Repository location (path or ``s3://bucket/prefix``).
        snapshot_id: Read this snapshot.
        as_of: Read the latest snapshot committed at or before this time
            (naive = UTC). At most one of ``snapshot_id`` / ``as_of``.
        max_region_elements: Cap on elements per read (default
            :data:`MAX_REGION_ELEMENTS`).
        cache: Cache of decoded columns and tiles to use (shared by the readers of a
            server, entries keyed by snapshot); default: a cache of this reader's own.
        inventory_from: A reader of an earlier snapshot whose loaded inventory this one
            updates (only the partitions changed since are read).

    Raises:
        CubeNotFound: No cube at the location.
        SnapshotNotFound: Unknown ``snapshot_id``, or nothing at ``as_of``.
    """

    def __init__(
        self,
        data_dir: str | os.PathLike[str] | None = None,
        *,
        storage: str | os.PathLike[str] | None = None,
        snapshot_id: str | None = None,
        as_of: dt.datetime | None = None,
        max_region_elements: int = MAX_REGION_ELEMENTS,
        cache: ChunkCache | None = None,
        inventory_from: CubeReader | None = None,
    ) -> None:
        if snapshot_id is not None and as_of is not None:
            raise ValueError("give snapshot_id or as_of, not both")
        if storage is None:
            if data_dir is None:
                raise ValueError("give data_dir or storage")
            storage = cube_location(data_dir)
        self.repo = open_repository(open_storage(storage))
        if as_of is not None:
            found = snapshot_at(self.repo, as_of)
            if found is None:
                raise SnapshotNotFound(f"no snapshot committed at or before {as_of.isoformat()}")
            snapshot_id = found.id
        if snapshot_id is not None:
            lookup_snapshot(self.repo, snapshot_id)
            self.session = self.repo.readonly_session(snapshot_id=snapshot_id)
        else:
            self.session = self.repo.readonly_session(MAIN_BRANCH)
        self._snapshot_id = str(self.session.snapshot_id)
        self.max_region_elements = max_region_elements
        self.cache = cache if cache is not None else ChunkCache()
        """Decoded columns and tiles (shared by the readers given the same cache)."""
        root = zarr.open_group(self.session.store, mode="r")
        self.block_level = block_level_of(dict(root.attrs), DEFAULT_BLOCK_LEVEL)
        self._arrays: dict[str, zarr.Array] = {}
        self._index: dict[str, dict[tuple[int, int], npt.NDArray[np.int64]]] = {}
        self._codecs: dict[str, ChunkCodec | None] = {}
        self._data_dir = data_dir
        self._inventory: SnapshotInventory | None = None
        self._inventory_base = inventory_from._inventory if inventory_from is not None else None

    @property
    def snapshot_id(self) -> str:
        """Id of the snapshot this reader sees (read once: it never changes)."""
        return self._snapshot_id

    @property
    def snapshot(self) -> SnapshotInfo:
        """Info (time, message, metadata) of the snapshot this reader sees."""
        return lookup_snapshot(self.repo, self.snapshot_id)

    @property
    def inventory(self) -> SnapshotInventory:
        """This snapshot's scene inventory: rows, table and overpass index (read once)."""
        if self._inventory is None:
            with self.cache.single_flight(("inventory", self._snapshot_id)):
                if self._inventory is None:
                    self._inventory = SnapshotInventory.load(
                        self.session,
                        data_dir=self._data_dir,
                        previous=self._inventory_base,
                        repo=self.repo,
                    )
                    self._inventory_base = None
        return self._inventory

    def list_snapshots(self) -> list[SnapshotInfo]:
        """Snapshots of ``main``, newest first (not only those up to this reader's)."""
        return list_snapshots(self.repo)

    def array(self, band: str) -> zarr.Array:
        """The band's Zarr array in this snapshot (read-only store; writes raise).

        Args:
            band: Band name.

        Returns:
            The lazily-read Zarr array (full lattice shape).
        """
        spec = band_spec(band)
        arr = self._arrays.get(spec.array_path)
        if arr is None:
            arr = zarr.open_array(self.session.store, path=spec.array_path, mode="r", zarr_format=3)
            self._arrays[spec.array_path] = arr
        return arr

    def chunks(self, band: str) -> npt.NDArray[np.int64]:
        """Coordinates of the chunks that exist for a band, ``(n, ndim)`` sorted.

        Args:
            band: Band name.

        Returns:
            Chunk grid coordinates (time chunk, y chunk, x chunk[, 0]).
        """
        spec = band_spec(band)

        async def collect() -> list[tuple[int, ...]]:
            coords: AsyncIterator[tuple[int, ...]] = self.session.chunk_coordinates(
                "/" + spec.array_path, batch_size=10_000
            )
            return [c async for c in coords]

        found = sync(collect())
        ndim = len(spec.shape)
        out = np.array(sorted(found), dtype=np.int64).reshape(len(found), ndim)
        return out

    def chunk_index(self, band: str) -> dict[tuple[int, int], npt.NDArray[np.int64]]:
        """The band's stored chunks: ``(chunk row, chunk column)`` -> sorted time chunks.

        Built once per reader from the snapshot's chunk manifest (one thread builds
        it while others wait).
        """
        spec = band_spec(band)
        index = self._index.get(spec.array_path)
        if index is not None:
            return index
        with self.cache.single_flight(("index", self._snapshot_id, spec.name)):
            index = self._index.get(spec.array_path)
            if index is None:
                index = self._build_index(spec)
                self._index[spec.array_path] = index
        return index

    def _build_index(self, spec: BandSpec) -> dict[tuple[int, int], npt.NDArray[np.int64]]:
        coords = self.chunks(spec.name)
        index: dict[tuple[int, int], npt.NDArray[np.int64]] = {}
        if coords.size:
            keys = coords[:, 1] * X_SIZE + coords[:, 2]
            order = np.lexsort((coords[:, 0], keys))
            coords, keys = coords[order], keys[order]
            starts = np.flatnonzero(np.r_[True, keys[1:] != keys[:-1]])
            for s, e in zip(starts.tolist(), [*starts[1:].tolist(), len(keys)], strict=True):
                index[(int(coords[s, 1]), int(coords[s, 2]))] = np.unique(coords[s:e, 0])
        return index

    def _candidate_tslots(
        self,
        spec: BandSpec,
        lat_q0: int,
        lat_q1: int,
        lng_q0: int,
        lng_q1: int,
        t0: int | None,
        t1: int | None,
    ) -> npt.NDArray[np.int64]:
        """Time slots of existing chunks intersecting the region, within [t0, t1)."""
        lo = 0 if t0 is None else t0
        hi = spec.time_size if t1 is None else t1
        if not 0 <= lo < hi <= spec.time_size:
            raise RegionOutOfBounds(
                f"tslot range [{lo}, {hi}) is empty or outside [0, {spec.time_size})"
            )
        side = 1 << self.block_level
        index = self.chunk_index(spec.name)
        parts = [
            tcs
            for cy in range(lat_q0 // side, (lat_q1 - 1) // side + 1)
            for cx in range(lng_q0 // side, (lng_q1 - 1) // side + 1)
            if (tcs := index.get((cy, cx))) is not None
        ]
        if not parts:
            return np.zeros(0, dtype=np.int64)
        tcs = np.unique(np.concatenate(parts))
        step = spec.time_chunk
        slots = (tcs[:, None] * step + np.arange(step)[None, :]).ravel()
        return slots[(slots >= lo) & (slots < hi) & (slots < spec.time_size)]

    def _read(
        self, spec: BandSpec, slots: npt.NDArray[np.int64], ys: slice, xs: slice
    ) -> npt.NDArray[Any]:
        arr = self.array(spec.name)
        if is_contiguous(slots):
            return np.asarray(arr[(slice(int(slots[0]), int(slots[-1]) + 1), ys, xs)])
        return np.asarray(arr.oindex[(slots, ys, xs)])

    # ------------------------------------------------------------------ cached block reads

    def column(self, band: str, lat_q: int, lng_q: int, cache: ChunkCache | None = None) -> Column:
        """The time column of the block holding ``(lat_q, lng_q)``, from the cache.

        On a miss it reads every existing time chunk of that block once (one thread
        reads while others wait) and drops all-fill slots.

        Args:
            band: Band name.
            lat_q: Row of any cell of the block.
            lng_q: Column of any cell of the block.
            cache: The cache to use (default: this reader's :attr:`cache`).

        Returns:
            The block's column (empty ``tslots`` when the band has no data there).
        """
        spec = band_spec(band)
        cache = cache if cache is not None else self.cache
        side = 1 << self.block_level
        key = (self._snapshot_id, band, lat_q // side, lng_q // side)
        col = cache.column(key)
        if col is not None:
            return col
        with cache.single_flight(("column", key)):
            col = cache.column(key)
            if col is None:
                col = self._load_column(spec, key[2], key[3])
                cache.put([(key, col)])
        return col

    def _load_column(self, spec: BandSpec, cy: int, cx: int) -> Column:
        side = 1 << self.block_level
        tcs = self.chunk_index(spec.name).get((cy, cx))
        extra = (spec.extra_dim[1],) if spec.extra_dim else ()
        y0, x0 = cy * side, cx * side
        if tcs is None or tcs.size == 0:
            empty = np.zeros((0, side, side, *extra), spec.dtype)
            return Column(np.zeros(0, np.int64), empty, y0, x0)
        step = spec.time_chunk
        slots = (tcs[:, None] * step + np.arange(step)[None, :]).ravel().astype(np.int64)
        slots = slots[slots < spec.time_size]
        values = self._read(spec, slots, slice(y0, y0 + side), slice(x0, x0 + side))
        fill = fill_mask(values, spec.fill_value)
        keep = ~fill.reshape(fill.shape[0], -1).all(axis=1)
        return Column(slots[keep], np.ascontiguousarray(values[keep]), y0, x0)

    def column_series(
        self, band: str, lat_q: int, lng_q: int, cache: ChunkCache | None = None
    ) -> tuple[npt.NDArray[np.int64], npt.NDArray[Any]]:
        """A cell's series from its block's cached column: ``(tslots, values)``, fill included.

        Callers mask fill themselves (NaN for floats, 0 for flags).
        """
        col = self.column(band, lat_q, lng_q, cache)
        return col.tslots, col.cell(lat_q, lng_q)

    def tiles(
        self,
        band: str,
        keys: Sequence[tuple[int, int, int]],
        cache: ChunkCache | None = None,
        *,
        keep: bool = True,
    ) -> list[npt.NDArray[Any] | None]:
        """Decoded chunks of a band, one time chunk of one block each, through the cache.

        The chunks missing from the cache are fetched together (:meth:`read_chunks`);
        chunks the manifest does not list are not fetched at all.

        Args:
            band: Band name (3-D bands; extra dimensions read at chunk 0).
            keys: ``(chunk row, chunk column, time chunk)`` per wanted chunk.
            cache: The cache to use (default: this reader's :attr:`cache`).
            keep: Put the fetched chunks in the cache (false: a large read that
                would only evict the others; hits are used either way).

        Returns:
            Per key the read-only chunk ``(time_chunk, side, side[, d])``, or None
            when the chunk does not exist (all fill).
        """
        band_spec(band)  # raises for an unknown band
        cache = cache if cache is not None else self.cache
        sid = self._snapshot_id
        index = self.chunk_index(band)
        out: list[npt.NDArray[Any] | None] = [None] * len(keys)
        missing: dict[tuple[int, int, int], list[int]] = {}
        stored: dict[tuple[int, int], set[int]] = {}
        for i, (cy, cx, tc) in enumerate(keys):
            present = stored.get((cy, cx))
            if present is None:
                tcs = index.get((cy, cx))
                present = stored[(cy, cx)] = set() if tcs is None else set(tcs.tolist())
            if tc not in present:
                continue  # no such chunk: fill
            hit = cache.tile((sid, band, cy, cx, tc))
            if hit is not None:
                out[i] = hit
            else:
                missing.setdefault((cy, cx, tc), []).append(i)
        if missing:
            wanted = list(missing)
            got = self.read_chunks(band, [(tc, cy, cx) for cy, cx, tc in wanted])
            for k, arr in zip(wanted, got, strict=True):
                for i in missing[k]:
                    out[i] = arr
            if keep:
                cache.put(
                    [
                        ((sid, band, *k), a)
                        for k, a in zip(wanted, got, strict=True)
                        if a is not None
                    ]
                )
        return out

    def codec(self, band: str) -> ChunkCodec | None:
        """The band's chunk codec, or None when its codecs need zarr's own indexing."""
        spec = band_spec(band)
        path = spec.array_path
        if path not in self._codecs:
            codec = ChunkCodec(self.array(band), path)
            self._codecs[path] = codec if codec.supported else None
        return self._codecs[path]

    def read_chunks(
        self, band: str, coords: Sequence[tuple[int, int, int]]
    ) -> list[npt.NDArray[Any] | None]:
        """Whole chunks ``(time chunk, chunk row, chunk column)`` of a band (None: not stored).

        Fetches every chunk's bytes concurrently and decodes them with the band's
        :class:`~store.cube.codec.ChunkCodec` (on the worker pool from
        :data:`THREADED_DECODE_MIN` chunks); bands whose codecs it does not support
        are read through zarr. Extra dimensions are read at chunk 0.
        """
        arr = self.array(band)
        extra = (0,) * (len(arr.chunks) - 3)
        full = [(*c, *extra) for c in coords]
        codec = self.codec(band)
        if codec is None:
            shape = arr.chunks
            return [
                np.asarray(
                    arr[tuple(slice(i * s, (i + 1) * s) for i, s in zip(c, shape, strict=True))]
                )
                for c in full
            ]
        store = arr.store_path.store
        keys = [codec.key(c) for c in full]
        proto = codec.prototype
        pool = worker_pool() if len(keys) >= THREADED_DECODE_MIN else None

        async def one(key: str) -> npt.NDArray[Any] | None:
            raw = await store.get(key, proto)
            if raw is None:
                return None
            if pool is None:
                return codec.decode_view(raw)
            # the codecs release the GIL: decode on the pool while other fetches go on
            return await asyncio.get_running_loop().run_in_executor(pool, codec.decode_view, raw)

        async def fetch() -> list[npt.NDArray[Any] | None]:
            return list(await asyncio.gather(*(one(k) for k in keys)))

        return sync(fetch())

    # ------------------------------------------------------------------ regions

    def cell_series(
        self,
        band: str,
        lat_q: int,
        lng_q: int,
        t0: int | None = None,
        t1: int | None = None,
    ) -> tuple[npt.NDArray[np.int64], npt.NDArray[Any]]:
        """Time series of one cell: the slots holding a value and the values.

        Reads only the existing chunks along the cell's time column.

        Args:
            band: Band name.
            lat_q: Row of the cell.
            lng_q: Column of the cell.
            t0: First tslot (inclusive; default: start of the axis).
            t1: End tslot (exclusive; default: end of the axis).

        Returns:
            ``(tslots, values)``: sorted slots where the cell is not fill, and
            the values (``(n,)``, or ``(n, d)`` for vector bands).
        """
        spec = band_spec(band)
        check_box(lat_q, lat_q + 1, lng_q, lng_q + 1)
        slots = self._candidate_tslots(spec, lat_q, lat_q + 1, lng_q, lng_q + 1, t0, t1)
        extra = (spec.extra_dim[1],) if spec.extra_dim else ()
        if slots.size == 0:
            return slots, np.zeros((0, *extra), dtype=spec.dtype)
        values = self._read(spec, slots, slice(lat_q, lat_q + 1), slice(lng_q, lng_q + 1))
        values = values[:, 0, 0]
        fill = fill_mask(values, spec.fill_value)
        keep = ~fill.reshape(fill.shape[0], -1).all(axis=1)
        return slots[keep], values[keep]

    def read_region(
        self,
        band: str,
        lat_q0: int,
        lat_q1: int,
        lng_q0: int,
        lng_q1: int,
        t0: int | None = None,
        t1: int | None = None,
        *,
        drop_empty: bool = True,
    ) -> xr.DataArray:
        """Read a lattice region as an ``xarray.DataArray``.

        Args:
            band: Band name.
            lat_q0: First row (inclusive).
            lat_q1: End row (exclusive).
            lng_q0: First column (inclusive).
            lng_q1: End column (exclusive).
            t0: First tslot (inclusive; default: start of the axis).
            t1: End tslot (exclusive; default: end of the axis).
            drop_empty: Keep only tslots with a value somewhere in the region
                (default). When false every slot of ``[t0, t1)`` is returned
                (``t0`` and ``t1`` then required).

        Returns:
            DataArray with dims ``(tslot, lat, lng[, dim])`` and coordinates
            ``tslot``, ``lat``/``lng`` (cell centres, degrees), ``lat_q``,
            ``lng_q`` and ``date`` (day tempo) or ``year`` (year tempo); attrs
            name the band, units and ``snapshot_id``.

        Raises:
            RegionOutOfBounds: Empty or out-of-lattice region or tslot range.
            RegionTooLarge: More than ``max_region_elements`` elements to read.
        """
        spec = band_spec(band)
        check_box(lat_q0, lat_q1, lng_q0, lng_q1)
        if drop_empty:
            slots = self._candidate_tslots(spec, lat_q0, lat_q1, lng_q0, lng_q1, t0, t1)
        else:
            if t0 is None or t1 is None:
                raise RegionOutOfBounds("drop_empty=False needs an explicit [t0, t1)")
            if not 0 <= t0 < t1 <= spec.time_size:
                raise RegionOutOfBounds(f"tslot range [{t0}, {t1}) outside [0, {spec.time_size})")
            slots = np.arange(t0, t1, dtype=np.int64)
        extra = (spec.extra_dim[1],) if spec.extra_dim else ()
        elements = slots.size * (lat_q1 - lat_q0) * (lng_q1 - lng_q0) * math.prod(extra)
        if elements > self.max_region_elements:
            raise RegionTooLarge(
                f"region of {elements} elements exceeds the cap of {self.max_region_elements}; "
                "narrow the area or the tslot range"
            )
        shape = (slots.size, lat_q1 - lat_q0, lng_q1 - lng_q0, *extra)
        if slots.size:
            values = self._read(spec, slots, slice(lat_q0, lat_q1), slice(lng_q0, lng_q1))
        else:
            values = np.zeros(shape, dtype=spec.dtype)
        if drop_empty and slots.size:
            fill = fill_mask(values, spec.fill_value)
            keep = ~fill.reshape(fill.shape[0], -1).all(axis=1)
            slots, values = slots[keep], values[keep]
        return region_dataarray(
            spec, slots, (lat_q0, lat_q1, lng_q0, lng_q1), values, self.snapshot_id
        )

    def read_bbox(
        self,
        band: str,
        bbox: Sequence[float],
        t0: int | None = None,
        t1: int | None = None,
        *,
        drop_empty: bool = True,
    ) -> xr.DataArray:
        """Read the cells whose centres lie in a bbox.

        Args:
            band: Band name.
            bbox: ``(min_lat, min_lng, max_lat, max_lng)`` in degrees.
            t0: First tslot (inclusive).
            t1: End tslot (exclusive).
            drop_empty: See :meth:`read_region`.

        Returns:
            As :meth:`read_region`.

        Raises:
            RegionOutOfBounds: The bbox holds no cell centre.
        """
        if len(bbox) != 4:
            raise RegionOutOfBounds("bbox must be (min_lat, min_lng, max_lat, max_lng)")
        lat_q0, lat_q1, lng_q0, lng_q1 = bbox_q_range(*(float(v) for v in bbox))
        if lat_q0 >= lat_q1 or lng_q0 >= lng_q1:
            raise RegionOutOfBounds(f"bbox {tuple(bbox)} holds no cell centre")
        return self.read_region(band, lat_q0, lat_q1, lng_q0, lng_q1, t0, t1, drop_empty=drop_empty)

    def read_block(
        self,
        band: str,
        block: Block,
        t0: int | None = None,
        t1: int | None = None,
        *,
        drop_empty: bool = True,
    ) -> xr.DataArray:
        """Read one block (any level) of a band.

        Args:
            band: Band name.
            block: The block (``store.blocks.Block``).
            t0: First tslot (inclusive).
            t1: End tslot (exclusive).
            drop_empty: See :meth:`read_region`.

        Returns:
            As :meth:`read_region`.
        """
        lat_q0, lat_q1, lng_q0, lng_q1 = block_q_range(block)
        return self.read_region(band, lat_q0, lat_q1, lng_q0, lng_q1, t0, t1, drop_empty=drop_empty)

    def cell_vector(self, lat_q: int, lng_q: int, year: int) -> tuple[npt.NDArray[np.int8], float]:
        """The Tessera int8 vector and scale of one cell and year.

        Args:
            lat_q: Row of the cell.
            lng_q: Column of the cell.
            year: Calendar year (year slot = ``year - 1970``).

        Returns:
            ``(vector int8[128], scale)``; scale NaN = water, +inf = no data
            (the vector is then all zeros).
        """
        slot = year - 1970
        if not 0 <= slot < YEAR_SLOTS:
            raise RegionOutOfBounds(f"year {year} outside [1970, {1970 + YEAR_SLOTS})")
        check_box(lat_q, lat_q + 1, lng_q, lng_q + 1)
        vector = np.asarray(self.array("geotessera")[slot, lat_q, lng_q, :], dtype=np.int8)
        scale = float(np.asarray(self.array("geotessera.scale")[slot, lat_q, lng_q]))
        return vector, scale

    def cell_multi_year(
        self, lat_q: int, lng_q: int, years: Sequence[int]
    ) -> tuple[npt.NDArray[np.int8], npt.NDArray[np.float32]]:
        """``geotessera.multi_year``: one cell's vintages concatenated.

        Args:
            lat_q: Row of the cell.
            lng_q: Column of the cell.
            years: Calendar years, in the order to concatenate.

        Returns:
            ``(int8[128 * len(years)], float32[len(years)] scales)``.
        """
        pairs = [self.cell_vector(lat_q, lng_q, y) for y in years]
        vectors = [v for v, _ in pairs]
        scales = np.array([s for _, s in pairs], dtype=np.float32)
        return (np.concatenate(vectors) if vectors else np.zeros(0, np.int8)), scales
