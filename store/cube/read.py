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
  :meth:`~CubeReader.read_chunks`), for area queries;
* **block summaries** of a scalar band (:meth:`~CubeReader.summary_tiles`,
  :mod:`store.cube.summaries`), cached like tiles, for area queries.

Columns and tiles live in a :class:`~store.cube.cache.ChunkCache` keyed by
snapshot; a server gives all its readers one cache, and a reader opened from the previous
tip's (``inventory_from``) re-keys the entries whose chunks did not change
(:mod:`store.cube.carry`). :attr:`CubeReader.inventory`
is the snapshot's own scene inventory (:mod:`store.cube.inventory`).
"""

from __future__ import annotations

import asyncio
import datetime as dt
import os
from collections.abc import Callable, Coroutine, Iterable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np
import numpy.typing as npt
import zarr
import zarr.errors

from store.cube.bands import BandSpec, band_spec
from store.cube.cache import ChunkCache, Column
from store.cube.carry import Changes, ChunkIndex, diff_since
from store.cube.chunk_index import ChunkIndexReads
from store.cube.codec import (
    ChunkCodec,
    fill_mask,
    get_group,
    get_many,
    is_contiguous,
    key_groups,
)
from store.cube.inventory import SnapshotInventory
from store.cube.layout import DEFAULT_BLOCK_LEVEL, MAX_REGION_ELEMENTS, block_level_of
from store.cube.regions import RegionReads
from store.cube.summaries import summary_path
from store.deadline import bounded_sync, within_deadline
from store.errors import SnapshotNotFound, StorageTimeout
from store.snapshots import (
    MAIN_BRANCH,
    SnapshotInfo,
    cube_location,
    is_object_storage,
    list_snapshots,
    lookup_snapshot,
    open_repository,
    open_storage,
    snapshot_at,
)
from store.threads import worker_pool

T = TypeVar("T")

if TYPE_CHECKING:
    pass

__all__ = ["THREADED_DECODE_MIN", "CubeReader"]

THREADED_DECODE_MIN = 4
"""Chunks per :meth:`CubeReader.read_chunks` call from which decoding runs on the worker pool."""


class CubeReader(ChunkIndexReads, RegionReads):
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
        carry: With ``inventory_from``: also re-key the cache entries of its snapshot that
            no commit since changed, and update its chunk indexes instead of listing them
            again (:mod:`store.cube.carry`). False starts the new snapshot's cache and
            indexes cold (the bench's baseline arm: the behaviour before session 22).

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
        carry: bool = True,
    ) -> None:
        if snapshot_id is not None and as_of is not None:
            raise ValueError("give snapshot_id or as_of, not both")
        if storage is None:
            if data_dir is None:
                raise ValueError("give data_dir or storage")
            storage = cube_location(data_dir)
        self._remote = is_object_storage(storage)  # reads under the storage deadline
        location = os.fspath(storage)

        def open_snapshot() -> tuple[Any, Any, Any]:
            repo = open_repository(open_storage(location))
            sid = snapshot_id
            if as_of is not None:
                found = snapshot_at(repo, as_of)
                if found is None:
                    raise SnapshotNotFound(
                        f"no snapshot committed at or before {as_of.isoformat()}"
                    )
                sid = found.id
            if sid is not None:
                lookup_snapshot(repo, sid)
                session = repo.readonly_session(snapshot_id=sid)
            else:
                session = repo.readonly_session(MAIN_BRANCH)
            try:
                return repo, session, zarr.open_group(session.store, mode="r")
            except zarr.errors.GroupNotFoundError:
                return repo, session, None

        self.repo, self.session, root = within_deadline(
            open_snapshot, f"opening the cube at {location}", "nothing read", remote=self._remote
        )
        self._snapshot_id = str(self.session.snapshot_id)
        self.max_region_elements = max_region_elements
        self.cache = cache if cache is not None else ChunkCache()
        """Decoded columns and tiles (shared by the readers given the same cache)."""
        if root is None:
            # the repository's root snapshot (icechunk's initial commit) precedes the layout
            raise SnapshotNotFound(
                f"snapshot {self._snapshot_id} holds no cube yet (the repository's empty first "
                "commit, before the layout); read a later snapshot"
            )
        self.block_level = block_level_of(dict(root.attrs), DEFAULT_BLOCK_LEVEL)
        self._root = root  # the summary probe looks its arrays up here (no second open)
        self._arrays: dict[str, zarr.Array] = {}
        self._index: dict[str, dict[tuple[int, int], npt.NDArray[np.int64]]] = {}
        self._stored: dict[str, dict[tuple[int, int], frozenset[int]]] = {}
        self._codecs: dict[str, ChunkCodec | None] = {}
        self._data_dir = data_dir
        self._inventory: SnapshotInventory | None = None
        self._inventory_base = inventory_from._inventory if inventory_from is not None else None
        # the diff from the previous tip's snapshot, computed once: the cache's entries of it
        # that still hold are re-keyed now, and the inventory reads the partitions it names
        self._diff = None
        self._index_base: tuple[dict[str, ChunkIndex], Changes] | None = None
        if inventory_from is not None and inventory_from.snapshot_id != self._snapshot_id:
            previous = inventory_from.snapshot_id
            self._diff = diff_since(self.repo, previous, self._snapshot_id, remote=self._remote)
            if self._diff is not None and carry:
                changes = Changes.of(self._diff)
                self._index_base = (dict(inventory_from._index), changes)  # updated on use
                if inventory_from.cache is self.cache:
                    self.cache.carry(previous, self._snapshot_id, changes.keeps)

    stalled = False
    """Whether a read of this reader timed out (:mod:`store.deadline`): its session may still
    wait on the abandoned requests (icechunk shares a fetch in flight), so a server opens a
    new reader of the snapshot instead of reusing this one (:meth:`branch_tip`)."""

    def _stalled_error(self, what: str) -> StorageTimeout:
        return StorageTimeout(
            f"{what}: an earlier read of this snapshot's reader timed out (the object store"
            " stopped answering); a new reader is opened at the next check of the tip; nothing"
            " read"
        )

    def _guarded(self, call: Callable[[], T], what: str) -> T:
        """``call()``, failing at once once a read timed out (requests queued behind it), and
        marking the reader stalled when ``call`` times out."""
        if self.stalled:
            raise self._stalled_error(what)
        try:
            return call()
        except StorageTimeout:
            self.stalled = True
            raise

    def _sync(self, coro: Coroutine[Any, Any, T], what: str) -> T:
        if self.stalled:
            coro.close()  # never awaited: closed, not left to warn
        return self._guarded(lambda: bounded_sync(coro, self._remote, what), what)

    def _within(self, call: Callable[[], T], what: str) -> T:
        return self._guarded(
            lambda: within_deadline(call, what, "nothing read", remote=self._remote), what
        )

    def branch_tip(self) -> str:
        """The id of ``main``'s tip now (one read of the branch ref; under the storage deadline
        on object storage)."""
        return self._within(lambda: str(self.repo.lookup_branch(MAIN_BRANCH)), "reading the tip")

    @property
    def snapshot_id(self) -> str:
        """Id of the snapshot this reader sees (read once: it never changes)."""
        return self._snapshot_id

    @property
    def snapshot(self) -> SnapshotInfo:
        """Info (time, message, metadata) of the snapshot this reader sees."""
        return self.lookup(self.snapshot_id)

    def inventory_of(self, keys: Iterable[str]) -> SnapshotInventory:
        """The inventory rows of the partitions ``keys`` only (read now, not kept:
        :meth:`SnapshotInventory.load_partitions`), or the whole inventory once loaded."""
        if self._inventory is not None:
            return self._inventory
        keys = list(keys)

        def load() -> SnapshotInventory:
            return SnapshotInventory.load_partitions(self.session, keys, data_dir=self._data_dir)

        return self._within(load, "reading inventory rows")

    @property
    def inventory(self) -> SnapshotInventory:
        """This snapshot's scene inventory: rows, table and overpass index (read once)."""
        if self._inventory is None:
            with self.cache.single_flight(("inventory", self._snapshot_id)):
                if self._inventory is None:

                    def load() -> SnapshotInventory:
                        return SnapshotInventory.load(
                            self.session,
                            data_dir=self._data_dir,
                            previous=self._inventory_base,
                            diff=self._diff,
                        )

                    self._inventory = self._within(load, "reading the inventory")
                    self._inventory_base = self._diff = None
        return self._inventory

    def list_snapshots(self) -> list[SnapshotInfo]:
        """Snapshots of ``main``, newest first (not only those up to this reader's)."""
        return self._within(lambda: list_snapshots(self.repo), "listing snapshots")

    def snapshot_at(self, when: dt.datetime) -> SnapshotInfo | None:
        """The latest snapshot of ``main`` committed at or before ``when`` (None: none)."""
        return self._within(lambda: snapshot_at(self.repo, when), "finding a snapshot by time")

    def lookup(self, snapshot_id: str) -> SnapshotInfo:
        """A snapshot of this repository by id.

        Raises:
            SnapshotNotFound: no such snapshot.
        """
        return self._within(lambda: lookup_snapshot(self.repo, snapshot_id), "finding a snapshot")

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

    def _read(
        self, spec: BandSpec, slots: npt.NDArray[np.int64], ys: slice, xs: slice
    ) -> npt.NDArray[Any]:
        arr = self.array(spec.name)

        def read() -> npt.NDArray[Any]:
            if is_contiguous(slots):
                return np.asarray(arr[(slice(int(slots[0]), int(slots[-1]) + 1), ys, xs)])
            return np.asarray(arr.oindex[(slots, ys, xs)])

        return self._within(read, f"reading {spec.name}")

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
        stored = self._stored_sets(band)
        out: list[npt.NDArray[Any] | None] = [None] * len(keys)
        missing: dict[tuple[int, int, int], list[int]] = {}
        empty: frozenset[int] = frozenset()
        present = [i for i, (cy, cx, tc) in enumerate(keys) if tc in stored.get((cy, cx), empty)]
        hits = cache.tiles([(sid, band, *keys[i]) for i in present])  # absent chunks: fill
        for i, hit in zip(present, hits, strict=True):
            if hit is not None:
                out[i] = hit
            else:
                missing.setdefault(keys[i], []).append(i)
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

    def summary_tiles(
        self,
        band: str,
        keys: Sequence[tuple[int, int, int]],
        cache: ChunkCache | None = None,
        *,
        keep: bool = True,
    ) -> list[npt.NDArray[np.float64] | None] | None:
        """Block summaries ``(time_chunk, n, n, N_FIELDS)`` of a band, per ``(chunk row, chunk column, time chunk)``.

        ``n x n`` summary blocks per chunk (:func:`store.cube.summaries.summary_level`).

        Returns:
            None when this snapshot has no summary array for the band (written
            before summaries existed); otherwise per key the summaries (rows of
            NaN, or None when the chunk is absent: not summarised, read the cells).
        """
        band_spec(band)
        path = summary_path(band)
        if path not in self._codecs:
            if path not in self._root:
                self._codecs[path] = None
            else:
                summary = zarr.open_array(self.session.store, path=path, mode="r", zarr_format=3)
                made = ChunkCodec(summary, path)
                self._codecs[path] = made if made.supported else None
        codec = self._codecs[path]
        if codec is None:
            return None
        cache = cache if cache is not None else self.cache
        sid = self._snapshot_id
        out: list[npt.NDArray[np.float64] | None] = [None] * len(keys)
        missing: dict[tuple[int, int, int], list[int]] = {}
        for i, k in enumerate(keys):
            hit = cache.tile((sid, "summary", band, *k))
            if hit is not None:
                out[i] = hit
            else:
                missing.setdefault(k, []).append(i)
        if missing:
            wanted = list(missing)
            raws = self._sync(
                get_many(
                    self.session.store,
                    [codec.key((tc, cy, cx, 0)) for cy, cx, tc in wanted],
                    codec.prototype,
                ),
                f"reading the summaries of {band}",
            )
            got: list[npt.NDArray[np.float64] | None] = [
                None if r is None else codec.decode_view(r) for r in raws
            ]
            for k, one in zip(wanted, got, strict=True):
                for i in missing[k]:
                    out[i] = one
            if keep:
                cache.put(
                    [
                        ((sid, "summary", band, *k), a)
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

        Fetches the chunks' bytes in batched store calls
        (:func:`~store.cube.codec.get_stored`, :data:`~store.cube.codec.FETCH_GROUP` keys
        each, the groups concurrently) and decodes each group as it arrives with the band's
        :class:`~store.cube.codec.ChunkCodec` (on the worker pool from
        :data:`THREADED_DECODE_MIN` chunks: one hop per group, not per chunk); bands whose
        codecs it does not support are read through zarr. Extra dimensions are read at chunk 0.
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

        def decode(raws: list[Any]) -> list[npt.NDArray[Any] | None]:
            return [None if r is None else codec.decode_view(r) for r in raws]

        async def group(part: list[str]) -> list[npt.NDArray[Any] | None]:
            raws = await get_group(store, part, proto)
            if pool is None:
                return decode(raws)
            # the codecs release the GIL: decode a group on the pool while the others arrive
            return await asyncio.get_running_loop().run_in_executor(pool, decode, raws)

        async def fetch() -> list[npt.NDArray[Any] | None]:
            done = await asyncio.gather(*(group(p) for p in key_groups(keys)))
            return [a for part in done for a in part]

        return self._sync(fetch(), f"reading chunks of {band}")
