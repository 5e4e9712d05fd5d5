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
answering from the empty root. Collection holds the data directory's writers lock
exclusively (:func:`store.snapshots.writers_excluded`): it waits for open write
transactions to commit, so it never deletes chunks that are about to be committed.
Readers holding a reader on an expired snapshot may fail afterwards; the tip is never
affected.
"""

from __future__ import annotations

import datetime as dt
import os
from dataclasses import dataclass

from store.snapshots import (
    EXPIRED_TAG_PREFIX,
    MAIN_BRANCH,
    SnapshotInfo,
    commit_lock,
    cube_location,
    list_snapshots,
    open_repository,
    open_storage,
    writers_excluded,
)

__all__ = ["DEFAULT_KEEP_DAYS", "CubeCollection", "collect_cube"]

DEFAULT_KEEP_DAYS = 30.0
"""Days of cube history kept by default (``earthmem gc``, the weekly Dagster job)."""


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
) -> CubeCollection:
    """Expire snapshots older than ``keep_days`` and delete what nothing reaches any more.

    Args:
        data_dir: The data directory (its ``cube.icechunk``).
        keep_days: The retention window in days (>= 0).
        dry_run: Count what would be expired; change nothing.
        now: The present (tests); default: the current time.

    Raises:
        ValueError: a negative or non-finite ``keep_days``.
        CubeNotFound: no cube in the data directory.
    """
    if not (keep_days >= 0 and keep_days != float("inf")):
        raise ValueError(f"keep_days must be a number of days >= 0, got {keep_days!r}")
    cutoff = (now or dt.datetime.now(dt.UTC)) - dt.timedelta(days=keep_days)
    repo = open_repository(open_storage(cube_location(data_dir)))
    before = list_snapshots(repo, MAIN_BRANCH)
    if dry_run:
        doomed = [s for s in before[1:] if s.parent_id is not None and s.written_at < cutoff]
        kept = [s for s in before if s not in doomed]
        return CubeCollection(cutoff, len(doomed), len(kept), _oldest(kept), 0, 0, True)
    with writers_excluded(data_dir), commit_lock(data_dir):
        expired = repo.expire_snapshots(cutoff)
        if expired:
            root = before[-1].id
            stamp = cutoff.strftime("%Y%m%dT%H%M%S%fZ")
            tag = f"{EXPIRED_TAG_PREFIX}{stamp}"
            if tag not in repo.list_tags():
                repo.create_tag(tag, root)
        summary = repo.garbage_collect(dt.datetime.now(dt.UTC))
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
        cutoff, len(on_main), len(after), _oldest(after), summary.bytes_deleted, objects, False
    )


def _oldest(kept: list[SnapshotInfo]) -> SnapshotInfo | None:
    real = [s for s in kept if s.parent_id is not None]
    return real[-1] if real else None
