"""What the Dagster UI reads per (week, block) partition: checks, metadata, failures, latest.

A range of three weeks (one single-run backfill, as the UI launches it) holds a week whose
Sentinel-2 scene has its offset applied twice: its ERROR check fails and nothing is written.
Everything is asserted through the instance, the storage the webserver reads: check executions
per partition, the partition status cache (materialised / failed subsets), the
materialisation records and the run's log lines.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from datetime import date, timedelta
from pathlib import Path
from typing import Any

import pytest
from dagster import (
    AssetCheckKey,
    AssetKey,
    DagsterEventType,
    DagsterInstance,
    instance_for_test,
    partition_loading_context,
)
from dagster._core.event_api import PartitionKeyFilter
from dagster._core.storage.asset_check_execution_record import (
    AssetCheckExecutionRecordStatus,
    AssetCheckExecutionResolvedStatus,
)
from dagster._core.storage.asset_check_state import AssetCheckState, bulk_update_asset_check_state
from dagster._core.storage.partition_status_cache import get_and_update_asset_status_cache_value

from pipelines.partitions import SCENE_PARTITIONS, register_area_blocks, scene_key, week_key_of
from pipelines.run import RangeRun, materialize_range, resources_for
from pipelines.sentinel2.checks import CHECKS as S2_CHECKS
from store.cube import CubeReader

S2 = AssetKey("s2_indices")


@dataclass(frozen=True)
class Backfill:
    """What the instance held after the backfill, read before it was closed."""

    data: Path
    res: dict
    block: str
    bad: str
    """Partition key of the double-offset week."""
    good: list[str]
    """The range's other partition keys, in week order."""
    run: RangeRun
    checks: dict[tuple[str, str], Any]
    """(check, partition) -> its latest execution record, after the backfill."""
    clear_history: list[Any]
    """Every execution record of ``clear_fraction``."""
    bad_after_other_week: Any
    """The double-offset week's latest ``reflectance_sanity`` record after another week ran."""
    failed: set[str]
    materialised: set[str]
    records: list[Any]
    """The asset's materialisation records (newest first), after the backfill."""
    observations: list[Any]
    logs: list[str]
    """The backfill run's log lines of the ``s2_indices`` step."""
    in_run: list[str]
    """The partitions the backfill run materialised, in event order."""
    latest: str | None
    """The asset's latest materialisation's partition, after the backfill."""
    check_status: dict[str, dict[str, set[str]]]
    """check -> UI status (SUCCEEDED, FAILED, ...) -> partitions, as the asset's check page
    computes it (only evaluations of the partition's latest materialisation count), after
    the unrelated week was re-materialised."""


def _clearest_s2_item(sample: Path) -> tuple[Path, dict]:
    docs = [
        (f, json.loads(f.read_text())) for f in sorted((sample / "sentinel-2-l2a").glob("*/*.json"))
    ]
    return min(docs, key=lambda d: d[1]["properties"]["eo:cloud_cover"])


