"""Writing the cube: transactions of one partition, committed once.

:class:`CubeWriter` writes inside :meth:`CubeWriter.transaction`: one icechunk
writable session per partition, committed once on exit (the commit metadata
carries the ``partition_key``), discarded on exception. Commits from several
processes are serialised by an ``flock`` on ``<data_dir>/cube.lock`` when the cube
is on local disk (on object storage icechunk's conditional writes order them) and rebase
on conflict (icechunk ``ConflictDetector``: commits touching different chunks
both land; the same chunk changed by two concurrent commits raises
:class:`~store.errors.CommitConflict`). A run killed mid-write leaves the branch
at its last snapshot (uncommitted chunk objects are unreferenced garbage that
``Repository.garbage_collect`` removes); a rerun starts a fresh session.
Re-materialising a partition writes identical array contents and *does* commit
a new snapshot (same contents, new id); a transaction that wrote nothing commits
nothing and reports the branch tip (one that wrote only fill values does commit,
with unchanged contents).

What a transaction holds and how it encodes and stores it is
:class:`store.cube.transaction.CubeTransaction` (re-exported here).
"""

from __future__ import annotations

import datetime as dt
import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from functools import partial
from typing import Any

import icechunk as ic
import numpy.typing as npt
import zarr

from store.cube.codec import ChunkCodec
from store.cube.inventory import (
    INVENTORY_ARRAY,
    InventoryChunks,
)
from store.cube.layout import DEFAULT_BLOCK_LEVEL, LAYOUT_VERSION, ensure_layout
from store.cube.transaction import CubeTransaction
from store.deadline import SENT, UNSENT, within_deadline
from store.errors import (
    CommitConflict,
    InvalidWrite,
    StorageTimeout,
    StorageUnavailable,
)
from store.snapshots import (
    MAIN_BRANCH,
    SnapshotInfo,
    commit_guard,
    commit_lock,
    cube_location,
    is_object_storage,
    list_snapshots,
    open_repository,
    open_storage,
    snapshot_at,
    storage_error_text,
    writer_presence,
)

__all__ = ["CubeTransaction", "CubeWriter", "migrate_inventory"]


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
                self.block_level = ensure_layout(self.repo, block_level, self.data_dir)
            stamp = _local_stamp(self.location)
            if stamp is not None:
                _LAYOUT_CHECKED[stamp] = self.block_level
        self._codecs: dict[str, ChunkCodec] = {}
        self._inventory_chunks: dict[str, InventoryChunks] = {}
        self._remote = is_object_storage(self.location)  # writes and commits under a deadline

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
        with writer_presence(self.data_dir):  # garbage collection waits for the commit
            session = self.repo.writable_session(MAIN_BRANCH)
            tx = CubeTransaction(
                session, partition_key, self._codecs, self._inventory_chunks, remote=self._remote
            )
            try:
                yield tx
                # a store that stops answering: a typed error, not a hang
                what = f"storing {partition_key!r}"
                within_deadline(tx.store_pending, what, UNSENT, remote=self._remote)
            except StorageTimeout:
                tx._close()  # the abandoned call still holds the session: left alone
                raise
            except BaseException:
                tx._close()
                if session.has_uncommitted_changes:
                    session.discard_changes()
                raise
            meta = {
                **(metadata or {}),
                "partition_key": partition_key,
                "layout_version": LAYOUT_VERSION,
            }
            tx.snapshot_id, tx.committed = self.commit_session(
                session, message or f"materialise {partition_key}", meta
            )

    def commit_session(
        self, session: ic.Session, message: str, metadata: dict[str, Any]
    ) -> tuple[str, bool]:
        """Commit a writable session of this repository (rebased on conflict), once.

        Returns:
            ``(snapshot id, committed)``: the branch tip and False when it changed nothing.

        Raises:
            CommitConflict: A concurrent commit changed the same chunks.
            StorageUnavailable: The storage refused the commit (nothing committed).
            StorageTimeout: On object storage, no answer within the deadline (its outcome
                unknown; :mod:`store.deadline`).
        """
        if not session.has_uncommitted_changes:
            return self.repo.lookup_branch(MAIN_BRANCH), False
        with commit_guard(self.location, self.data_dir):
            try:
                commit = partial(
                    session.commit,
                    message,
                    metadata=metadata,
                    rebase_with=ic.ConflictDetector(),
                    rebase_tries=20,
                )
                what = f"commit to {self.location}"
                snapshot = within_deadline(commit, what, SENT, remote=self._remote)
            except ic.RebaseFailedError as exc:
                paths = sorted({c.path for c in exc.conflicts})
                raise CommitConflict(
                    f"concurrent commit changed the same chunks of {paths}; rerun the partition"
                ) from exc
            except ic.IcechunkError as exc:
                raise StorageUnavailable(
                    f"commit to {self.location} failed, nothing committed:"
                    f" {storage_error_text(exc)}"
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


def migrate_inventory(data_dir: str | os.PathLike[str]) -> bool:
    """Move a data directory written before onto the versioned inventory (idempotent).

    Opening a :class:`CubeWriter` does it (``earthmem ingest`` does): the layout
    commit that adds ``inventory/partitions`` imports the rows of the legacy
    ``<data_dir>/inventory/*.parquet`` files, which stay in place.

    Returns:
        Whether the tip has the versioned inventory afterwards.
    """
    writer = CubeWriter(data_dir)
    root = zarr.open_group(writer.repo.readonly_session(MAIN_BRANCH).store, mode="r")
    return INVENTORY_ARRAY in root
