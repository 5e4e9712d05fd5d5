"""Where the cube lives and which snapshots it has.

The cube is one icechunk repository. This module turns a location (a local
path or an ``s3://bucket/prefix`` URL) into an icechunk ``Storage``, opens the
repository, serialises commits across processes with a file lock, and lists
the committed snapshots of the ``main`` branch for time travel.

Snapshots are listed newest first (icechunk's ancestry order). The time-travel
rule is: the snapshot *at* ``t`` is the latest one committed at or before
``t`` (``written_at <= t``).
"""

from __future__ import annotations

import datetime as dt
import fcntl
import os
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import icechunk as ic

if "ICECHUNK_LOG" not in os.environ:
    # icechunk warns on every open that local-filesystem storage is unsafe for
    # concurrent commits; commits here are serialised by :func:`commit_lock`,
    # so keep only errors unless the user asks for more with ICECHUNK_LOG.
    ic.set_logs_filter("error")

from store.errors import (
    CubeNotFound,
    SnapshotExpired,
    SnapshotNotFound,
    StorageUnavailable,
    UnsupportedStorage,
)

__all__ = [
    "CUBE_DIRNAME",
    "EXPIRED_TAG_PREFIX",
    "INVENTORY_MANIFEST_SPLITS",
    "LOCK_FILENAME",
    "MAIN_BRANCH",
    "MANIFEST_SPLIT_TIME_CHUNKS",
    "OBJECT_STORE_ENV",
    "WRITERS_FILENAME",
    "SnapshotInfo",
    "commit_guard",
    "commit_lock",
    "cube_exists",
    "cube_location",
    "is_object_storage",
    "list_snapshots",
    "lookup_snapshot",
    "object_root",
    "open_repository",
    "open_storage",
    "repository_config",
    "snapshot_at",
    "storage_error_text",
    "writer_presence",
    "writers_excluded",
]

CUBE_DIRNAME = "cube.icechunk"
"""Directory name of the icechunk repository under the data directory."""

LOCK_FILENAME = "cube.lock"
"""File under the data directory locked (``flock``) around every commit."""

MAIN_BRANCH = "main"
"""The only branch the pipeline commits to."""

WRITERS_FILENAME = "cube.writers.lock"
"""File under the data directory every open write transaction holds shared
(:func:`writer_presence`); garbage collection holds it exclusive (:func:`writers_excluded`),
so it never deletes the chunks of a transaction that has not committed yet."""

MANIFEST_SPLIT_TIME_CHUNKS = 26
"""Time chunks per manifest split of the lattice arrays (26 weeks of day slots, 26 years).

Without splitting, icechunk keeps one manifest per array listing every chunk ever written,
and each commit that touches the array rewrites all of it: a week's commit cost grows with
the store (9.4 -> 65.1 ms of CPU per commit over 200 weeks of 8 arrays in a probe, against
14 ms split; bench/HISTORY.md, session 11). Split along
``tslot`` (axis 0), a commit rewrites only the manifests of the half-year it writes. Only
axis 0 is split, and only for the arrays whose axis 0 is ``tslot``: icechunk enumerates a
split array's splits, and splitting the lattice's spatial axes (16,384 x 32,768 chunks) in
chunks runs out of memory; the inventory array (2**31 chunks a side) is split in a few wide
ranges instead (:data:`INVENTORY_MANIFEST_SPLITS`)."""

READ_BATCH_CONCURRENCY = 32
"""Requests in flight per batched chunk read: :data:`store.cube.codec.FETCH_GROUP` keys."""

_SPLIT_ARRAYS = r"^/(indices|s1|s2|geotessera|summaries)/[^/]+$"
"""Arrays whose axis 0 is the time slot (the bands and their summaries): every array of the
layout but the inventory's.

:func:`repository_config` no longer names them by this pattern (a test checks that the layout
has no other arrays): icechunk 1.1 compiles every ``path_matches`` condition's regex anew each
time it works out an array's splits, i.e. for every array a session writes to, and evaluates
every condition (the first that matches decides an axis). With the inventory's literal path
first and ``AnyArray`` for the rest, each check compiles one short literal pattern instead of
this alternation and the literal; the splits are the same for every array of the layout."""

INVENTORY_MANIFEST_SPLITS = 64
"""Manifest splits of the inventory array (``inventory/partitions``) along its axis 0.

Each partition's rows are one chunk at a hashed position (:func:`store.cube.inventory.
chunk_position`, uniform over 2**31 x 2**31), and every commit that ingests a partition
rewrites the manifest holding its chunk. Unsplit, that manifest lists every partition ever
written (1,600 inlined refs, 293 KB, in the 1,000-scene bench store) and each commit rewrote
it whole. Cut into 64 ranges of axis 0, a commit rewrites ~1/64 of it. Few and wide: icechunk
enumerates the splits of an axis (a split of 26 chunks of this 2**31-chunk axis ran it out of
memory), and the snapshot lists one manifest per split. A repository written before is split
by its next commit that touches the inventory (a one-off rewrite of its rows' refs)."""

