"""Sentinel-1 RTC assets: discovery and backscatter per (week, block)."""

import numpy as np
from dagster import (
    AssetCheckResult,
    AssetCheckSpec,
    AssetExecutionContext,
    MaterializeResult,
    asset,
)

from pipelines.partitions import SCENE_PARTITIONS
from pipelines.resources import AreaResource, SceneSourceResource, StoreResource
from pipelines.scenes import discover, scene_partition
from pipelines.sentinel1.ingest import S1_BANDS, stack_week
from pipelines.sources.models import SceneItem
from store.inventory import InventoryRow

__all__ = ["s1_backscatter", "s1_items"]

COLLECTION = "sentinel-1-rtc"
_BAND_NAME = {"vv": "s1.vv", "vh": "s1.vh", "vh_vv": "indices.vh_vv"}


@asset(partitions_def=SCENE_PARTITIONS, group_name="sentinel1", kinds={"stac"})
def s1_items(
    context: AssetExecutionContext, scenes: SceneSourceResource, area: AreaResource
) -> list[SceneItem]:
    """Sentinel-1 RTC items of the partition's week over the area's part of its block."""
    part = scene_partition(context, area)
    found = discover(COLLECTION, part, scenes)
    context.add_output_metadata(
        {
            "item_ids": [i.id for i in found.items],
            "skipped": [f"{s.item_id}: {s.reason}" for s in found.skipped],
        }
    )
    return list(found.items)


@asset(
    partitions_def=SCENE_PARTITIONS,
    group_name="sentinel1",
    kinds={"zarr", "icechunk"},
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
    s1_items: list[SceneItem],
    store: StoreResource,
    area: AreaResource,
) -> MaterializeResult:
    """s1.vv, s1.vh (linear gamma0) and indices.vh_vv, one cube transaction."""
    part = scene_partition(context, area)
    if part.window is None:
        return MaterializeResult(
            metadata={"note": "block outside the area"},
            check_results=[AssetCheckResult(check_name="backscatter_positive", passed=True)],
        )
    win = part.window
    week = stack_week(s1_items, win, part.t0)
    ok = week.valid == 1
    vv = week.values["vv"][ok]
    bad = int(((vv <= 0) | (vv >= 10)).sum())
    check = AssetCheckResult(
        check_name="backscatter_positive", passed=bad == 0, metadata={"bad_cells": bad}
    )
    snapshot = None
    if bad == 0:
        tslots = np.arange(part.t0, part.t0 + 7)
        with store.writer().transaction(part.key, metadata={"asset": "s1_backscatter"}) as tx:
            for k in S1_BANDS:
                tx.write(_BAND_NAME[k], tslots, win.lat_q0, win.lng_q0, week.values[k])
            tx.write("s1.valid", tslots, win.lat_q0, win.lng_q0, week.valid)
        snapshot = tx.snapshot_id
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
        store.inventory().write_partition(f"s1|{part.key}", rows, snapshot_id=snapshot)
    return MaterializeResult(
        metadata={"days": sorted(week.item_ids), "snapshot_id": snapshot or "not written"},
        check_results=[check],
    )
