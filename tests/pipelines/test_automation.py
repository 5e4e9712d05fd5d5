"""The STAC sensor requests partitions for new items once; the schedule covers the current weeks."""

from __future__ import annotations

from datetime import UTC, date, datetime

from dagster import SkipReason, build_schedule_context, build_sensor_context, instance_for_test

from pipelines.automation import daily_ingest, stac_new_items_sensor
from pipelines.partitions import week_key_of
from pipelines.run import resources_for


def test_sensor_notices_new_items_then_skips(tiny_sample_dir) -> None:
    res = resources_for(
        "/nonexistent-data", tiny_sample_dir / "catalog.json", tiny_sample_dir / "manifest.json"
    )
    with instance_for_test() as instance:
        with build_sensor_context(
            instance=instance, resources={"scenes": res["scenes"], "area": res["area"]}
        ) as ctx:
            first = stac_new_items_sensor(ctx)
        assert not isinstance(first, SkipReason)
        weeks = {r.partition_key.keys_by_dimension["week"] for r in first.run_requests}
        source = res["scenes"].open()
        min_lat, min_lng, max_lat, max_lng = res["area"].bbox
        expected = {
            week_key_of(i.datetime.date())
            for c in ("sentinel-2-l2a", "sentinel-1-rtc")
            for i in source.search(
                c, (min_lng, min_lat, max_lng, max_lat), date(2017, 1, 1), date.today()
            ).items
        }
        assert weeks == expected
        with build_sensor_context(
            instance=instance,
            cursor=first.cursor,
            resources={"scenes": res["scenes"], "area": res["area"]},
        ) as ctx2:
            second = stac_new_items_sensor(ctx2)
        assert isinstance(second, SkipReason)


def test_schedule_requests_current_and_previous_week(tiny_sample_dir) -> None:
    res = resources_for(
        "/nonexistent-data", tiny_sample_dir / "catalog.json", tiny_sample_dir / "manifest.json"
    )
    with instance_for_test() as instance:
        when = datetime(2024, 8, 10, 6, tzinfo=UTC)
        with build_schedule_context(
            instance=instance, scheduled_execution_time=when, resources={"area": res["area"]}
        ) as ctx:
            requests = daily_ingest(ctx)
        weeks = {r.partition_key.keys_by_dimension["week"] for r in requests}
        assert weeks == {week_key_of(when.date()), "2024-08-01"}
