"""Sentinel-2 assets: discovery and indices per (week, block), with their checks.

Both assets take single-run backfills: Dagster runs one block's range of weeks
in one run (``context.partition_keys``), and each week still commits its own
cube snapshot with its partition key, so a run killed mid-range keeps every
week it finished.
"""

from functools import partial

from dagster import (
    AssetCheckResult,
    AssetCheckSeverity,
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
from pipelines.sentinel2.checks import CHECK_NAMES, evaluate_checks
from pipelines.sentinel2.compute import INDEX_NAMES
from pipelines.sentinel2.ingest import WeekStack, stack_week
from store.cube import CubeWriter
from store.inventory import Inventory, InventoryRow

__all__ = ["s2_indices", "s2_items"]

COLLECTION = "sentinel-2-l2a"


@asset(
    partitions_def=SCENE_PARTITIONS,
    backfill_policy=BackfillPolicy.single_run(),
    group_name="sentinel2",
    kinds={"stac"},
)
def s2_items(
    context: AssetExecutionContext, scenes: SceneSourceResource, area: AreaResource
) -> MaterializeResult:
    """Sentinel-2 L2A items of each partition's week over the area's part of its block (ids recorded)."""
    found = discover(COLLECTION, scene_partitions(context, area), scenes)
    return MaterializeResult(metadata=discovery_metadata(found))


@asset(
    partitions_def=SCENE_PARTITIONS,
    backfill_policy=BackfillPolicy.single_run(),
    group_name="sentinel2",
    kinds={"zarr", "icechunk"},
    deps=[s2_items],
    check_specs=[
        AssetCheckSpec(
            "index_range",
            asset="s2_indices",
            description="every index within [-1, 1] (EVI within [-3, 3])",
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
    scenes: SceneSourceResource,
    store: StoreResource,
    area: AreaResource,
) -> MaterializeResult:
    """ndvi, ndwi, ndmi, lswi, evi and the clear flag; one cube transaction per week."""
    parts = scene_partitions(context, area)
    found = discover(COLLECTION, parts, scenes)
    writer, inventory = store.writer(), store.inventory()
    per_week: dict[str, list[AssetCheckResult]] = {}
    # week N is committed on a background thread while week N+1 is read
    with WriteBehind() as behind:
        for part in parts:
            items = found.by_week.get(part.week, [])
            if part.window is None or not items:
                inventory.write_partition(f"s2|{part.key}", [])
                continue
            stack = stack_week(items, part.window, part.t0)
            checks = evaluate_checks(stack, part.window)
            per_week[part.week] = checks
            if any(not c.passed and c.severity == AssetCheckSeverity.ERROR for c in checks):
                context.log.warning(f"s2 {part.key}: checks failed, week not written")
                continue
            ids = sorted(i.id for i in items)
            behind.submit(part.week, partial(_write_week, writer, inventory, part, stack, ids))
    written = behind.results()
    results = merge_check_results(per_week) or [
        AssetCheckResult(
            check_name=c, passed=True, metadata={"note": "no scenes in these partitions"}
        )
        for c in CHECK_NAMES
    ]
    return MaterializeResult(
        metadata={
            "weeks_written": sorted(written),
            "snapshots": written,
            "skipped": [f"{s.item_id}: {s.reason}" for s in found.skipped],
        },
        check_results=results,
    )


def _write_week(
    writer: CubeWriter,
    inventory: Inventory,
    part: ScenePartition,
    stack: WeekStack,
    item_ids: list[str],
) -> str:
    """Commit one week's stack (all 7 days, so the partition owns its chunks) and its inventory rows."""
    win = part.window
    assert win is not None
    tslots = list(range(part.t0, part.t0 + 7))
    with writer.transaction(part.key, metadata={"asset": "s2_indices", "items": item_ids}) as tx:
        for name in INDEX_NAMES:
            tx.write(f"indices.{name}", tslots, win.lat_q0, win.lng_q0, stack.values[name])
        tx.write("s2.clear", tslots, win.lat_q0, win.lng_q0, stack.clear)
    rows = [
        InventoryRow(
            band="s2",
            tslot=slot,
            block=part.block,
            item_ids=day.item_ids,
            clear_cells=day.n_clear,
            total_cells=day.n_observed,
            cloud_fraction=(1 - day.n_clear / day.n_observed) if day.n_observed else None,
        )
        for slot, day in sorted(stack.days.items())
    ]
    inventory.write_partition(f"s2|{part.key}", rows, snapshot_id=tx.snapshot_id)
    return str(tx.snapshot_id)