@pytest.fixture(scope="module")
def backfill(tiny_sample_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Backfill:
    root = tmp_path_factory.mktemp("ui_partitions")
    sample = root / "sample"
    shutil.copytree(tiny_sample_dir, sample)
    path, doc = _clearest_s2_item(sample)
    for asset in doc["assets"].values():
        for band in asset.get("raster:bands", []):
            if "offset" in band:
                band["offset"] = 2 * band["offset"]
    path.write_text(json.dumps(doc))
    day = date.fromisoformat(doc["properties"]["datetime"][:10])
    weeks = [week_key_of(day + timedelta(days=d)) for d in (-7, 0, 7)]
    data = root / "data"
    res = resources_for(data, sample / "catalog.json", sample / "manifest.json")
    with instance_for_test() as inst:
        block = register_area_blocks(inst, res["area"].bbox)[0]
        run = materialize_range(res, inst, block, weeks[0], weeks[-1])
        keys = [str(scene_key(w, block)) for w in weeks]
        bad, good = keys[1], [keys[0], keys[2]]
        checks = {(c.name, k): _latest_check(inst, c.name, k) for c in S2_CHECKS for k in keys}
        history = list(
            inst.event_log_storage.get_asset_check_execution_history(
                AssetCheckKey(S2, "clear_fraction"), limit=100
            )
        )
        status = get_and_update_asset_status_cache_value(inst, S2, SCENE_PARTITIONS)
        assert status is not None
        records = list(inst.fetch_materializations(S2, limit=100).records)
        run_id = next(r.run_id for r in records if r.partition_key == good[0])
        events = inst.all_logs(run_id)
        latest = inst.get_latest_materialization_event(S2)
        observations = [
            e.asset_observation
            for e in inst.fetch_observations(S2, limit=100).records
            if e.partition_key == bad
        ]
        # re-materialise an unrelated week
        materialize_range(res, inst, block, weeks[-1], weeks[-1])
        check_status = {c.name: _ui_check_status(inst, c.name) for c in S2_CHECKS}
        return Backfill(
            check_status=check_status,
            data=data,
            res=res,
            block=block,
            bad=bad,
            good=good,
            run=run,
            checks=checks,
            clear_history=history,
            bad_after_other_week=_latest_check(inst, "reflectance_sanity", bad),
            failed=set(
                status.deserialize_failed_partition_subsets(SCENE_PARTITIONS).get_partition_keys()
            ),
            materialised=set(
                status.deserialize_materialized_partition_subsets(
                    SCENE_PARTITIONS
                ).get_partition_keys()
            ),
            records=records,
            observations=observations,
            logs=[  # a range's log entry has a line per partition
                line
                for e in events
                if e.dagster_event is None and e.step_key == "s2_indices"
                for line in e.user_message.splitlines()
            ],
            in_run=[
                str(e.dagster_event.partition)
                for e in events
                if e.dagster_event is not None
                and e.dagster_event.event_type == DagsterEventType.ASSET_MATERIALIZATION
                and e.dagster_event.asset_key == S2
            ],
            latest=(
                latest.asset_materialization.partition
                if latest is not None and latest.asset_materialization is not None
                else None
            ),
        )


def _ui_check_status(inst: DagsterInstance, name: str) -> dict[str, set[str]]:
    """A check's partitions per status, by the state the webserver's check page reads."""
    key = AssetCheckKey(S2, name)
    with partition_loading_context(dynamic_partitions_store=inst):  # the blocks dimension
        state = bulk_update_asset_check_state(
            inst, [(key, SCENE_PARTITIONS)], {key: AssetCheckState.empty()}
        )[key]
        return {
            status.value: set(subset.subset_value.get_partition_keys())
            for status, subset in state.subsets.items()
            if not subset.is_empty
        }


def _latest_check(inst: DagsterInstance, name: str, partition: str) -> Any:
    key = AssetCheckKey(S2, name)
    got = inst.event_log_storage.get_latest_asset_check_execution_by_key(
        [key], partition_filter=PartitionKeyFilter(key=partition)
    )
    return got.get(key)


def test_checks_are_recorded_per_partition_and_survive_other_weeks(backfill: Backfill) -> None:
    bad = backfill.checks[("reflectance_sanity", backfill.bad)]
    assert bad.status == AssetCheckExecutionRecordStatus.FAILED
    assert bad.partition == backfill.bad
    for key in backfill.good:
        assert backfill.checks[("reflectance_sanity", key)].status == (
            AssetCheckExecutionRecordStatus.SUCCEEDED
        )
    # no check left planned: every check of every partition was evaluated
    history = backfill.clear_history
    assert {r.partition for r in history} == {backfill.bad, *backfill.good}
    assert all(r.status != AssetCheckExecutionRecordStatus.PLANNED for r in history)
    # re-materialising another week leaves the failed week's result where it was
    again = backfill.bad_after_other_week
    assert again.status == AssetCheckExecutionRecordStatus.FAILED
    assert again.run_id == bad.run_id


def test_the_ui_shows_every_partitions_check_status(backfill: Backfill) -> None:
    """The check page's status per partition: a written week's checks count only when bound
    to its materialisation (found through the webserver: without the binding every written
    week showed no check status, only the stopped week did)."""
    succeeded = AssetCheckExecutionResolvedStatus.SUCCEEDED.value
    failed = AssetCheckExecutionResolvedStatus.FAILED.value
    sanity = backfill.check_status["reflectance_sanity"]
    assert sanity.get(failed) == {backfill.bad}
    assert set(backfill.good) <= sanity.get(succeeded, set())
    for name, status in backfill.check_status.items():
        shown = set().union(*status.values())
        assert set(backfill.good) <= shown, name  # every written week has a status


def test_each_partition_carries_its_own_metadata_and_log_line(backfill: Backfill) -> None:
    by_key = {r.partition_key: r.asset_materialization for r in backfill.records}
    assert set(backfill.good) <= set(by_key)
    snapshots = {
        s.metadata.get("partition_key"): s.id for s in CubeReader(backfill.data).list_snapshots()
    }
    source = backfill.res["scenes"].open()
    for key in backfill.good:
        meta = by_key[key].metadata
        week = key.split("|")[1]
        found = source.search(
            "sentinel-2-l2a",
            backfill.res["area"].block_window(backfill.block).bounds(),
            date.fromisoformat(week),
            date.fromisoformat(week) + timedelta(days=6),
        )
        assert meta["scenes"].value == sorted(i.id for i in found.items)
        assert isinstance(meta["skipped"].value, list)
        if found.items:  # a week with scenes committed its own snapshot
            assert meta["snapshot_id"].value == snapshots[key]
            assert meta["chunks_written"].value > 0
            assert 0.0 <= meta["clear_fraction"].value <= 1.0
    for key in backfill.good:
        assert any(line.startswith(f"s2_indices {key}: ") for line in backfill.logs), backfill.logs


def test_a_partition_stopped_by_an_error_check_shows_failed_with_its_reason(
    backfill: Backfill,
) -> None:
    assert backfill.bad in backfill.failed
    assert backfill.bad not in backfill.materialised
    assert set(backfill.good) <= backfill.materialised
    assert not set(backfill.good) & backfill.failed
    assert len(backfill.observations) == 1
    assert "reflectance_sanity" in backfill.observations[0].metadata["not_written"].value
    # a check outcome, not an error: the range counts as run, the check as failed
    assert backfill.run.ok
    assert "reflectance_sanity" in backfill.run.failed_checks


def test_latest_materialisation_is_the_newest_week_of_the_range(backfill: Backfill) -> None:
    assert backfill.in_run == backfill.good  # week order (the failed week has none)
    assert backfill.latest == backfill.good[-1]


def test_a_block_that_misses_the_area_says_so(tiny_sample_dir: Path, tmp_path: Path) -> None:
    """A block added by hand in the UI that does not meet the area: its partition says why
    nothing was read (found in the UI: it showed green with "0 of 0 scenes read")."""
    res = resources_for(
        tmp_path / "data", tiny_sample_dir / "catalog.json", tiny_sample_dir / "manifest.json"
    )
    far = "b8.7979.9255"  # the manifest's bbox read in the wrong (lng, lat) order
    assert res["area"].block_window(far) is None
    with instance_for_test() as inst:
        inst.add_dynamic_partitions("blocks", [far])
        week = week_key_of(date(2023, 1, 12))
        materialize_range(res, inst, far, week, week)
        record = inst.fetch_materializations(S2, limit=1).records[0]
        meta = record.asset_materialization.metadata if record.asset_materialization else {}
        run_logs = [e.user_message for e in inst.all_logs(record.run_id) if e.dagster_event is None]
    assert "does not meet the area" in str(meta["outside_area"].value)
    assert any("nothing to read: block b8.7979.9255" in line for line in run_logs)