_INVENTORY_SPLIT_CHUNKS = (1 << 31) // INVENTORY_MANIFEST_SPLITS
"""Chunks of the inventory's axis 0 (2**31 of them) per manifest split."""

_INVENTORY_PATH = r"^/inventory/partitions$"
"""The inventory array (:data:`store.cube.inventory.INVENTORY_ARRAY`, which imports this
module: the path is repeated here, and a test checks that the two agree)."""

EXPIRED_TAG_PREFIX = "earthmem-expired-before-"
"""Tags on the repository's root snapshot recording that history was expired (retention):
the root costs nothing to keep, and the tag travels with the repository (local or S3)."""


@dataclass(frozen=True)
class SnapshotInfo:
    """One committed snapshot of the cube."""

    id: str
    """icechunk snapshot id (base32 text)."""
    written_at: dt.datetime
    """Commit time, timezone-aware UTC."""
    message: str
    """Commit message."""
    metadata: dict[str, Any] = field(default_factory=dict)
    """Commit metadata (``partition_key`` and what the pipeline passed)."""
    parent_id: str | None = None
    """Parent snapshot id; ``None`` for the repository's first snapshot."""


OBJECT_STORE_ENV = "EARTHMEM_OBJECT_STORE"
"""The data root on object storage (``s3://bucket/prefix``): when set, the cube is
``<root>/cube.icechunk`` there and the k-NN tables are under ``<root>/knn``
(:mod:`store.knn.remote`). The data directory keeps what must stay local (the signing
key, the commit lock, the memory database, the servers' cache of the k-NN tables)."""


def object_root() -> str | None:
    """The configured object-storage data root (:data:`OBJECT_STORE_ENV`), or None.

    Raises:
        UnsupportedStorage: It is set but is not an ``s3://bucket[/prefix]`` URL.
    """
    root = os.environ.get(OBJECT_STORE_ENV, "").strip().rstrip("/")
    if not root:
        return None
    if not root.startswith("s3://") or not root[len("s3://") :].split("/", 1)[0]:
        raise UnsupportedStorage(f"{OBJECT_STORE_ENV} must be s3://bucket[/prefix], got {root!r}")
    return root


def cube_location(data_dir: str | os.PathLike[str]) -> str:
    """Location of the cube of a data directory: on the object-storage root when one is
    configured (:func:`object_root`), else inside the directory.

    Args:
        data_dir: The pipeline's data directory.

    Returns:
        ``s3://bucket/prefix/cube.icechunk`` or ``<data_dir>/cube.icechunk``, as a string.
    """
    root = object_root()
    if root is not None:
        return f"{root}/{CUBE_DIRNAME}"
    return str(Path(data_dir) / CUBE_DIRNAME)


def cube_exists(data_dir: str | os.PathLike[str]) -> bool:
    """Whether the data directory's cube repository exists (wherever it lives)."""
    location = cube_location(data_dir)
    if not is_object_storage(location):
        return Path(location).exists()
    return bool(ic.Repository.exists(open_storage(location)))


def open_storage(url_or_path: str | os.PathLike[str]) -> ic.Storage:
    """Build the icechunk storage for a local path or an object-store URL.

    ``s3://bucket/prefix`` uses :func:`icechunk.s3_storage` with credentials,
    region and endpoint from the environment (``AWS_ACCESS_KEY_ID`` ...,
    ``AWS_REGION``, ``AWS_ENDPOINT_URL[_S3]``), never from files; building
    it does not touch the network. ``file://`` URLs and plain paths use the
    local filesystem storage.

    Args:
        url_or_path: Local path, ``file://`` URL or ``s3://bucket[/prefix]``.

    Returns:
        An icechunk ``Storage``.

    Raises:
        UnsupportedStorage: Another URL scheme, or an S3 URL without a bucket.
    """
    text = os.fspath(url_or_path)
    if text.startswith("s3://"):
        bucket, _, prefix = text[len("s3://") :].partition("/")
        if not bucket:
            raise UnsupportedStorage(f"S3 URL without a bucket: {text!r}")
        endpoint = os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")
        return ic.s3_storage(
            bucket=bucket,
            prefix=prefix.strip("/") or None,
            region=os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION"),
            endpoint_url=endpoint or None,
            # an endpoint named explicitly (MinIO, moto, a gateway) is addressed by path; plain
            # http only when that endpoint says http://
            allow_http=bool(endpoint and endpoint.startswith("http://")),
            force_path_style=bool(endpoint),
            from_env=True,
        )
    if text.startswith("file://"):
        text = text[len("file://") :]
    elif "://" in text:
        raise UnsupportedStorage(f"unsupported storage URL (use a path or s3://): {text!r}")
    return ic.local_filesystem_storage(str(Path(text).absolute()))


