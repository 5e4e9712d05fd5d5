"""The two Dagster assets of a scene family: discovery and the cube asset (wiring only).

Both assets take single-run backfills: Dagster runs one block's range of weeks
in one run (``context.partition_keys``), and each week still commits its own
cube snapshot with its partition key, so a run killed mid-range keeps every
week it finished. The work is done by :func:`pipelines.scenes.discover` and
:func:`pipelines.family.ingest_range` (in the run's process), or, when the run's ``dask``
resource chooses a Dask cluster (:mod:`pipelines.cluster`), by
:func:`pipelines.family_dask.ingest_range_dask`: one task per week, one commit per range.

What the UI shows is per (week, block) partition, as the cube stores it: the cube
asset emits one materialisation per written partition, in week order (so the
asset's latest materialisation is its newest week), with that partition's own
metadata, and one check evaluation per check and partition (its checks are
partitioned like the asset), bound to the materialisation it checks: Dagster binds a check
result to its target only in single-partition runs, and the UI's check status per partition
counts an evaluation as current only when it names the partition's latest materialisation
(without it every written week's checks show as not evaluated). The range's materialisations
come first, then its check evaluations, whose targets are read back in one query for the
range (not one a partition). A partition a failed ERROR check kept out of the cube
gets no materialisation but an observation naming the reason, and the step then
fails (:data:`CHECKS_STOPPED`), so Dagster marks exactly those partitions failed.
"""

import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, NamedTuple

from dagster import (
    AssetCheckEvaluation,
    AssetCheckKey,
    AssetCheckSpec,
    AssetExecutionContext,
    AssetKey,
    AssetMaterialization,
    AssetObservation,
    AssetRecordsFilter,
    AssetsDefinition,
    BackfillPolicy,
    BetaWarning,
    DagsterInstance,
    Failure,
    MaterializeResult,
    MultiPartitionKey,
    Output,
    PreviewWarning,
    asset,
)

# The public AssetCheckEvaluation takes this record, which Dagster 1.13 does not export.
from dagster._core.definitions.asset_checks.asset_check_evaluation import (
    AssetCheckEvaluationTargetMaterializationData,
)

from pipelines.cluster import DaskResource
from pipelines.family import PartitionOutcome, SceneFamily
from pipelines.family_dask import run_range
from pipelines.partitions import SCENE_PARTITIONS
from pipelines.resources import AreaResource, SceneSourceResource, StoreResource
from pipelines.scenes import (
    discover,
    discovery_metadata,
    partition_discovery_metadata,
    scene_partitions,
)

__all__ = ["CHECKS_STOPPED", "FamilyAssets", "scene_assets"]

CHECKS_STOPPED = "earthmem/checks_stopped"
"""Metadata key of the step failure raised when checks kept partitions out of the cube:
the stopped partition keys (a run failed only for this is a check outcome, not an error)."""

CubeEvent = AssetMaterialization | AssetObservation | AssetCheckEvaluation | Output[None]


class FamilyAssets(NamedTuple):
    """A family's assets: ``{name}_items`` and the cube asset that depends on it."""

    items: AssetsDefinition
    """Discovery: the item ids of each partition's week (asset metadata only)."""
    cube: AssetsDefinition
    """The family's cube bands and inventory rows, one commit per week."""


@contextmanager
def _chosen_dagster_features() -> Iterator[None]:
    """Silence the two notices of Dagster features these assets use on purpose, and only them.

    Single-run backfills (``backfill_policy``, beta) are what let a range of weeks share one
    run; partitioned checks (``partitions_def`` on a check spec, preview) are what record a
    check per (week, block). Dagster warns at every definition, so in every run's process.
    """
    with warnings.catch_warnings():
        warnings.filterwarnings(
            "ignore",
            message="Parameter `backfill_policy` of function `asset`",
            category=BetaWarning,
        )
        warnings.filterwarnings(
            "ignore",
            message="Specifying a partitions_def on an AssetCheckSpec",
            category=PreviewWarning,
        )
        yield


def scene_assets(family: SceneFamily[Any]) -> FamilyAssets:
    """Define the discovery and cube assets of a family (partitioned by week x block)."""
    with _chosen_dagster_features():
        return _define(family)


