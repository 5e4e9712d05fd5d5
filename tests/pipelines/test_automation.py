"""The STAC sensor requests partitions for new items once; the schedule covers the current weeks."""

from __future__ import annotations

import json
import shutil
from datetime import UTC, date, datetime
from pathlib import Path

from dagster import build_schedule_context, build_sensor_context, instance_for_test

from pipelines.automation import daily_ingest, stac_new_items_sensor
from pipelines.partitions import area_blocks, week_key_of
from pipelines.resources import StoreResource
from pipelines.run import resources_for


def _tick(res: dict, data: Path | str, cursor: str | None = None):
    resources = {
        "scenes": res["scenes"],
        "area": res["area"],
        "store": StoreResource(data_dir=str(data)),
    }
    with (
        instance_for_test() as instance,
        build_sensor_context(instance=instance, cursor=cursor, resources=resources) as ctx,
    ):
        return stac_new_items_sensor(ctx)


def _partitions(result) -> set[tuple[str, str]]:
    return {
        (r.partition_key.keys_by_dimension["week"], r.partition_key.keys_by_dimension["block"])
        for r in result.run_requests or []
    }


def test_sensor_on_an_empty_store_requests_every_partition_with_items(tiny_sample_dir) -> None:
    res = resources_for(
        "/nonexistent-data", tiny_sample_dir / "catalog.json", tiny_sample_dir / "manifest.json"
    )
    first = _tick(res, "/nonexistent-data")
    weeks = {w for w, _ in _partitions(first)}
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
    # the same missing items give the same run keys: Dagster launches them once
    again = _tick(res, "/nonexistent-data", first.cursor)
    assert {r.run_key for r in again.run_requests} <= {r.run_key for r in first.run_requests}


def test_sensor_starts_from_the_store_and_requests_only_what_a_new_item_touches(
    tiny_store, tmp_path
) -> None:
    sample = tmp_path / "sample"
    shutil.copytree(tiny_store.sample, sample)
    res = resources_for(tiny_store.data, sample / "catalog.json", sample / "manifest.json")
    first = _tick(res, tiny_store.data)
    assert first.run_requests == []  # everything found is already stored
    assert first.skip_reason is not None
    assert len(first.cursor) < 64  # a high-water mark, not every id seen
    assert json.loads(first.cursor)["since"] < date.today().isoformat()

    # one new overpass, after the newest stored (as a live catalog publishes them)
    src = sample / "sentinel-2-l2a" / "S2A_45QUF_20230909_0_L2A"
    doc = json.loads((src / "S2A_45QUF_20230909_0_L2A.json").read_text())
    new_id = "S2A_45QUF_20241226_0_L2A"
    doc["id"] = new_id
    doc["properties"]["datetime"] = "2024-12-26T04:50:00Z"
    for asset in doc["assets"].values():
        asset["href"] = str(src / Path(asset["href"]).name)
    folder = sample / "sentinel-2-l2a" / new_id
    folder.mkdir()
    (folder / f"{new_id}.json").write_text(json.dumps(doc))
    coll_path = sample / "sentinel-2-l2a" / "collection.json"
    coll = json.loads(coll_path.read_text())
    coll["links"].append(
        {"rel": "item", "href": f"./{new_id}/{new_id}.json", "type": "application/json"}
    )
    coll_path.write_text(json.dumps(coll))

    second = _tick(res, tiny_store.data, first.cursor)
    blocks = [b for b in area_blocks(res["area"].bbox) if res["area"].block_window(b) is not None]
    assert _partitions(second) == {(week_key_of(date(2024, 12, 26)), b) for b in blocks}
    assert len(second.cursor) < 64


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
