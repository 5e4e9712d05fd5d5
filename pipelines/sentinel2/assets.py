"""Sentinel-2 assets: discovery and indices per (week, block), with their checks."""

import numpy as np
from dagster import (
    AssetCheckResult,
    AssetCheckSeverity,
    AssetCheckSpec,
    AssetExecutionContext,
    MaterializeResult,
    asset,
)

from pipelines.partitions import SCENE_PARTITIONS
from pipelines.resources import AreaResource, SceneSourceResource, StoreResource
from pipelines.scenes import discover, scene_partition
from pipelines.sentinel2.checks import evaluate_checks
from pipelines.sentinel2.compute import CLEAR, INDEX_NAMES
from pipelines.sentinel2.ingest import stack_week
from pipelines.sources.models import SceneItem
from store.inventory import InventoryRow

__all__ = ["s2_indices", "s2_items"]

COLLECTION = "sentinel-2-l2a"


@asset(partitions_def=SCENE_PARTITIONS, group_name="sentinel2", kinds={"stac"})
def s2_items(
    context: AssetExecutionContext, scenes: SceneSourceResource, area: AreaResource
) -> list[SceneItem]:
    """Sentinel-2 L2A items of the partition's week over the area's part of its block."""
    part = scene_partition(context, area)
    found = discover(COLLECTION, part, scenes)
    context.add_output_metadata(
        {
            "item_ids": [i.id for i in found.items],
            "n_items": len(found.items),
            "skipped": [f"{s.item_id}: {s.reason}" for s in found.skipped],
        }
    )
    return list(found.items)


@asset(
    partitions_def=SCENE_PARTITIONS,
    group_name="sentinel2",
    kinds={"zarr", "icechunk"},
    check_specs=[
        AssetCheckSpec(
            "index_range",
            asset="s2_indices",
            description="every index value within [-1, 1] (EVI within [-3, 3])",
        ),
        AssetCheckSpec(
            "clear_cells_finite", asset="s2_indices", description="no NaN in clear cells"
        ),
        AssetCheckSpec(
            "reflectance_sanity",
            asset="s2_indices",
            description="median vegetation red reflectance >= 0 (catches a double-applied offset)",
        ),
        AssetCheckSpec(
            "clear_fraction",
            asset="s2_indices",
            description="share of observed cells that are clear (warn only)",
        ),
        AssetCheckSpec(
            "chunk_coverage",
            asset="s2_indices",
            description="the written region covers the area's part of the block",
        ),
    ],
)
def s2_indices(
    context: AssetExecutionContext,
    s2_items: list[SceneItem],
    store: StoreResource,
    area: AreaResource,
) -> MaterializeResult:
    """ndvi, ndwi, ndmi, lswi, evi and the clear flag, written as one cube transaction."""
    part = scene_partition(context, area)
    if part.window is None:
        return MaterializeResult(
            metadata={"note": "block outside the area"},
            check_results=[
                AssetCheckResult(check_name=c, passed=True, metadata={"note": "nothing to check"})
                for c in (
                    "index_range",
                    "clear_cells_finite",
                    "reflectance_sanity",
                    "clear_fraction",
                    "chunk_coverage",
                )
            ],
        )
    win = part.window
    stack = stack_week(s2_items, win, part.t0)
    checks = evaluate_checks(stack, win)
    failed = [
        c.check_name for c in checks if not c.passed and c.severity == AssetCheckSeverity.ERROR
    ]
    tslots = np.arange(part.t0, part.t0 + 7)
    snapshot = None
    if not failed:
        writer = store.writer()
        with writer.transaction(
            part.key, metadata={"asset": "s2_indices", "items": sorted(i.id for i in s2_items)}
        ) as tx:
            for name in INDEX_NAMES:
                tx.write(f"indices.{name}", tslots, win.lat_q0, win.lng_q0, stack.values[name])
            tx.write("s2.clear", tslots, win.lat_q0, win.lng_q0, stack.clear)
        snapshot = tx.snapshot_id
        rows = []
        for slot, day in sorted(stack.days.items()):
            observed = day.n_observed
            rows.append(
                InventoryRow(
                    band="s2",
                    tslot=slot,
                    block=part.block,
                    item_ids=day.item_ids,
                    clear_cells=day.n_clear,
                    total_cells=observed,
                    cloud_fraction=(1 - day.n_clear / observed) if observed else None,
                )
            )
        store.inventory().write_partition(f"s2|{part.key}", rows, snapshot_id=snapshot)
    context.log.info(
        f"s2 {part.key}: {len(stack.days)} day(s), {len(s2_items)} item(s), failed checks: {failed}"
    )
    n_clear = int((stack.clear == CLEAR).sum())
    return MaterializeResult(
        metadata={
            "days": sorted(stack.days),
            "n_items": len(s2_items),
            "clear_cells": n_clear,
            "snapshot_id": snapshot or "not written (failed checks)",
            "skipped": [f"{s.item_id}: {s.reason}" for s in stack.skipped],
        },
        check_results=checks,
    )