def _define(family: SceneFamily[Any]) -> FamilyAssets:

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
        parts = scene_partitions(context, area)
        found = discover(family.collection, parts, scenes)
        for part in parts:
            context.add_asset_metadata(
                partition_discovery_metadata(found, part.week), partition_key=part.key
            )
        n = discovery_metadata(found)["n_items"]
        context.log.info(f"{family.name}: {n} items found over {len(parts)} partitions")
        return MaterializeResult()

    @asset(
        name=family.asset,
        description=family.description,
        partitions_def=SCENE_PARTITIONS,
        backfill_policy=BackfillPolicy.single_run(),
        group_name=family.group,
        kinds={"zarr", "icechunk"},
        deps=[items],
        output_required=False,  # materialisations are emitted per written partition
        check_specs=[
            AssetCheckSpec(
                c.name,
                asset=family.asset,
                description=c.description,
                partitions_def=SCENE_PARTITIONS,
            )
            for c in family.all_checks
        ],
    )
    def cube(
        context: AssetExecutionContext,
        scenes: SceneSourceResource,
        store: StoreResource,
        area: AreaResource,
        dask: DaskResource,
    ) -> Iterator[CubeEvent]:
        parts = scene_partitions(context, area)
        found = discover(family.collection, parts, scenes)
        choice = dask.choice()
        outcomes = run_range(family, parts, found, store.writer(), context.log.warning, choice)
        selected = context.selected_asset_check_keys
        if outcomes:  # one log entry for the range, a line per partition (an entry is an event)
            context.log.info("\n".join(f"{family.asset} {o.summary()}" for o in outcomes))
        for outcome in outcomes:  # week order
            yield _partition_event(family, outcome)
        # each event is stored before the generator resumes: read the range's back at once
        targets = _targets_of(
            context.instance,
            AssetKey(family.asset),
            [o.key for o in outcomes if o.written],
            context.run.run_id,
        )
        for outcome in outcomes:
            yield from _check_events(family, outcome, selected, targets.get(outcome.key))
        for key in sorted(selected, key=lambda k: k.name):
            yield Output(
                None, output_name=context.assets_def.get_output_name_for_asset_check_key(key)
            )
        stopped = [o for o in outcomes if not o.written]
        if stopped:
            raise Failure(
                description=(
                    f"{len(stopped)} of {len(outcomes)} partitions not written (ERROR checks): "
                    + "; ".join(f"{o.key}: {o.reason}" for o in stopped)
                )[:4000],
                metadata={CHECKS_STOPPED: [o.key for o in stopped]},
                allow_retries=False,
            )

    return FamilyAssets(items, cube)


def _partition_event(
    family: SceneFamily[Any], outcome: PartitionOutcome
) -> AssetMaterialization | AssetObservation:
    """A partition's materialisation, or the observation of why it was not written."""
    tags = _partition_tags(outcome.key)
    if outcome.written:
        return AssetMaterialization(
            asset_key=family.asset, partition=outcome.key, metadata=outcome.metadata, tags=tags
        )
    return AssetObservation(
        asset_key=family.asset,
        partition=outcome.key,
        description=f"not written: {outcome.reason}"[:2000],
        metadata={**outcome.metadata, "not_written": str(outcome.reason)},
        tags=tags,
    )


def _check_events(
    family: SceneFamily[Any],
    outcome: PartitionOutcome,
    selected: Any,
    target: AssetCheckEvaluationTargetMaterializationData | None,
) -> Iterator[AssetCheckEvaluation]:
    """A partition's check evaluations, bound to its materialisation ``target`` (if written)."""
    for result in outcome.checks:
        check_key = AssetCheckKey(AssetKey(family.asset), str(result.check_name))
        if check_key not in selected:
            continue
        yield AssetCheckEvaluation(
            asset_key=AssetKey(family.asset),
            check_name=check_key.name,
            passed=result.passed,
            metadata=result.metadata,
            severity=result.severity,
            description=result.description,
            partition=outcome.key,
            target_materialization_data=target,
        )


def _targets_of(
    instance: DagsterInstance, asset_key: AssetKey, partitions: list[str], run_id: str
) -> dict[str, AssetCheckEvaluationTargetMaterializationData]:
    """The materialisations this run just stored for ``partitions``, by partition.

    The local event log remembers the ids of those it stored for this process's live run
    (:meth:`~pipelines.dagster_event_log.PooledSqliteEventLogStorage.stored_materializations`);
    the rest come from one query for the range (newest first: this run's are the newest
    unless another run stored some since), and a partition it misses is asked for alone.
    """
    out: dict[str, AssetCheckEvaluationTargetMaterializationData] = {}
    remembered = getattr(instance.event_log_storage, "stored_materializations", None)
    if remembered is not None:
        known = remembered(run_id, asset_key.to_string())
        for key in partitions:
            if key in known:
                storage_id, timestamp = known[key]
                out[key] = AssetCheckEvaluationTargetMaterializationData(
                    storage_id=storage_id, run_id=run_id, timestamp=timestamp
                )
        partitions = [key for key in partitions if key not in out]
    if not partitions:
        return out
    records = instance.fetch_materializations(
        AssetRecordsFilter(asset_key=asset_key, asset_partitions=partitions),
        limit=len(partitions),
    ).records
    for rec in records:
        part = rec.partition_key
        if part is not None and part not in out and rec.event_log_entry.run_id == run_id:
            out[part] = _target_data(rec, run_id)
    for key in partitions:
        if key not in out:
            target = _target_of(instance, asset_key, key, run_id)
            if target is not None:
                out[key] = target
    return out


def _target_data(rec: Any, run_id: str) -> AssetCheckEvaluationTargetMaterializationData:
    return AssetCheckEvaluationTargetMaterializationData(
        storage_id=rec.storage_id, run_id=run_id, timestamp=rec.timestamp
    )


def _target_of(
    instance: DagsterInstance, asset_key: AssetKey, partition: str, run_id: str
) -> AssetCheckEvaluationTargetMaterializationData | None:
    """The materialisation this run just stored for ``partition`` (None if it is not there)."""
    records = instance.fetch_materializations(
        AssetRecordsFilter(asset_key=asset_key, asset_partitions=[partition]), limit=1
    ).records
    if not records or records[0].event_log_entry.run_id != run_id:
        return None
    return _target_data(records[0], run_id)


def _partition_tags(key: str) -> dict[str, str]:
    """The per-dimension tags Dagster puts on a multi-partition event (the UI filters by them)."""
    block, week = key.split("|")
    mk = MultiPartitionKey({"block": block, "week": week})
    return {f"dagster/partition/{dim}": k for dim, k in mk.keys_by_dimension.items()}
