"""The two Dagster assets of a scene family: discovery and the cube asset (wiring only).

Both assets take single-run backfills: Dagster runs one block's range of weeks
in one run (``context.partition_keys``), and each week still commits its own
cube snapshot with its partition key, so a run killed mid-range keeps every
week it finished. The work is done by :func:`pipelines.scenes.discover` and
:func:`pipelines.family.ingest_range`.
"""

from typing import Any, NamedTuple

from dagster import (
    AssetCheckSpec,
    AssetExecutionContext,
    AssetsDefinition,
    BackfillPolicy,
    MaterializeResult,
    asset,
)

from pipelines.family import SceneFamily, ingest_range
from pipelines.partitions import SCENE_PARTITIONS
from pipelines.resources import AreaResource, SceneSourceResource, StoreResource
from pipelines.scenes import discover, discovery_metadata, scene_partitions

__all__ = ["FamilyAssets", "scene_assets"]


class FamilyAssets(NamedTuple):
    """A family's assets: ``{name}_items`` and the cube asset that depends on it."""

    items: AssetsDefinition
    """Discovery: the item ids of each partition's week (asset metadata only)."""
    cube: AssetsDefinition
    """The family's cube bands and inventory rows, one commit per week."""


def scene_assets(family: SceneFamily[Any]) -> FamilyAssets:
    """Define the discovery and cube assets of a family (partitioned by week x block)."""

    @asset(
        name=f"{family.name}_items",
        description=(
            f"{family.title} items of each partition's week over the area's part of its block"
            " (ids recorded)."
        ),
        partitions_def=SCENE_PARTITIONS,
        backfill_policy=BackfillPolicy.single_run(),
        group_name=family.group,
        kinds={"stac"},
    )
    def items(
        context: AssetExecutionContext, scenes: SceneSourceResource, area: AreaResource
    ) -> MaterializeResult:
        found = discover(family.collection, scene_partitions(context, area), scenes)
        return MaterializeResult(metadata=discovery_metadata(found))

    @asset(
        name=family.asset,
        description=family.description,
        partitions_def=SCENE_PARTITIONS,
        backfill_policy=BackfillPolicy.single_run(),
        group_name=family.group,
        kinds={"zarr", "icechunk"},
        deps=[items],
        check_specs=[
            AssetCheckSpec(c.name, asset=family.asset, description=c.description)
            for c in family.all_checks
        ],
    )
    def cube(
        context: AssetExecutionContext,
        scenes: SceneSourceResource,
        store: StoreResource,
        area: AreaResource,
    ) -> MaterializeResult:
        parts = scene_partitions(context, area)
        found = discover(family.collection, parts, scenes)
        outcome = ingest_range(family, parts, found, store.writer(), context.log.warning)
        return MaterializeResult(metadata=outcome.metadata, check_results=outcome.check_results)

    return FamilyAssets(items, cube)
