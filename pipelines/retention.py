"""Retention of the pipeline's history: old cube snapshots and old Dagster runs.

One documented policy, applied by ``earthmem gc`` and by the ``gc_job`` job on its weekly schedule
(:data:`pipelines.automation.weekly_gc`), with one window ``keep_days``:

* the cube: :func:`store.retention.collect_cube` (snapshots younger than the window, the
  snapshots memories cite (tagged ``earthmem-cited-<id>`` first: :func:`pin_cited_snapshots`),
  the branch tip and tagged snapshots stay; the rest is expired and collected);
* Dagster: finished runs (success, failure, cancelled) created before the window are
  deleted with their events, except every run holding the latest materialisation of
  an asset partition, so the UI's view of what is materialised stays true. Runs not
  finished are never deleted (a killed ingest's runs are first marked failed by
  :func:`pipelines.instance.fail_dead_runs`).
"""

from __future__ import annotations

import datetime as dt
import logging
import os
from dataclasses import dataclass
from pathlib import Path

from dagster import (
    AssetRecordsFilter,
    DagsterEventType,
    DagsterInstance,
    DagsterRunStatus,
    RunsFilter,
)

from pipelines.instance import fail_dead_runs
from store.memory import DEFAULT_FILE, MEMORY_URL_ENV, default_url, open_store
from store.memory.model import STATUSES, ItemFilter
from store.retention import DEFAULT_KEEP_DAYS, CubeCollection, collect_cube
from store.snapshots import cube_exists, cube_location, open_repository, open_storage

__all__ = [
    "CITED_TAG_PREFIX",
    "DEFAULT_KEEP_DAYS",
    "Collection",
    "cited_snapshots",
    "collect",
    "pin_cited_snapshots",
    "prune_runs",
]

_LOG = logging.getLogger("earthmem.retention")

FINISHED = [DagsterRunStatus.SUCCESS, DagsterRunStatus.FAILURE, DagsterRunStatus.CANCELED]


@dataclass(frozen=True)
class Collection:
    """What ``earthmem gc`` did."""

    cube: CubeCollection | None
    """The cube's collection (None: the data directory has no cube)."""
    runs_deleted: int
    """Dagster runs deleted (on a dry run: that would be)."""
    runs_kept_latest: int
    """Old runs kept because they hold a partition's latest materialisation."""


def _latest_materialisation_runs(instance: DagsterInstance) -> set[str]:
    runs: set[str] = set()
    for key in instance.get_asset_keys():
        ids = instance.get_latest_storage_id_by_partition(
            key, DagsterEventType.ASSET_MATERIALIZATION
        )
        if ids:
            flt = AssetRecordsFilter(asset_key=key, storage_ids=list(ids.values()))
            records = instance.fetch_materializations(flt, limit=len(ids)).records
            runs.update(r.run_id for r in records)
        latest = instance.get_latest_materialization_event(key)
        if latest is not None:
            runs.add(latest.run_id)
    return runs


def prune_runs(
    instance: DagsterInstance,
    keep_days: float = DEFAULT_KEEP_DAYS,
    *,
    dry_run: bool = False,
    now: dt.datetime | None = None,
) -> tuple[int, int]:
    """Delete finished runs older than the window; returns (deleted, kept as latest)."""
    cutoff = (now or dt.datetime.now(dt.UTC)) - dt.timedelta(days=keep_days)
    if not dry_run:
        fail_dead_runs(instance)
    old = instance.get_run_records(filters=RunsFilter(statuses=FINISHED, created_before=cutoff))
    if not old:
        return 0, 0
    keep = _latest_materialisation_runs(instance)
    doomed = [r.dagster_run.run_id for r in old if r.dagster_run.run_id not in keep]
    if dry_run:
        return len(doomed), len(old) - len(doomed)
    shard = getattr(instance.event_log_storage, "path_for_shard", None)  # SQLite: a file a run
    for run_id in doomed:
        instance.delete_run(run_id)
        if callable(shard):  # the run's own event file, now empty
            Path(shard(run_id)).unlink(missing_ok=True)
    return len(doomed), len(old) - len(doomed)


def collect(
    data_dir: str | os.PathLike[str],
    instance: DagsterInstance | None,
    keep_days: float = DEFAULT_KEEP_DAYS,
    *,
    dry_run: bool = False,
    grace_hours: float | None = None,
) -> Collection:
    """Apply the retention to a data directory's cube and (when given) its Dagster instance.

    ``grace_hours``: as in :func:`store.retention.collect_cube` (object storage: unreachable
    objects younger than this wait, writes in flight on other machines may commit them)."""
    if not (keep_days >= 0 and keep_days != float("inf")):
        raise ValueError(f"keep_days must be a number of days >= 0, got {keep_days!r}")
    now = dt.datetime.now(dt.UTC)
    has_cube = cube_exists(data_dir)
    if has_cube and not dry_run:
        pin_cited_snapshots(data_dir)
    cube = (
        collect_cube(data_dir, keep_days, dry_run=dry_run, now=now, grace_hours=grace_hours)
        if has_cube
        else None
    )
    deleted, kept = (
        prune_runs(instance, keep_days, dry_run=dry_run, now=now) if instance else (0, 0)
    )
    return Collection(cube, deleted, kept)


CITED_TAG_PREFIX = "earthmem-cited-"
"""Tags that pin the snapshots memories cite (retention keeps tagged snapshots)."""


def cited_snapshots(data_dir: str | os.PathLike[str], memory_url: str | None = None) -> set[str]:
    """Cube snapshot ids that memories cite: their fact evidence, cited answers and claim checks."""
    url = memory_url or os.environ.get(MEMORY_URL_ENV) or default_url(data_dir)
    if url == default_url(data_dir) and not (Path(data_dir) / DEFAULT_FILE).exists():
        return set()
    store = open_store(url)
    cited: set[str] = set()
    try:
        every = ItemFilter(statuses=STATUSES)
        for project in store.projects():
            cursor: str | None = None
            while True:
                page = store.list_items(project, every, limit=500, cursor=cursor)
                for item in page.items:
                    for ev in item.evidence:
                        sid = ev.get("snapshot_id")
                        if isinstance(sid, str) and not sid.startswith("memory:"):
                            cited.add(sid)
                    sid = (item.claim or {}).get("snapshot_id")
                    if isinstance(sid, str):
                        cited.add(sid)
                if page.next_cursor is None:
                    break
                cursor = page.next_cursor
    finally:
        store.close()
    return cited


def pin_cited_snapshots(data_dir: str | os.PathLike[str], memory_url: str | None = None) -> int:
    """Tag every snapshot memories cite (once), so that retention keeps it; returns tags added."""
    cited = cited_snapshots(data_dir, memory_url)
    if not cited:
        return 0
    repo = open_repository(open_storage(cube_location(data_dir)))
    tags = set(repo.list_tags())
    added = 0
    for sid in sorted(cited):
        tag = f"{CITED_TAG_PREFIX}{sid}"
        if tag in tags:
            continue
        try:
            repo.create_tag(tag, sid)
        except Exception as exc:  # an id the repository never had: nothing to keep
            _LOG.warning("memory cites snapshot %s, which the cube does not hold: %s", sid, exc)
            continue
        added += 1
    return added
