"""Retention of the cube's history: expire old snapshots and collect what nothing reaches.

Every ingest commits new snapshots, and identical re-ingests keep adding
manifests, snapshots and chunks that no later snapshot needs. :func:`collect_cube`
applies the documented retention:

* snapshots of ``main`` committed within the last ``keep_days`` days stay readable
  (``as_of`` a time in the window answers as before);
* the branch tip always stays, whatever its age;
* tagged snapshots stay (icechunk keeps what a tag points at; pin a snapshot by tagging it);
* older snapshots are expired (icechunk ``expire_snapshots``) and the objects no
  branch or tag reaches any more are deleted (``garbage_collect``).

After an expiry the repository's root snapshot gets a tag
``earthmem-expired-before-<time>`` (:data:`store.snapshots.EXPIRED_TAG_PREFIX`), so a
read ``as_of`` a time before the retained history raises
:class:`~store.errors.SnapshotExpired` naming the oldest snapshot kept, instead of
answering from the empty root.

**Writes in flight.** A write uploads its chunks before its commit makes them reachable, so a
collection must not delete unreachable objects a write is about to commit. On local disk
collection holds the data directory's writers lock exclusively
(:func:`store.snapshots.writers_excluded`): it waits for this host's open write transactions
to commit, and a local cube has no writers on other hosts. On object storage coordinators and
Dask workers on other machines write forks no host-local lock sees, so there only objects
older than a **grace period** are collected (icechunk's ``delete_object_older_than``):
:data:`DEFAULT_GRACE_HOURS` by default, ``EARTHMEM_GC_GRACE_HOURS`` or ``grace_hours`` to
change it. A write whose first chunk is older than the grace when a collection runs can lose
chunks to it, so the grace must exceed the longest write (a partition range's run, from its
first task to its commit). Unreachable objects younger than the grace wait for a later
collection. Readers holding a reader on an expired snapshot may fail afterwards; the tip is
never affected.
"""

from __future__ import annotations

import datetime as dt
import os
from dataclasses import dataclass

import icechunk as ic

from store.errors import StorageUnavailable, UnsupportedStorage
from store.snapshots import (
    EXPIRED_TAG_PREFIX,
    MAIN_BRANCH,
    SnapshotInfo,
    commit_lock,
    cube_location,
    is_object_storage,
    list_snapshots,
    open_repository,
    open_storage,
    storage_error_text,
    writers_excluded,
)

__all__ = [
    "DEFAULT_GRACE_HOURS",
    "DEFAULT_KEEP_DAYS",
    "GRACE_ENV",
    "MAX_DAYS",
    "CubeCollection",
    "collect_cube",
]

DEFAULT_KEEP_DAYS = 30.0
"""Days of cube history kept by default (``earthmem gc``, the weekly Dagster job)."""
MAX_DAYS = 36_500
"""The longest window or grace accepted (100 years): a "keep everything" beyond it would
place the cutoff before any date the calendar can hold."""
DEFAULT_GRACE_HOURS = 24.0
"""On object storage, unreachable objects younger than this are left for a later collection:
a write in flight on another machine may be about to commit them."""
GRACE_ENV = "EARTHMEM_GC_GRACE_HOURS"
"""Environment variable overriding :data:`DEFAULT_GRACE_HOURS` (hours, >= 0)."""


@dataclass(frozen=True)
class CubeCollection:
    """What one collection of the cube did (or would do, on a dry run)."""

    cutoff: dt.datetime
    """Snapshots committed before this instant are expired (except the tip and tags)."""
    expired: int
    """Snapshots of ``main`` expired (on a dry run: that would be)."""
    kept: int
    """Snapshots of ``main`` kept, the root included."""
    oldest_kept: SnapshotInfo | None
    """The oldest kept snapshot after the root (None: the branch holds only the root)."""
    collected_before: dt.datetime
    """Unreachable objects written before this instant were deleted (younger ones kept: on
    object storage the grace for writes in flight, see the module docstring)."""
    bytes_deleted: int
    """Bytes of objects deleted (0 on a dry run)."""
    objects_deleted: int
    """Snapshots, manifests, chunks, transaction logs and attribute files deleted."""
    dry_run: bool


