"""The cube: Zarr v3 arrays on the cell64 lattice inside one icechunk repository.

Layout
------
The bands, array shapes, chunking, CF attributes and the layout commit are in
:mod:`store.layout` (its public names are re-exported here): one group per
band family, one ``(tslot, y, x[, extra])`` array per band on the full cell64
lattice, chunked by store block and by week (day bands) or year (Tessera).

Transactions
------------
:class:`CubeWriter` writes inside :meth:`CubeWriter.transaction`: one icechunk
writable session per partition, committed once on exit (the commit metadata
carries the ``partition_key``), discarded on exception. Commits from several
processes are serialised by an ``flock`` on ``<data_dir>/cube.lock`` and rebase
on conflict (icechunk ``ConflictDetector``: commits touching different chunks
both land; the same chunk changed by two concurrent commits raises
:class:`~store.errors.CommitConflict`). A run killed mid-write leaves the branch
at its last snapshot (uncommitted chunk objects are unreferenced garbage that
``Repository.garbage_collect`` removes); a rerun starts a fresh session.
Re-materialising a partition writes identical array contents and *does* commit
a new snapshot (same contents, new id); a transaction that wrote nothing commits
nothing and reports the branch tip (one that wrote only fill values does commit,
with unchanged contents).

Measured on the 2-core dev box (loaded): ``cell_series`` over 2 years (~90
weekly chunks, ~125 values) ~100 ms, bounded by decoding one whole
7 x 128 x 128 chunk per week; ``read_region`` of ~1 km2 over a year ~130 ms.
A few-ms pixel drill needs a time-major copy (not built here).

Reads
-----
:class:`CubeReader` opens a read-only session on one snapshot (the tip, an id or
``as_of`` a time) and reads only the chunks of the requested region, found from
the snapshot's chunk manifest (so reads never touch absent chunks). Reads above
``max_region_elements`` raise :class:`~store.errors.RegionTooLarge`.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import itertools
import math
import os
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import icechunk as ic
import numpy as np
import numpy.typing as npt
import zarr
from zarr.abc.codec import SupportsSyncCodec
from zarr.codecs import BytesCodec
from zarr.core.buffer import Buffer, default_buffer_prototype
from zarr.core.codec_pipeline import codecs_from_list
from zarr.core.sync import sync

from store.address import bbox_q_range, q_center
from store.blocks import Block, block_q_range
from store.errors import (
    CommitConflict,
    InvalidWrite,
    RegionOutOfBounds,
    RegionTooLarge,
    SnapshotNotFound,
    TransactionClosed,
)
from store.layout import (
    BANDS,
    DAY_SLOTS,
    DEFAULT_BLOCK_LEVEL,
    LAYOUT_VERSION,
    MAX_REGION_ELEMENTS,
    TIME_CHUNK_DAYS,
    X_SIZE,
    Y_SIZE,
    YEAR_SLOTS,
    BandSpec,
    _block_level,
    _ensure_layout,
    band_spec,
    geotransform,
)
from store.snapshots import (
    MAIN_BRANCH,
    SnapshotInfo,
    commit_lock,
    cube_location,
    list_snapshots,
    lookup_snapshot,
    open_repository,
    open_storage,
    snapshot_at,
)

if TYPE_CHECKING:
    import xarray as xr

__all__ = [
    "BANDS",
    "DAY_SLOTS",
    "DEFAULT_BLOCK_LEVEL",
    "LAYOUT_VERSION",
    "MAX_REGION_ELEMENTS",
    "TIME_CHUNK_DAYS",
    "X_SIZE",
    "YEAR_SLOTS",
    "Y_SIZE",
    "BandSpec",
    "CubeReader",
    "CubeTransaction",
    "CubeWriter",
    "band_spec",
    "geotransform",
]


def _check_tslots(spec: BandSpec, tslots: npt.ArrayLike) -> npt.NDArray[np.int64]:
    t = np.asarray(tslots)
    if t.ndim != 1 or t.size == 0 or t.dtype.kind not in "iu":
        raise InvalidWrite("tslots must be a non-empty 1-D integer array")
    t = t.astype(np.int64)
    if np.any(np.diff(t) <= 0):
        raise InvalidWrite("tslots must be strictly increasing")
    if t[0] < 0 or t[-1] >= spec.time_size:
        raise RegionOutOfBounds(
            f"tslots {int(t[0])}..{int(t[-1])} outside [0, {spec.time_size}) for {spec.name}"
        )
    return t


def _check_box(lat_q0: int, lat_q1: int, lng_q0: int, lng_q1: int) -> None:
    if not (0 <= lat_q0 < lat_q1 <= Y_SIZE and 0 <= lng_q0 < lng_q1 <= X_SIZE):
        raise RegionOutOfBounds(
            f"region lat_q [{lat_q0}, {lat_q1}) x lng_q [{lng_q0}, {lng_q1}) is empty, "
            f"reversed or outside the lattice [0, {Y_SIZE}) x [0, {X_SIZE})"
        )


def _cast(spec: BandSpec, values: npt.ArrayLike) -> npt.NDArray[Any]:
    arr = np.asarray(values)
    target = np.dtype(spec.dtype)
    if target.kind == "f":
        if arr.dtype.kind not in "fiub":
            raise InvalidWrite(f"{spec.name} takes numbers, got dtype {arr.dtype}")
        return arr.astype(target, copy=False)
    if arr.dtype.kind not in "iub":
        raise InvalidWrite(f"{spec.name} takes integers, got dtype {arr.dtype}")
    info = np.iinfo(target)
    if arr.size and (int(arr.min()) < info.min or int(arr.max()) > info.max):
        raise InvalidWrite(f"{spec.name} values outside the {target} range")
    return arr.astype(target, copy=False)


def _is_contiguous(t: npt.NDArray[np.int64]) -> bool:
    return int(t[-1] - t[0]) + 1 == t.size


class _ChunkCodec:
    """Synchronous chunk encode/decode of one array through its own zarr codecs.

    The cube's arrays are ``bytes`` + one Blosc or Zstd codec, unsharded, on a
    regular grid; for those a week's write is done chunk by chunk here, on the
    calling thread, with every store ``get`` and every ``set`` of one write
    batched into one event-loop round trip. zarr's ``setitem`` does the same
    work through one thread-pool hop per codec and chunk, which costs more than
    the compression on small writes. The bytes stored are the ones zarr writes
    (same codecs, same chunk keys; a test compares them), so readers never
    know. Arrays with other codecs use zarr's ``setitem``.
    """

    def __init__(self, arr: zarr.Array, path: str) -> None:
        meta = arr.metadata
        self.path = path
        """Array path inside the store (chunk keys are ``<path>/<chunk key>``)."""
        self.shape: tuple[int, ...] = tuple(arr.shape)
        """Array shape."""
        self.chunks: tuple[int, ...] = tuple(arr.chunks)
        """Chunk shape."""
        self.dtype = np.dtype(arr.dtype)
        """Native dtype."""
        self.fill_value: Any = arr.fill_value
        """Fill value (what absent chunks read as)."""
        self._meta = meta
        self._prototype = default_buffer_prototype()
        self._spec = meta.get_chunk_spec(
            (0,) * len(self.shape), arr.async_array.config, self._prototype
        )
        array_array, array_bytes, bytes_bytes = codecs_from_list(meta.codecs)  # type: ignore[union-attr]
        self._bytes_bytes: tuple[SupportsSyncCodec, ...] = tuple(
            c for c in bytes_bytes if isinstance(c, SupportsSyncCodec)
        )
        self._array_bytes = array_bytes if isinstance(array_bytes, BytesCodec) else BytesCodec()
        self.supported = (
            not array_array
            and isinstance(array_bytes, BytesCodec)
            and len(self._bytes_bytes) == len(bytes_bytes)
        )
        """Whether the fast path applies (otherwise use zarr's setitem)."""

    def key(self, coords: tuple[int, ...]) -> str:
        """Store key of one chunk."""
        return f"{self.path}/{self._meta.encode_chunk_key(coords)}"

    def is_fill(self, chunk: npt.NDArray[Any]) -> bool:
        """Whether a chunk holds only the fill value (then it is not stored)."""
        fill = self.fill_value
        if self.dtype.kind == "f" and np.isnan(fill):
            return bool(np.isnan(chunk).all())
        return bool((chunk == fill).all())

    def encode(self, chunk: npt.NDArray[Any]) -> Buffer:
        """Encoded bytes of one whole chunk (C order, native dtype), never a view of ``chunk``.

        Transactions store the bytes later, so without a compressor (whose output is
        new memory) the chunk is copied: the caller may reuse its array.
        """
        if not self._bytes_bytes:
            chunk = chunk.copy()
        nd = self._prototype.nd_buffer.from_numpy_array(chunk)
        data: Any = self._array_bytes._encode_sync(nd, self._spec)
        for codec in self._bytes_bytes:
            data = codec._encode_sync(data, self._spec)
        assert isinstance(data, Buffer)
        return data

    def decode(self, data: Buffer) -> npt.NDArray[Any]:
        """A stored chunk as a writable array."""
        raw: Any = data
        for codec in reversed(self._bytes_bytes):
            raw = codec._decode_sync(raw, self._spec)
        nd = self._array_bytes._decode_sync(raw, self._spec)
        return np.array(nd.as_numpy_array(), dtype=self.dtype, copy=True)


def _chunk_boxes(
    codec: _ChunkCodec, start: tuple[int, ...], stop: tuple[int, ...]
) -> Iterator[tuple[tuple[int, ...], tuple[slice, ...], tuple[slice, ...], bool]]:
    """Chunks meeting a box: (coords, slice inside the chunk, slice of the values, whole?)."""
    ranges = [
        range(a // c, (b - 1) // c + 1) for a, b, c in zip(start, stop, codec.chunks, strict=True)
    ]
    for coords in itertools.product(*ranges):
        inner, outer, whole = [], [], True
        for i, a, b, c in zip(coords, start, stop, codec.chunks, strict=True):
            lo, hi = max(a, i * c), min(b, (i + 1) * c)
            inner.append(slice(lo - i * c, hi - i * c))
            outer.append(slice(lo - a, hi - a))
            whole = whole and lo == i * c and hi == (i + 1) * c
        yield coords, tuple(inner), tuple(outer), whole


async def _get_all(store: Any, keys: list[str], prototype: Any) -> list[Buffer | None]:
    return list(await asyncio.gather(*(store.get(k, prototype) for k in keys)))


async def _put_all(store: Any, puts: list[tuple[str, Buffer | None]]) -> None:
    await asyncio.gather(*(store.set(k, v) if v is not None else store.delete(k) for k, v in puts))


class CubeTransaction:
    """Writes of one partition; committed once by :meth:`CubeWriter.transaction`.

    Chunks written through the codec path are encoded at once and stored together
    (one round trip) when the transaction ends normally, or before a write that
    goes through Zarr; a later write to the same chunk in the transaction sees them.
    """

    def __init__(
        self,
        session: ic.Session,
        partition_key: str,
        codecs: dict[str, _ChunkCodec] | None = None,
    ) -> None:
        self._session = session
        self._arrays: dict[str, zarr.Array] = {}
        self._codecs = codecs if codecs is not None else {}
        self._pending: dict[str, Buffer | None] = {}
        self._open = True
        self.partition_key = partition_key
        """The partition this transaction materialises."""
        self.snapshot_id: str | None = None
        """Snapshot id after a successful exit (the tip if nothing changed)."""
        self.committed = False
        """Whether exiting created a new snapshot."""

    def _array(self, spec: BandSpec) -> zarr.Array:
        arr = self._arrays.get(spec.path)
        if arr is None:
            opened = zarr.open_array(self._session.store, path=spec.path, mode="r+", zarr_format=3)
            arr = opened.with_config({"write_empty_chunks": False})
            self._arrays[spec.path] = arr
        return arr

    def _codec(self, spec: BandSpec) -> _ChunkCodec:
        # array metadata never changes once the layout exists: open it once per writer
        codec = self._codecs.get(spec.path)
        if codec is None:
            codec = _ChunkCodec(self._array(spec), spec.path)
            self._codecs[spec.path] = codec
        return codec

    def _write_chunks(
        self, codec: _ChunkCodec, start: tuple[int, ...], data: npt.NDArray[Any]
    ) -> None:
        """Encode a contiguous box chunk by chunk into the pending set (read-modify-write for
        partial chunks, reading pending ones first); a failure leaves the pending set as it was."""
        stop = tuple(a + n for a, n in zip(start, data.shape, strict=True))
        boxes = list(_chunk_boxes(codec, start, stop))
        pending = self._pending
        partial = [codec.key(c) for c, _, _, whole in boxes if not whole]
        fetch = [k for k in partial if k not in pending]
        found = {k: pending[k] for k in partial if k in pending}
        if fetch:
            got = sync(_get_all(self._session.store, fetch, codec._prototype))
            found.update(zip(fetch, got, strict=True))
        encoded: dict[str, Buffer | None] = {}
        for coords, inner, outer, whole in boxes:
            key = codec.key(coords)
            if whole:
                chunk = np.ascontiguousarray(data[outer])
            else:
                old = found[key]
                if old is None:
                    chunk = np.full(codec.chunks, codec.fill_value, dtype=codec.dtype)
                else:
                    chunk = codec.decode(old)
                chunk[inner] = data[outer]
            encoded[key] = None if codec.is_fill(chunk) else codec.encode(chunk)
        pending.update(encoded)

    def _flush(self) -> None:
        """Store the chunks encoded so far, all at once (one round trip to the store)."""
        if self._pending:
            sync(_put_all(self._session.store, list(self._pending.items())))
            self._pending = {}

    def write(
        self,
        band: str,
        tslots: npt.ArrayLike,
        lat_q0: int,
        lng_q0: int,
        values: npt.ArrayLike,
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

        Raises:
            TransactionClosed: The transaction already committed or aborted.
            UnknownBand: Unknown band name.
            InvalidWrite: Shape or dtype mismatch, unsorted tslots.
            RegionOutOfBounds: The region leaves the lattice or the time axis.
        """
        if not self._open:
            raise TransactionClosed(f"transaction {self.partition_key!r} is closed")
        spec = band_spec(band)
        t = _check_tslots(spec, tslots)
        data = _cast(spec, values)
        extra = (spec.extra_dim[1],) if spec.extra_dim else ()
        if data.ndim != 3 + len(extra) or data.shape[0] != t.size or data.shape[3:] != extra:
            raise InvalidWrite(
                f"{spec.name} values shape {data.shape} does not match "
                f"({t.size}, h, w{', ' + str(extra[0]) if extra else ''})"
            )
        h, w = data.shape[1], data.shape[2]
        _check_box(lat_q0, lat_q0 + h, lng_q0, lng_q0 + w)
        ys, xs = slice(lat_q0, lat_q0 + h), slice(lng_q0, lng_q0 + w)
        contiguous = _is_contiguous(t)
        if contiguous:
            codec = self._codec(spec)
            if codec.supported:
                self._write_chunks(codec, (int(t[0]), lat_q0, lng_q0, *(0,) * len(extra)), data)
                return
        self._flush()  # Zarr reads the store: it must see this transaction's chunks
        if contiguous:
            self._array(spec)[(slice(int(t[0]), int(t[-1]) + 1), ys, xs)] = data
        else:
            self._array(spec).oindex[(t, ys, xs)] = data

    def _close(self) -> None:
        self._open = False
        self._pending = {}
        self._arrays.clear()


_LAYOUT_CHECKED: dict[tuple[str, int, int], int] = {}
"""Local repositories whose layout is complete -> block level (per process)."""


def _local_stamp(location: str) -> tuple[str, int, int] | None:
    """Identity of a local repository directory (path, inode, ctime); None if remote or absent.

    Arrays are never removed from a cube, so once a repository's layout is
    complete it stays complete; a directory deleted and created again at the
    same path gets a new inode or ctime and is checked again.
    """
    if "://" in location:
        return None
    try:
        st = os.stat(location)
    except OSError:
        return None
    return (os.path.abspath(location), st.st_ino, st.st_ctime_ns)


class CubeWriter:
    """Transactional writer of the cube (the pipeline's only way in).

    Args:
        data_dir: Data directory; holds the commit lock and, unless
            ``storage`` is given, the repository ``cube.icechunk``.
        storage: Repository location (path or ``s3://bucket/prefix``).
        block_level: Spatial chunk level used when the cube is created
            (an existing cube keeps its own).
    """

    def __init__(
        self,
        data_dir: str | os.PathLike[str],
        *,
        storage: str | os.PathLike[str] | None = None,
        block_level: int = DEFAULT_BLOCK_LEVEL,
    ) -> None:
        self.data_dir = os.fspath(data_dir)
        self.location = os.fspath(storage) if storage is not None else cube_location(data_dir)
        stamp = _local_stamp(self.location)
        known = _LAYOUT_CHECKED.get(stamp) if stamp is not None else None
        if known is not None:  # this very repository was checked in this process
            self.repo = open_repository(open_storage(self.location))
            self.block_level = known
        else:
            with commit_lock(self.data_dir):
                self.repo = open_repository(open_storage(self.location), create=True)
                self.block_level = _ensure_layout(self.repo, block_level)
            stamp = _local_stamp(self.location)
            if stamp is not None:
                _LAYOUT_CHECKED[stamp] = self.block_level
        self._codecs: dict[str, _ChunkCodec] = {}

    @contextmanager
    def transaction(
        self,
        partition_key: str,
        metadata: Mapping[str, Any] | None = None,
        message: str | None = None,
    ) -> Iterator[CubeTransaction]:
        """Open a transaction for one partition; commit once on normal exit.

        On an exception inside the ``with`` block nothing is committed and the
        exception propagates. The commit runs under the inter-process lock and
        rebases onto commits that landed meanwhile.

        Args:
            partition_key: The Dagster partition key (stored in the commit
                metadata as ``partition_key``).
            metadata: Extra JSON-serialisable commit metadata.
            message: Commit message (default ``"materialise <partition_key>"``).

        Yields:
            The transaction; use :meth:`CubeTransaction.write`.

        Raises:
            CommitConflict: A concurrent commit changed the same chunks.

        The chunks written with ``tx.write`` are stored when the block exits
        normally (or before a write that goes through Zarr), so a store error may
        surface there rather than from ``tx.write``; nothing is committed then.
        """
        if not partition_key:
            raise InvalidWrite("partition_key must be a non-empty string")
        session = self.repo.writable_session(MAIN_BRANCH)
        tx = CubeTransaction(session, partition_key, self._codecs)
        try:
            yield tx
            tx._flush()
        except BaseException:
            tx._close()
            if session.has_uncommitted_changes:
                session.discard_changes()
            raise
        tx._close()
        meta = {
            **(metadata or {}),
            "partition_key": partition_key,
            "layout_version": LAYOUT_VERSION,
        }
        tx.snapshot_id, tx.committed = self._commit(
            session, message or f"materialise {partition_key}", meta
        )

    def _commit(
        self, session: ic.Session, message: str, metadata: dict[str, Any]
    ) -> tuple[str, bool]:
        if not session.has_uncommitted_changes:
            return self.repo.lookup_branch(MAIN_BRANCH), False
        with commit_lock(self.data_dir):
            try:
                snapshot = session.commit(
                    message, metadata=metadata, rebase_with=ic.ConflictDetector(), rebase_tries=20
                )
            except ic.RebaseFailedError as exc:
                paths = sorted({c.path for c in exc.conflicts})
                raise CommitConflict(
                    f"concurrent commit changed the same chunks of {paths}; rerun the partition"
                ) from exc
        return snapshot, True

    def write_region(
        self,
        band: str,
        tslots: npt.ArrayLike,
        lat_q0: int,
        lng_q0: int,
        values: npt.ArrayLike,
        *,
        partition_key: str,
        metadata: Mapping[str, Any] | None = None,
    ) -> str:
        """Write one region of one band in its own transaction.

        Args:
            band: Band name.
            tslots: Time slots of ``values``' first axis (strictly increasing).
            lat_q0: Row of the region's first row.
            lng_q0: Column of the region's first column.
            values: ``(t, h, w[, d])`` values.
            partition_key: Partition key recorded in the commit.
            metadata: Extra commit metadata.

        Returns:
            The snapshot id after the commit.
        """
        with self.transaction(partition_key, metadata) as tx:
            tx.write(band, tslots, lat_q0, lng_q0, values)
        assert tx.snapshot_id is not None
        return tx.snapshot_id

    def list_snapshots(self) -> list[SnapshotInfo]:
        """Snapshots of ``main``, newest first."""
        return list_snapshots(self.repo)

    def snapshot_at(self, t: dt.datetime) -> SnapshotInfo | None:
        """Latest snapshot committed at or before ``t`` (naive = UTC)."""
        return snapshot_at(self.repo, t)


def _fill_mask(values: npt.NDArray[Any], fill: float | int) -> npt.NDArray[np.bool_]:
    if isinstance(fill, float) and math.isnan(fill):
        return np.isnan(values)
    return np.asarray(values == fill)


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
        self.max_region_elements = max_region_elements
        root = zarr.open_group(self.session.store, mode="r")
        self.block_level = _block_level(dict(root.attrs), DEFAULT_BLOCK_LEVEL)
        self._arrays: dict[str, zarr.Array] = {}
        self._index: dict[str, dict[tuple[int, int], npt.NDArray[np.int64]]] = {}

    @property
    def snapshot_id(self) -> str:
        """Id of the snapshot this reader sees."""
        return str(self.session.snapshot_id)

    @property
    def snapshot(self) -> SnapshotInfo:
        """Info (time, message, metadata) of the snapshot this reader sees."""
        return lookup_snapshot(self.repo, self.snapshot_id)

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
        arr = self._arrays.get(spec.path)
        if arr is None:
            arr = zarr.open_array(self.session.store, path=spec.path, mode="r", zarr_format=3)
            self._arrays[spec.path] = arr
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
                "/" + spec.path, batch_size=10_000
            )
            return [c async for c in coords]

        found = sync(collect())
        ndim = len(spec.shape)
        out = np.array(sorted(found), dtype=np.int64).reshape(len(found), ndim)
        return out

    def _chunk_index(self, spec: BandSpec) -> dict[tuple[int, int], npt.NDArray[np.int64]]:
        index = self._index.get(spec.path)
        if index is None:
            coords = self.chunks(spec.name)
            index = {}
            if coords.size:
                keys = coords[:, 1] * X_SIZE + coords[:, 2]
                order = np.lexsort((coords[:, 0], keys))
                coords, keys = coords[order], keys[order]
                starts = np.flatnonzero(np.r_[True, keys[1:] != keys[:-1]])
                for s, e in zip(starts, [*starts[1:], len(keys)], strict=True):
                    index[(int(coords[s, 1]), int(coords[s, 2]))] = np.unique(coords[s:e, 0])
            self._index[spec.path] = index
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
        index = self._chunk_index(spec)
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
        if _is_contiguous(slots):
            return np.asarray(arr[(slice(int(slots[0]), int(slots[-1]) + 1), ys, xs)])
        return np.asarray(arr.oindex[(slots, ys, xs)])

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
        _check_box(lat_q, lat_q + 1, lng_q, lng_q + 1)
        slots = self._candidate_tslots(spec, lat_q, lat_q + 1, lng_q, lng_q + 1, t0, t1)
        extra = (spec.extra_dim[1],) if spec.extra_dim else ()
        if slots.size == 0:
            return slots, np.zeros((0, *extra), dtype=spec.dtype)
        values = self._read(spec, slots, slice(lat_q, lat_q + 1), slice(lng_q, lng_q + 1))
        values = values[:, 0, 0]
        fill = _fill_mask(values, spec.fill_value)
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
        _check_box(lat_q0, lat_q1, lng_q0, lng_q1)
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
            fill = _fill_mask(values, spec.fill_value)
            keep = ~fill.reshape(fill.shape[0], -1).all(axis=1)
            slots, values = slots[keep], values[keep]
        return self._to_dataarray(spec, slots, lat_q0, lat_q1, lng_q0, lng_q1, values)

    def _to_dataarray(
        self,
        spec: BandSpec,
        slots: npt.NDArray[np.int64],
        lat_q0: int,
        lat_q1: int,
        lng_q0: int,
        lng_q1: int,
        values: npt.NDArray[Any],
    ) -> xr.DataArray:
        # Imported here: xarray (with pandas) costs seconds to import and the
        # writer processes that Dagster spawns never need it.
        import xarray as xr

        lat_q = np.arange(lat_q0, lat_q1, dtype=np.int64)
        lng_q = np.arange(lng_q0, lng_q1, dtype=np.int64)
        lat, lng = q_center(lat_q, lng_q)
        coords: dict[str, Any] = {
            "tslot": ("tslot", slots),
            "lat": ("lat", lat),
            "lng": ("lng", lng),
            "lat_q": ("lat", lat_q),
            "lng_q": ("lng", lng_q),
        }
        if spec.tempo == "day":
            coords["date"] = ("tslot", np.datetime64("1970-01-01", "D") + slots.astype("m8[D]"))
        else:
            coords["year"] = ("tslot", slots + 1970)
        dims = ("tslot", "lat", "lng", *((spec.extra_dim[0],) if spec.extra_dim else ()))
        return xr.DataArray(
            values,
            dims=dims,
            coords=coords,
            name=spec.name,
            attrs={
                "band": spec.name,
                "units": spec.units,
                "long_name": spec.long_name,
                "tempo": spec.tempo,
                "crs": "EPSG:4326",
                "snapshot_id": self.snapshot_id,
            },
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
            block: The block (``store.address.Block``).
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
        _check_box(lat_q, lat_q + 1, lng_q, lng_q + 1)
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
