"""Schedules and sensors: a daily ingest of the current week, a STAC sensor for new items, and a
weekly collection of old history (:mod:`pipelines.retention`)."""

import hashlib
import json
from collections import defaultdict
from collections.abc import Callable
from datetime import UTC, date, datetime, timedelta

from dagster import (
    AssetSelection,
    Config,
    DefaultScheduleStatus,
    DefaultSensorStatus,
    OpExecutionContext,
    RunRequest,
    ScheduleEvaluationContext,
    SensorEvaluationContext,
    SensorResult,
    SkipReason,
    define_asset_job,
    job,
    op,
    schedule,
    sensor,
)

from pipelines.partitions import WEEKS, register_area_blocks, scene_key, week_key_of
from pipelines.resources import AreaResource, SceneSourceResource, StoreResource
from pipelines.retention import DEFAULT_KEEP_DAYS, collect
from store.cube import CubeReader
from store.errors import CubeNotFound

__all__ = ["daily_ingest", "gc_job", "scene_ingest_job", "stac_new_items_sensor", "weekly_gc"]

scene_ingest_job = define_asset_job(
    "scene_ingest",
    selection=AssetSelection.groups("sentinel2", "sentinel1"),
)


@schedule(
    job=scene_ingest_job,
    cron_schedule="0 6 * * *",
    execution_timezone="UTC",
    default_status=DefaultScheduleStatus.STOPPED,
)
def daily_ingest(context: ScheduleEvaluationContext, area: AreaResource) -> list[RunRequest]:
    """Every morning: (re)ingest the current and previous week for every block of the area."""
    today = context.scheduled_execution_time.date()
    blocks = register_area_blocks(context.instance, area.bbox)
    weeks = sorted(
        w
        for w in {week_key_of(today - timedelta(days=7)), week_key_of(today)}
        if WEEKS.has_partition_key(w)  # an area with a past period has no current weeks
    )
    return [
        RunRequest(run_key=f"{w}|{b}|{today.isoformat()}", partition_key=scene_key(w, b))
        for w in weeks
        for b in blocks
    ]


FIRST_TICK_START = date(2017, 1, 1)
"""The sensor's first tick looks back to here (both Sentinel-2 satellites in orbit)."""
OVERLAP_DAYS = 30
"""Later ticks re-search from the newest item seen minus this (late-published items)."""
SCENE_FAMILIES = (("s2", "sentinel-2-l2a"), ("s1", "sentinel-1-rtc"))
"""``(inventory prefix, STAC collection)`` of the families the sensor watches."""


@sensor(
    job=scene_ingest_job, minimum_interval_seconds=900, default_status=DefaultSensorStatus.STOPPED
)
def stac_new_items_sensor(
    context: SensorEvaluationContext,
    scenes: SceneSourceResource,
    area: AreaResource,
    store: StoreResource,
) -> SensorResult | SkipReason:
    """Request the (week, block) partitions holding S2/S1 items the store does not hold yet.

    What is already ingested is read from the store itself (the tip inventory: the item ids
    each partition stores), not remembered by the sensor: on an ingested store the first tick
    requests nothing, and a new item requests exactly the partitions it touches. A partition
    is requested once per set of items it lacks (the run key is that set's digest, which
    Dagster never launches twice), so an item that cannot be stored (unreadable, no observed
    cells) does not bring its partition back every tick.

    Cursor: ``{"since": <date>}``, the newest acquisition seen minus :data:`OVERLAP_DAYS`
    (a high-water mark of constant size).
    """
    state = json.loads(context.cursor) if context.cursor else {}
    since = date.fromisoformat(state["since"]) if "since" in state else FIRST_TICK_START
    end = datetime.now(UTC).date()
    source = scenes.open()
    blocks = register_area_blocks(context.instance, area.bbox)
    stored = _stored_ids(store.data_dir)
    missing: dict[tuple[str, str], set[str]] = defaultdict(set)
    newest = since
    for block in blocks:
        window = area.block_window(block)
        if window is None:
            continue
        for family, collection in SCENE_FAMILIES:
            for item in source.search(collection, window.bounds(), since, end).items:
                day = item.datetime.date()
                newest = max(newest, day)
                week = week_key_of(day)
                if not WEEKS.has_partition_key(week):
                    continue  # outside the area's declared period
                if item.id not in stored(f"{family}|{scene_key(week, block)}"):
                    missing[(week, block)].add(item.id)
    cursor = json.dumps({"since": max(since, newest - timedelta(days=OVERLAP_DAYS)).isoformat()})
    if not missing:
        return SensorResult(
            skip_reason=f"the store holds every S2/S1 item found since {since.isoformat()}",
            cursor=cursor,
        )
    return SensorResult(
        run_requests=[
            RunRequest(run_key=f"{scene_key(w, b)}|{_digest(ids)}", partition_key=scene_key(w, b))
            for (w, b), ids in sorted(missing.items())
        ],
        cursor=cursor,
    )


def _stored_ids(data_dir: str) -> Callable[[str], frozenset[str]]:
    """Partition key -> item ids the store's tip holds (nothing when there is no cube yet)."""
    try:
        inventory = CubeReader(data_dir).inventory
    except CubeNotFound:
        return lambda _key: frozenset()
    return inventory.partition_item_ids


def _digest(ids: set[str]) -> str:
    """A short digest of a set of item ids (the run key of the partition that lacks them)."""
    return hashlib.blake2b("\n".join(sorted(ids)).encode(), digest_size=8).hexdigest()


class GcConfig(Config):
    """The retention window of the ``gc`` job (days), and on object storage the grace for writes
    in flight (hours; None: ``EARTHMEM_GC_GRACE_HOURS`` or 24, see :mod:`store.retention`)."""

    keep_days: float = DEFAULT_KEEP_DAYS
    grace_hours: float | None = None


@op
def collect_history(context: OpExecutionContext, config: GcConfig, store: StoreResource) -> None:
    """Expire old cube snapshots and delete old finished runs (see :mod:`pipelines.retention`)."""
    done = collect(
        store.data_dir, context.instance, config.keep_days, grace_hours=config.grace_hours
    )
    cube = done.cube
    context.log.info(
        f"gc (keep {config.keep_days:g} days): "
        + (
            f"{cube.expired} snapshots expired, {cube.bytes_deleted} bytes deleted; "
            if cube is not None
            else "no cube; "
        )
        + f"{done.runs_deleted} runs deleted ({done.runs_kept_latest} old runs kept as latest)"
    )


@job
def gc_job() -> None:
    """Apply the retention to the cube and the Dagster instance."""
    collect_history()


@schedule(
    job=gc_job,
    cron_schedule="0 3 * * 0",
    execution_timezone="UTC",
    default_status=DefaultScheduleStatus.STOPPED,
)
def weekly_gc(context: ScheduleEvaluationContext) -> RunRequest:
    """Every Sunday at 03:00 UTC: collect history older than the default window."""
    return RunRequest(run_key=f"gc|{context.scheduled_execution_time.date().isoformat()}")