def collect_cube(
    data_dir: str | os.PathLike[str],
    keep_days: float = DEFAULT_KEEP_DAYS,
    *,
    dry_run: bool = False,
    now: dt.datetime | None = None,
    grace_hours: float | None = None,
) -> CubeCollection:
    """Expire snapshots older than ``keep_days`` and delete what nothing reaches any more.

    Args:
        data_dir: The data directory (its ``cube.icechunk``).
        keep_days: The retention window in days (>= 0).
        dry_run: Count what would be expired; change nothing.
        now: The present (tests); default: the current time. It places the window; unreachable
            objects are judged by their age at the real current time.
        grace_hours: On object storage, leave unreachable objects younger than this (writes in
            flight elsewhere); default ``EARTHMEM_GC_GRACE_HOURS`` or
            :data:`DEFAULT_GRACE_HOURS`. Local disk uses 0 unless given: the writers lock
            waits for every write of the one host.

    Raises:
        ValueError: a ``keep_days`` or grace outside ``[0, MAX_DAYS]`` (days; hours x 24).
        UnsupportedStorage: a bad ``EARTHMEM_GC_GRACE_HOURS``.
        CubeNotFound: no cube in the data directory.
        StorageUnavailable: the storage could not be read or refused a change.
    """
    if not (0 <= keep_days <= MAX_DAYS):
        raise ValueError(
            f"keep_days must be a number of days in [0, {MAX_DAYS}], got {keep_days!r}"
        )
    cutoff = (now or dt.datetime.now(dt.UTC)) - dt.timedelta(days=keep_days)
    location = cube_location(data_dir)
    grace = _grace_hours(grace_hours, is_object_storage(location))
    repo = open_repository(open_storage(location))
    try:
        return _collect(repo, data_dir, cutoff, grace, dry_run)
    except ic.IcechunkError as exc:
        raise StorageUnavailable(
            f"collecting the cube at {location} failed: {storage_error_text(exc)}; run it again"
            " (what it expired or deleted before the failure stays so)"
        ) from exc


def _collect(
    repo: ic.Repository,
    data_dir: str | os.PathLike[str],
    cutoff: dt.datetime,
    grace: float,
    dry_run: bool,
) -> CubeCollection:
    """:func:`collect_cube` on an open repository (icechunk's errors propagate)."""
    before = list_snapshots(repo, MAIN_BRANCH)
    collected_before = dt.datetime.now(dt.UTC) - dt.timedelta(hours=grace)
    if dry_run:
        doomed = [s for s in before[1:] if s.parent_id is not None and s.written_at < cutoff]
        kept = [s for s in before if s not in doomed]
        return CubeCollection(
            cutoff, len(doomed), len(kept), _oldest(kept), collected_before, 0, 0, True
        )
    with writers_excluded(data_dir), commit_lock(data_dir):
        expired = repo.expire_snapshots(cutoff)
        if expired:
            root = before[-1].id
            stamp = cutoff.strftime("%Y%m%dT%H%M%S%fZ")
            tag = f"{EXPIRED_TAG_PREFIX}{stamp}"
            if tag not in repo.list_tags():
                repo.create_tag(tag, root)
        collected_before = dt.datetime.now(dt.UTC) - dt.timedelta(hours=grace)
        summary = repo.garbage_collect(collected_before)
    after = list_snapshots(repo, MAIN_BRANCH)
    on_main = {s.id for s in before} - {s.id for s in after}
    objects = (
        summary.snapshots_deleted
        + summary.manifests_deleted
        + summary.chunks_deleted
        + summary.transaction_logs_deleted
        + summary.attributes_deleted
    )
    return CubeCollection(
        cutoff,
        len(on_main),
        len(after),
        _oldest(after),
        collected_before,
        summary.bytes_deleted,
        objects,
        False,
    )


def _grace_hours(given: float | None, on_object_storage: bool) -> float:
    """The grace in hours: ``given``, else on object storage the environment's or the default,
    else 0 (local disk: the writers lock covers every writer)."""
    if given is None and not on_object_storage:
        return 0.0
    if given is None:
        text = os.environ.get(GRACE_ENV, "").strip()
        try:
            given = float(text) if text else DEFAULT_GRACE_HOURS
        except ValueError:
            given = float("nan")
        if not (0 <= given <= MAX_DAYS * 24):  # the environment's: a typed error
            raise UnsupportedStorage(
                f"{GRACE_ENV} must be a number of hours in [0, {MAX_DAYS * 24}], got {text!r}"
            )
    if not (0 <= given <= MAX_DAYS * 24):
        raise ValueError(
            f"the collection's grace must be a number of hours in [0, {MAX_DAYS * 24}],"
            f" got {given!r}"
        )
    return float(given)


def _oldest(kept: list[SnapshotInfo]) -> SnapshotInfo | None:
    real = [s for s in kept if s.parent_id is not None]
    return real[-1] if real else None
