"""Schedules and sensors: a daily ingest of the current week, a STAC sensor for new items, and a
weekly collection of old history (:mod:`pipelines.retention`)."""

import json
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

from pipelines.partitions import register_area_blocks, scene_key, week_key_of
from pipelines.resources import AreaResource, SceneSourceResource, StoreResource
from pipelines.retention import DEFAULT_KEEP_DAYS, collect

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
    weeks = sorted({week_key_of(today - timedelta(days=7)), week_key_of(today)})
    return [
        RunRequest(run_key=f"{w}|{b}|{today.isoformat()}", partition_key=scene_key(w, b))
        for w in weeks
        for b in blocks
    ]


FIRST_TICK_START = date(2017, 1, 1)
"""The sensor's first tick looks back to here (both Sentinel-2 satellites in orbit)."""
OVERLAP_DAYS = 30
"""Later ticks re-search from the newest item seen minus this (late-published items)."""


@sensor(
    job=scene_ingest_job, minimum_interval_seconds=900, default_status=DefaultSensorStatus.STOPPED
)
def stac_new_items_sensor(
    context: SensorEvaluationContext, scenes: SceneSourceResource, area: AreaResource
) -> SensorResult | SkipReason:
    """Notice S2/S1 items not seen before in the area and request their (week, block) partitions.

    Cursor: ``{"since": <date>, "seen": [item ids since then]}``.
    """
    state = json.loads(context.cursor) if context.cursor else {}
    since = date.fromisoformat(state["since"]) if "since" in state else FIRST_TICK_START
    seen: set[str] = set(state.get("seen", []))
    min_lat, min_lng, max_lat, max_lng = area.bbox
    bbox = (min_lng, min_lat, max_lng, max_lat)
    end = datetime.now(UTC).date()
    source = scenes.open()
    new_weeks: set[str] = set()
    newest = since
    kept: set[str] = set()
    for collection in ("sentinel-2-l2a", "sentinel-1-rtc"):
        for item in source.search(collection, bbox, since, end).items:
            day = item.datetime.date()
            newest = max(newest, day)
            kept.add(item.id)
            if item.id not in seen:
                new_weeks.add(week_key_of(day))
    cursor_since = max(since, newest - timedelta(days=OVERLAP_DAYS))
    cursor = json.dumps({"since": cursor_since.isoformat(), "seen": sorted(kept | seen)})
    if not new_weeks:
        return SkipReason(f"no new items in the area since {since.isoformat()}")
    blocks = register_area_blocks(context.instance, area.bbox)
    return SensorResult(
        run_requests=[
            RunRequest(
                run_key=f"{w}|{b}|{cursor_since.isoformat()}|{len(kept)}",
                partition_key=scene_key(w, b),
            )
            for w in sorted(new_weeks)
            for b in blocks
        ],
        cursor=cursor,
    )


class GcConfig(Config):
    """The retention window of the ``gc`` job (days)."""

    keep_days: float = DEFAULT_KEEP_DAYS


@op
def collect_history(context: OpExecutionContext, config: GcConfig, store: StoreResource) -> None:
    """Expire old cube snapshots and delete old finished runs (see :mod:`pipelines.retention`)."""
    done = collect(store.data_dir, context.instance, config.keep_days)
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