def repository_config() -> ic.RepositoryConfig:
    """The repository configuration every open uses: manifests split by time (the inventory's
    by hashed position, :data:`INVENTORY_MANIFEST_SPLITS`), no manifest preloading, and
    batched chunk reads with as many requests in flight as a batch holds.

    A new repository stores it (icechunk writes ``config.yaml`` on creation); it is also
    given on every open, so a repository created before it (one manifest per array) is split
    from its next commit on, nothing to migrate: icechunk writes the manifests of the arrays
    a commit changes with the configuration of the session, and reads any mix of split and
    unsplit manifests (:data:`MANIFEST_SPLIT_TIME_CHUNKS`).

    ``get_partial_values_concurrency`` (icechunk's default 10) bounds the requests one
    batched read (:func:`store.cube.codec.get_stored`, :data:`READ_BATCH_CONCURRENCY` keys)
    keeps in flight: at 10, a batch of 32 chunks on object storage waits four request
    latencies instead of one.

    Manifest preloading is off. icechunk's default preloads the manifests of coordinate-like
    arrays (``time``, ``lat``, ``x`` ...) when a session opens; the cube has none, but deciding
    so costs six regex compilations per manifest of each of the first 50 arrays, on every
    session (icechunk 1.1 compiles them anew each time, on its tokio threads). With manifests
    split by time that grows with the store's span: in a probe of the flatness batch (16
    partitions) icechunk's threads spent ~4.5 s in the 1,000-scene store and ~2 s in the
    12-scene one, ~0.7 s in both without it (bench/HISTORY.md, session 13).
    """
    cond, dim = ic.ManifestSplitCondition, ic.ManifestSplitDimCondition
    config = ic.RepositoryConfig.default()
    config.get_partial_values_concurrency = READ_BATCH_CONCURRENCY
    config.manifest = ic.ManifestConfig(
        preload=ic.ManifestPreloadConfig(
            max_total_refs=0, preload_if=ic.ManifestPreloadCondition.false()
        ),
        splitting=ic.ManifestSplittingConfig.from_dict(
            {
                # in this order: the inventory's split first (a literal path), then every other
                # array by time, with no pattern (:data:`_SPLIT_ARRAYS` names the same arrays)
                cond.path_matches(_INVENTORY_PATH): {dim.Axis(0): _INVENTORY_SPLIT_CHUNKS},
                cond.AnyArray(): {dim.Axis(0): MANIFEST_SPLIT_TIME_CHUNKS},
            }
        ),
    )
    return config


def open_repository(storage: ic.Storage, *, create: bool = False) -> ic.Repository:
    """Open the cube's icechunk repository (with :func:`repository_config`).

    Creation is not safe from several processes at once: callers that may
    create (the writer) hold :func:`commit_lock` around this call.

    Args:
        storage: Where the repository lives.
        create: Create an empty repository if none exists.

    Returns:
        The opened repository.

    Raises:
        CubeNotFound: No repository there and ``create`` is false.
        StorageUnavailable: The storage could not be read or written (object storage
            down, a missing bucket, denied credentials).
    """
    try:
        if create:
            return ic.Repository.open_or_create(storage, config=repository_config())
        if not ic.Repository.exists(storage):
            raise CubeNotFound(f"no cube repository at {storage}")
        return ic.Repository.open(storage, config=repository_config())
    except ic.IcechunkError as exc:
        raise StorageUnavailable(
            f"cube storage {storage} failed: {storage_error_text(exc)}"
        ) from exc


def storage_error_text(exc: BaseException) -> str:
    """The first line of an icechunk error (its context trace follows on the next lines)."""
    text = str(exc).strip().splitlines()
    return text[0].strip(" x") if text else type(exc).__name__


@contextmanager
def commit_lock(data_dir: str | os.PathLike[str]) -> Iterator[None]:
    """Hold an exclusive inter-process lock on ``<data_dir>/cube.lock``.

    icechunk's local filesystem storage is not safe for concurrent commits,
    and Dagster runs partitions in separate processes; every commit (and the
    repository creation) happens under this lock. ``flock`` locks are
    released by the kernel when the holder dies, so a killed run cannot
    leave the cube locked.

    Args:
        data_dir: The data directory (created if missing).

    Yields:
        Nothing; the lock is held inside the ``with`` block.
    """
    with _flock(data_dir, LOCK_FILENAME, fcntl.LOCK_EX):
        yield


