"""The k-NN tables on object storage, and the local cache a server memory-maps them from.

Tables are scanned through memory maps and ``pread`` (:class:`~store.knn.table.KnnTable`),
which object storage cannot serve, so a data root on ``s3://bucket/prefix``
(:data:`store.snapshots.OBJECT_STORE_ENV`) keeps each table as plain objects and every
server copies the ones it reads into a local cache.

On object storage, per table name (``geotessera/<year>``, ``geotessera.multi_year``)::

    knn/<name>/<digest>/<file>      the files of one version (the .npy arrays and meta.json,
                                    exactly as :func:`~store.knn.write.write_table` wrote them)
    knn/<name>/CURRENT.json         the pointer: the version's digest (the content hash of its
                                    arrays, ``meta.json``'s ``digest``), each file's size and
                                    blake3 hash, and the table's meta (band, vintage, the cube
                                    snapshot it was built from)

:func:`publish_table` uploads a version's files first and then replaces the pointer with one
PUT, so a reader sees the old table or the new one, never a mix; it keeps the version the
pointer named before (a server may still be copying it) and deletes older ones.

The cache (:class:`TableCache`) is ``<data_dir>/knn`` in the layout a local ingest writes,
so :class:`~store.knn.table.KnnTable` opens it unchanged. A table is copied on first use (or
at the server's warm-up, :meth:`TableCache.warm`): into a hidden temporary folder, each file
checked against the pointer's size and hash, then swapped in by
:func:`~store.knn.write.install_version` (rename, then one atomic symlink rename). A new
table landing (the pointer names another digest) is copied and swapped the same way when
the server next checks (its refresh interval); readers holding the old version keep it.
The cache is bounded by :data:`CACHE_BYTES_ENV` (default :data:`DEFAULT_CACHE_BYTES`): the
least recently used tables are evicted to make room, and a table larger than the bound is
a typed :class:`~store.errors.VectorTableError` naming the setting.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import shutil
import tempfile
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeAlias

import blake3

from store.errors import StorageUnavailable, VectorTableError
from store.knn.mapped import read_meta
from store.knn.write import install_version, meta_needs_upgrade, upgrade_table
from store.leftovers import writing
from store.objects import ObjectRoot
from store.snapshots import object_root

__all__ = [
    "CACHE_BYTES_ENV",
    "DEFAULT_CACHE_BYTES",
    "KNN_PREFIX",
    "MULTI_YEAR_NAME",
    "POINTER_FORMAT",
    "UPGRADE_PREFIX",
    "LocalTables",
    "TableCache",
    "TableSource",
    "cache_bytes",
    "publish_local",
    "publish_table",
    "read_pointer",
    "remote_names",
    "table_source",
    "upgrade_tables",
]

_LOG = logging.getLogger("earthmem.knn")

KNN_PREFIX = "knn"
"""Key prefix of the tables under the object-storage root (and the cache's folder name)."""
MULTI_YEAR_NAME = "geotessera.multi_year"
"""Name of the multi-year table (the vintages are ``geotessera/<year>``)."""
POINTER_NAME = "CURRENT.json"
POINTER_FORMAT = "earthmem.knn-pointer/1"
CACHE_BYTES_ENV = "EARTHMEM_KNN_CACHE_BYTES"
"""Bound of a server's local k-NN cache in bytes (a plain integer)."""
DEFAULT_CACHE_BYTES = 16 << 30
"""16 GiB: a country's vintages at the sample's density stay well inside; set the bound to
the disk a server can give (a table's bytes are listed in its pointer)."""

_NAME = re.compile(r"^[a-z0-9_][a-z0-9_.-]*(/[a-z0-9_][a-z0-9_.-]*)*$")
_FILE = re.compile(r"^[a-z0-9_]+\.(npy|json)$")
_DIGEST = re.compile(r"^[0-9a-f]{64}$")
_HASH_STEP = 1 << 24


def _check_name(name: str) -> str:
    if not _NAME.match(name) or ".." in name:
        raise VectorTableError(f"not a k-NN table name: {name!r}")
    return name


def _file_hash(path: Path) -> str:
    h = blake3.blake3()
    with open(path, "rb") as f:
        while chunk := f.read(_HASH_STEP):
            h.update(chunk)
    return h.hexdigest()


def read_pointer(root: ObjectRoot, name: str) -> dict[str, Any] | None:
    """The pointer of a table on object storage, or None when there is no such table.

    Raises:
        VectorTableError: The pointer is malformed.
        StorageUnavailable: The storage could not be read.
    """
    raw = root.get(f"{KNN_PREFIX}/{_check_name(name)}/{POINTER_NAME}")
    if raw is None:
        return None
    try:
        pointer: dict[str, Any] = json.loads(raw)
        ok = (
            pointer.get("format") == POINTER_FORMAT
            and _DIGEST.match(str(pointer.get("digest")))
            and isinstance(pointer.get("files"), dict)
            and all(
                _FILE.match(f) and int(v["bytes"]) >= 0 and isinstance(v["blake3"], str)
                for f, v in pointer["files"].items()
            )
            and "meta.json" in pointer["files"]
        )
    except (ValueError, TypeError, KeyError) as exc:
        raise VectorTableError(f"k-NN table pointer of {name!r} is malformed: {exc}") from exc
    if not ok:
        raise VectorTableError(f"k-NN table pointer of {name!r} is malformed")
    return pointer


def publish_table(root: ObjectRoot, name: str, directory: str | os.PathLike[str]) -> str:
    """Upload the local table at ``directory`` as the current version of ``name``.

    The version's files go first, then the pointer (one PUT); identical content already
    current is a no-op. The version named before stays (a server may be copying it);
    older versions are deleted.

    Returns:
        The table's digest.

    Raises:
        VectorTableError: ``directory`` holds no table written by ``write_table``.
        StorageUnavailable: The storage refused a write (the pointer is then unchanged).
    """
    _check_name(name)
    version = Path(os.path.realpath(directory))
    meta = read_meta(version)
    digest = str(meta.get("digest", ""))
    if not _DIGEST.match(digest):
        raise VectorTableError(f"{version} has no table digest in its meta.json")
    files = {
        f.name: {"bytes": f.stat().st_size, "blake3": _file_hash(f)}
        for f in sorted(version.iterdir())
        if _FILE.match(f.name)
    }
    current = read_pointer(root, name)
    if current is not None and current["digest"] == digest and current["files"] == files:
        return digest
    base = f"{KNN_PREFIX}/{name}"
    for fname in files:
        root.upload(f"{base}/{digest}/{fname}", version / fname)
    described = ("band", "tslot", "vintage", "vintages", "snapshot_id", "n", "d")
    kept = {k: meta[k] for k in described if k in meta}
    pointer = {"format": POINTER_FORMAT, "digest": digest, "files": files, "meta": kept}
    root.put(f"{base}/{POINTER_NAME}", json.dumps(pointer, sort_keys=True).encode())
    keep = {digest, current["digest"] if current is not None else digest}
    stale = [
        k
        for k in root.keys(f"{base}/")
        if (part := k[len(base) + 1 :].split("/", 1)[0]) != POINTER_NAME
        and _DIGEST.match(part)
        and part not in keep
    ]
    if stale:
        root.delete(stale)
    return digest


def remote_names(root: ObjectRoot, family: str) -> list[str]:
    """The table names under ``knn/<family>/`` that have a pointer (``2024``, ...), sorted.

    Raises:
        StorageUnavailable: The storage could not be listed.
    """
    base = f"{KNN_PREFIX}/{_check_name(family)}/"
    out = set()
    for key in root.keys(base):
        parts = key[len(base) :].split("/")
        if len(parts) == 2 and parts[1] == POINTER_NAME:
            out.add(parts[0])
    return sorted(out)


def _years(names: Sequence[str]) -> list[int]:
    return sorted(int(n) for n in names if n.isdigit())


@dataclass(frozen=True)
class LocalTables:
    """The tables of a data directory on local disk (``<data_dir>/knn``): the default."""

    directory: Path

    def directory_of(self, name: str) -> Path | None:
        """The table's local path, or None when there is no such table."""
        path = self.directory / _check_name(name)
        return path if path.exists() else None

    def years(self) -> list[int]:
        """Years with a ``geotessera/<year>`` table, ascending."""
        root = self.directory / "geotessera"
        return _years([p.name for p in root.iterdir()]) if root.is_dir() else []

    def warm(self) -> list[str]:
        """Nothing to fill: the tables are on this disk."""
        return []


@dataclass(frozen=True)
class _Cached:
    link: Path
    version: Path
    nbytes: int
    used: float


class TableCache:
    """A server's local copy of the tables on object storage (see the module docstring).

    Args:
        root: The object-storage data root.
        directory: The cache folder (``<data_dir>/knn``; created on first fill).
        max_bytes: Bound of the cache.
        refresh_seconds: How long a listing of the remote tables is reused.
    """

    def __init__(
        self,
        root: ObjectRoot,
        directory: Path,
        max_bytes: int = DEFAULT_CACHE_BYTES,
        refresh_seconds: float = 1.0,
    ) -> None:
        self.root = root
        self.directory = directory
        self.max_bytes = int(max_bytes)
        self.refresh_seconds = float(refresh_seconds)
        self._lock = threading.Lock()
        self._names: dict[str, tuple[float, list[str]]] = {}

    def names(self, family: str) -> list[str]:
        """Remote table names of a family (reused for ``refresh_seconds``)."""
        now = time.monotonic()
        hit = self._names.get(family)
        if hit is not None and now - hit[0] < self.refresh_seconds:
            return hit[1]
        names = remote_names(self.root, family)
        self._names[family] = (now, names)
        return names

    def years(self) -> list[int]:
        """Years with a ``geotessera/<year>`` table on object storage, ascending."""
        return _years(self.names("geotessera"))

    def directory_of(self, name: str, *, evict: bool = True) -> Path | None:
        """The local path of the current version of ``name``, copied first when the cache
        lacks it or holds an older version; None when object storage has no such table.

        Raises:
            VectorTableError: The table is larger than the cache bound, or its copy does not
                match its pointer (nothing swapped in).
            StorageUnavailable: The storage could not be read.
        """
        with self._lock:
            for attempt in range(2):
                pointer = read_pointer(self.root, name)
                if pointer is None:
                    return None
                local = self.directory / name
                if _local_digest(local) == pointer["digest"]:
                    with contextlib.suppress(OSError):  # recently used (for the eviction order)
                        os.utime(os.path.realpath(local))
                    return local
                try:
                    self._fill(name, pointer, evict)
                    return local
                except _Replaced:
                    if attempt:
                        raise VectorTableError(
                            f"k-NN table {name!r} was replaced twice while being copied"
                        ) from None
            return None  # pragma: no cover (the loop returns or raises)

    def warm(self) -> list[str]:
        """Copy every remote table that fits without evicting another (the multi-year table,
        then the vintages newest first); returns the names now cached. A table that fails is
        logged and left to the first query that needs it."""
        names = ["geotessera.multi_year", *(f"geotessera/{y}" for y in reversed(self.years()))]
        done = []
        for name in names:
            try:
                if self.directory_of(name, evict=False) is not None:
                    done.append(name)
            except (VectorTableError, StorageUnavailable) as exc:
                _LOG.warning("k-NN cache warm-up: %s not cached: %s", name, exc)
        return done

    def _fill(self, name: str, pointer: dict[str, Any], evict: bool) -> None:
        need = sum(int(v["bytes"]) for v in pointer["files"].values())
        if need > self.max_bytes:
            raise VectorTableError(
                f"k-NN table {name!r} needs {need} bytes, more than the local cache's bound "
                f"{self.max_bytes} ({CACHE_BYTES_ENV})"
            )
        link = self.directory / name
        cached = [c for c in _cached(self.directory) if c.link != link]
        used = sum(c.nbytes for c in cached)
        for victim in sorted(cached, key=lambda c: c.used):
            if used + need <= self.max_bytes:
                break
            if not evict:
                raise VectorTableError(f"no room for k-NN table {name!r} without evicting")
            _LOG.info("k-NN cache: evicting %s (%d bytes) for %s", victim.link, victim.nbytes, name)
            victim.link.unlink(missing_ok=True)
            shutil.rmtree(victim.version, ignore_errors=True)
            used -= victim.nbytes
        digest = pointer["digest"]
        base = f"{KNN_PREFIX}/{name}/{digest}"

        def fill(tmp: Path) -> None:
            for fname, want in sorted(pointer["files"].items()):
                target = tmp / fname
                if not self.root.download(f"{base}/{fname}", target):
                    raise _Replaced(name)
                size = target.stat().st_size
                if size != int(want["bytes"]) or _file_hash(target) != want["blake3"]:
                    raise VectorTableError(
                        f"k-NN table {name!r} version {digest[:16]}: {fname} does not match "
                        f"its pointer ({size} bytes, {want['bytes']} expected, or its hash)"
                    )
                with open(target, "rb") as f:
                    os.fsync(f.fileno())
            if read_meta(tmp).get("digest") != digest:
                raise VectorTableError(f"k-NN table {name!r}: meta.json names another digest")

        link.parent.mkdir(parents=True, exist_ok=True)
        install_version(link, digest, fill)


class _Replaced(Exception):
    """A version's file vanished while being copied: the pointer moved on; read it again."""


def _local_digest(link: Path) -> str | None:
    if not link.exists():
        return None
    try:
        return str(read_meta(Path(os.path.realpath(link))).get("digest"))
    except VectorTableError:
        return None


def _cached(directory: Path) -> list[_Cached]:
    """The table names in a cache folder with their version folder, bytes and last use."""
    out: list[_Cached] = []
    if not directory.is_dir():
        return out
    for top, dirs, files in os.walk(directory):
        for entry in [*dirs, *files]:
            link = Path(top) / entry
            if entry.startswith(".") or not link.is_symlink():
                continue
            version = Path(os.path.realpath(link))
            try:
                nbytes = sum(f.stat().st_size for f in version.iterdir())
                used = version.stat().st_mtime
            except OSError:
                continue
            out.append(_Cached(link, version, nbytes, used))
        dirs[:] = [d for d in dirs if not d.startswith(".") and not (Path(top) / d).is_symlink()]
    return out


TableSource: TypeAlias = LocalTables | TableCache
"""Where a process finds its k-NN tables."""


def cache_bytes() -> int:
    """The cache bound from :data:`CACHE_BYTES_ENV` (default :data:`DEFAULT_CACHE_BYTES`).

    Raises:
        VectorTableError: The setting is not a positive integer.
    """
    text = os.environ.get(CACHE_BYTES_ENV, "").strip()
    if not text:
        return DEFAULT_CACHE_BYTES
    if not text.isdigit() or int(text) <= 0:
        raise VectorTableError(f"{CACHE_BYTES_ENV} must be a positive number of bytes: {text!r}")
    return int(text)


def table_source(data_dir: str | os.PathLike[str], refresh_seconds: float = 1.0) -> TableSource:
    """The tables of a data directory: on its disk, or on the object-storage root (when
    :data:`store.snapshots.OBJECT_STORE_ENV` names one) through a cache in ``<data_dir>/knn``.
    The one place that chooses."""
    directory = Path(data_dir) / KNN_PREFIX
    root = object_root()
    if root is None:
        return LocalTables(directory)
    return TableCache(ObjectRoot.from_url(root), directory, cache_bytes(), refresh_seconds)


def publish_local(data_dir: str | os.PathLike[str], name: str) -> str | None:
    """Publish the table ``<data_dir>/knn/<name>`` (just written by ``write_table``) to the
    object-storage root when one is configured; its digest, or None on local disk (nothing
    to do: the data directory is where the tables live).

    Raises:
        StorageUnavailable: The storage refused a write (the pointer is then unchanged).
    """
    root = object_root()
    if root is None:
        return None
    return publish_table(ObjectRoot.from_url(root), name, Path(data_dir) / KNN_PREFIX / name)


UPGRADE_PREFIX = ".knn-upgrade-"
"""Prefix of the private folder (in the data directory) an upgrade on object storage writes a
table's new version into before publishing it."""


def _current_on_storage(root: ObjectRoot, name: str) -> bool:
    """Whether the published version of ``name`` is of the current layout, by its ``meta.json``
    alone (one small read, checked against the pointer's size, hash and digest). False when
    there is no such table, or its meta cannot tell: the caller then opens the table itself.
    A table found current here is not opened, so its arrays are not checked by the upgrade:
    a server checks every file it copies against the pointer (:class:`TableCache`).

    Raises:
        StorageUnavailable: The storage could not be read.
    """
    pointer = read_pointer(root, name)
    if pointer is None:
        return False
    raw = root.get(f"{KNN_PREFIX}/{name}/{pointer['digest']}/meta.json")
    want = pointer["files"]["meta.json"]
    if (
        raw is None
        or len(raw) != int(want["bytes"])
        or blake3.blake3(raw).hexdigest() != want["blake3"]
    ):
        return False  # not the meta the pointer names: the table itself is opened
    try:
        meta = json.loads(raw)
    except ValueError:
        return False
    return (
        isinstance(meta, dict)
        and meta.get("digest") == pointer["digest"]
        and meta_needs_upgrade(meta) is False
    )


def upgrade_tables(data_dir: str | os.PathLike[str]) -> dict[str, bool]:
    """Rewrite every table of a data directory written by an older layout
    (:func:`~store.knn.write.upgrade_table`); ``{name: rewritten}`` for every table found.

    On local disk each table is rewritten in place (a new version swapped in; readers of the
    old keep it). On an object-storage root a table whose published ``meta.json`` says it is
    current (:func:`~store.knn.write.meta_needs_upgrade`) is left there, not copied; each
    other one is read through the cache and written into a
    private folder of the data directory, which is published (:func:`publish_table`) and
    removed: the cache itself is left to the servers that share it, which swap the new
    version in at their next refresh.

    Raises:
        VectorTableError: A table could not be read (damaged, larger than the cache bound).
        StorageUnavailable: The object storage could not be read or written.
    """
    source = table_source(data_dir, refresh_seconds=0.0)
    root = object_root()
    if root is None:
        local = [(name, source.directory_of(name)) for name in _names(source)]
        return {name: upgrade_table(d) for name, d in local if d is not None}
    objects = ObjectRoot.from_url(root)
    done: dict[str, bool] = {}
    # a registered writer of the data directory: an upgrade killed mid-way left its private
    # folder behind; the next one that finds no other upgrade live removes it
    with writing(data_dir, _upgrade_leftovers):
        for name in _names(source):
            if _current_on_storage(objects, name):
                done[name] = False  # its meta.json says so: nothing copied
                continue
            directory = source.directory_of(name)
            if directory is None:
                continue
            work = Path(tempfile.mkdtemp(prefix=UPGRADE_PREFIX, dir=data_dir))
            try:
                done[name] = upgrade_table(directory, work / "t")
                if done[name]:
                    publish_table(objects, name, work / "t")
            finally:
                shutil.rmtree(work, ignore_errors=True)
    return done


def _names(source: TableSource) -> list[str]:
    """Every table name of a source: each vintage's, then the multi-year table's."""
    return [*(f"geotessera/{y}" for y in source.years()), MULTI_YEAR_NAME]


def _upgrade_leftovers(data_dir: Path) -> list[Path]:
    """The private folders of upgrades that were killed (meaningful while none is live)."""
    return sorted(data_dir.glob(f"{UPGRADE_PREFIX}*"))
