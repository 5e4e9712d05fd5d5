"""Sentinel-1 RTC assets: discovery and backscatter per (week, block); single-run backfills as Sentinel-2."""

from functools import partial

import numpy as np
from dagster import (
    AssetCheckResult,
    AssetCheckSpec,
    AssetExecutionContext,
    BackfillPolicy,
    MaterializeResult,
    asset,
)

from pipelines.partitions import SCENE_PARTITIONS
from pipelines.resources import AreaResource, SceneSourceResource, StoreResource
from pipelines.scenes import (
    ScenePartition,
    WriteBehind,
    discover,
    discovery_metadata,
    merge_check_results,
    scene_partitions,
)
from pipelines.sentinel1.ingest import S1_BANDS, S1Week, stack_week
from store.cube import CubeWriter
from store.inventory import Inventory, InventoryRow

__all__ = ["s1_backscatter", "s1_items"]

COLLECTION = "sentinel-1-rtc"
_BAND_NAME = {"vv": "s1.vv", "vh": "s1.vh", "vh_vv": "indices.vh_vv"}


@asset(
    partitions_def=SCENE_PARTITIONS,
    backfill_policy=BackfillPolicy.single_run(),
    group_name="sentinel1",
    kinds={"stac"},
)
def s1_items(
    context: AssetExecutionContext, scenes: SceneSourceResource, area: AreaResource
) -> MaterializeResult:
    """Sentinel-1 RTC items of each partition's week over the area's part of its block (ids recorded)."""
    found = discover(COLLECTION, scene_partitions(context, area), scenes)
    return MaterializeResult(metadata=discovery_metadata(found))


@asset(
    partitions_def=SCENE_PARTITIONS,
    backfill_policy=BackfillPolicy.single_run(),
    group_name="sentinel1",
    kinds={"zarr", "icechunk"},
    deps=[s1_items],
    check_specs=[
        AssetCheckSpec(
            "backscatter_positive",
            asset="s1_backscatter",
            description="linear gamma0 > 0 and < 10 where valid",
        ),
    ],
)
def s1_backscatter(
    context: AssetExecutionContext,
    scenes: SceneSourceResource,
    store: StoreResource,
    area: AreaResource,
) -> MaterializeResult:
    """s1.vv, s1.vh (linear gamma0) and indices.vh_vv; one cube transaction per week."""
    parts = scene_partitions(context, area)
    found = discover(COLLECTION, parts, scenes)
    writer, inventory = store.writer(), store.inventory()
    per_week: dict[str, list[AssetCheckResult]] = {}
    # week N is committed on a background thread while week N+1 is read
    with WriteBehind() as behind:
        for part in parts:
            items = found.by_week.get(part.week, [])
            if part.window is None or not items:
                inventory.write_partition(f"s1|{part.key}", [])
                continue
            week = stack_week(items, part.window, part.t0)
            vv = week.values["vv"][week.valid == 1]
            bad = int(((vv <= 0) | (vv >= 10)).sum())
            per_week[part.week] = [
                AssetCheckResult(
                    check_name="backscatter_positive", passed=bad == 0, metadata={"bad_cells": bad}
                )
            ]
            if bad:
                continue
            behind.submit(part.week, partial(_write_week, writer, inventory, part, week))
    written = behind.results()
    results = merge_check_results(per_week) or [
        AssetCheckResult(
            check_name="backscatter_positive",
            passed=True,
            metadata={"note": "no scenes in these partitions"},
        )
    ]
    return MaterializeResult(
        metadata={"weeks_written": sorted(written), "snapshots": written}, check_results=results
    )


def _write_week(
    writer: CubeWriter, inventory: Inventory, part: ScenePartition, week: S1Week
) -> str:
    """Commit one week's backscatter (all 7 days) and its inventory rows; the snapshot id."""
    win = part.window
    assert win is not None
    tslots = np.arange(part.t0, part.t0 + 7)
    with writer.transaction(part.key, metadata={"asset": "s1_backscatter"}) as tx:
        for k in S1_BANDS:
            tx.write(_BAND_NAME[k], tslots, win.lat_q0, win.lng_q0, week.values[k])
        tx.write("s1.valid", tslots, win.lat_q0, win.lng_q0, week.valid)
    rows = [
        InventoryRow(
            band="s1",
            tslot=slot,
            block=part.block,
            item_ids=ids,
            clear_cells=int(week.valid[slot - part.t0].sum()),
            total_cells=int(week.valid[slot - part.t0].sum()),
        )
        for slot, ids in sorted(week.item_ids.items())
    ]
    inventory.write_partition(f"s1|{part.key}", rows, snapshot_id=tx.snapshot_id)
    return str(tx.snapshot_id)