def is_object_storage(location: str | os.PathLike[str]) -> bool:
    """Whether a cube location is on object storage (``s3://``) rather than a local path."""
    return os.fspath(location).startswith("s3://")


def commit_guard(location: str | os.PathLike[str], data_dir: str | os.PathLike[str]) -> Any:
    """What a commit to the cube at ``location`` holds: :func:`commit_lock` on local disk, nothing
    on object storage.

    icechunk's local filesystem storage cannot order concurrent commits, so a host-local
    ``flock`` does. On object storage the branch update is a conditional write: of two commits
    racing from different machines one wins and the other rebases (or fails with the
    conflicting chunks), with no lock; a host-local lock would protect nothing there.
    """
    return nullcontext() if is_object_storage(location) else commit_lock(data_dir)


@contextmanager
def _flock(data_dir: str | os.PathLike[str], name: str, mode: int) -> Iterator[None]:
    path = Path(data_dir)
    path.mkdir(parents=True, exist_ok=True)
    with open(path / name, "a+b") as handle:
        fcntl.flock(handle.fileno(), mode)
        try:
            yield
        finally:
            fcntl.flock(handle.fileno(), fcntl.LOCK_UN)


def writer_presence(data_dir: str | os.PathLike[str]) -> Any:
    """Shared lock held by a write transaction from its first chunk to its commit."""
    return _flock(data_dir, WRITERS_FILENAME, fcntl.LOCK_SH)


def writers_excluded(data_dir: str | os.PathLike[str]) -> Any:
    """Exclusive lock: waits for open transactions to end and holds new ones back."""
    return _flock(data_dir, WRITERS_FILENAME, fcntl.LOCK_EX)


def _as_utc(t: dt.datetime) -> dt.datetime:
    """Naive datetimes are taken as UTC; aware ones are converted to UTC."""
    if t.tzinfo is None:
        return t.replace(tzinfo=dt.UTC)
    return t.astimezone(dt.UTC)


def _info(raw: ic.SnapshotInfo) -> SnapshotInfo:
    return SnapshotInfo(
        id=raw.id,
        written_at=_as_utc(raw.written_at),
        message=raw.message,
        metadata=dict(raw.metadata),
        parent_id=raw.parent_id,
    )


def list_snapshots(repo: ic.Repository, branch: str = MAIN_BRANCH) -> list[SnapshotInfo]:
    """Every snapshot of a branch, newest first.

    Args:
        repo: The cube repository.
        branch: Branch name.

    Returns:
        Snapshots from the branch tip back to the repository's first one.
    """
    return [_info(raw) for raw in repo.ancestry(branch=branch)]


def snapshot_at(
    repo: ic.Repository, t: dt.datetime, branch: str = MAIN_BRANCH
) -> SnapshotInfo | None:
    """The latest snapshot committed at or before ``t``.

    Args:
        repo: The cube repository.
        t: Instant; a naive datetime is taken as UTC.
        branch: Branch name.

    Returns:
        The snapshot, or ``None`` when the branch has none that old.

    Raises:
        SnapshotExpired: ``t`` falls before the retained history (retention expired the
            snapshots of that time); the error names the oldest snapshot kept.
    """
    when = _as_utc(t)
    oldest: Any = None
    for raw in repo.ancestry(branch=branch):
        if _as_utc(raw.written_at) <= when:
            if raw.parent_id is None and oldest is not None and _expired(repo):
                kept = _as_utc(oldest.written_at).isoformat()
                raise SnapshotExpired(
                    f"no snapshot kept at {when.isoformat()}: older history was expired by "
                    f"retention; the oldest snapshot kept is {oldest.id} ({kept})",
                    oldest.id,
                    kept,
                )
            return _info(raw)
        oldest = raw
    return None


def _expired(repo: ic.Repository) -> bool:
    """Whether retention ever expired snapshots of this repository."""
    return any(tag.startswith(EXPIRED_TAG_PREFIX) for tag in repo.list_tags())


def lookup_snapshot(repo: ic.Repository, snapshot_id: str) -> SnapshotInfo:
    """Metadata of one snapshot by id.

    Args:
        repo: The cube repository.
        snapshot_id: icechunk snapshot id.

    Returns:
        The snapshot's info.

    Raises:
        SnapshotNotFound: No such snapshot.
    """
    try:
        return _info(repo.lookup_snapshot(snapshot_id))
    except (ic.IcechunkError, ValueError) as exc:
        raise SnapshotNotFound(f"unknown snapshot id {snapshot_id!r}") from exc
