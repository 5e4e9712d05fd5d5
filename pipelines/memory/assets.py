"""Memories re-checked after the cube moves: verdicts that flip and cited facts that changed.

``memory_rechecks`` (unpartitioned) reads every project's active items that carry a
claim or cite cube facts, re-checks them against the cube's tip
(:func:`store.memory.recheck.recheck_item`) as the service identity ``pipeline``,
and records only what changed (a history entry by ``pipeline``; the item becomes
``potentially_stale`` when its verdict flips or a cited fact changed). It runs at
the end of ``earthmem ingest`` and from ``memory_recheck_sensor`` whenever the
cube's branch tip moves; its check reports how many items were checked, changed and
marked stale. Each head the re-check writes is signed with the data directory's
key (:mod:`store.keys`), the key the API signs its writes with, so ``earthmem memory
audit`` finds no unsigned tail after a re-check.
"""

import os
from typing import Any

from dagster import (
    AssetCheckResult,
    AssetCheckSeverity,
    AssetCheckSpec,
    AssetExecutionContext,
    MaterializeResult,
    RunRequest,
    SensorEvaluationContext,
    SkipReason,
    asset,
    define_asset_job,
    sensor,
)

from pipelines.resources import StoreResource
from store.cube.read import CubeReader
from store.errors import CubeNotFound, StoreError
from store.keys import Ed25519Key
from store.memory import MEMORY_URL_ENV, default_url, open_store
from store.memory.chain import head_signature
from store.memory.model import ItemFilter
from store.memory.recheck import CHECKABLE_STATUSES, recheck_item
from store.snapshots import MAIN_BRANCH, cube_location, open_repository, open_storage

__all__ = ["PIPELINE_ACTOR", "memory_recheck_job", "memory_recheck_sensor", "memory_rechecks"]

PIPELINE_ACTOR = "pipeline"
"""The service identity the re-checks are recorded under."""

_PAGE = 200


def recheck_all(data_dir: str, memory_url: str | None = None) -> dict[str, Any]:
    """Re-check every checkable item of every project against the cube's tip.

    Returns:
        Counts (``checked``, ``changed``, ``stale``), the snapshot read and the items
        that became stale.
    """
    url = memory_url or os.environ.get(MEMORY_URL_ENV) or default_url(data_dir)
    reader = CubeReader(data_dir)
    index = reader.inventory.overpass_index()
    key = Ed25519Key.load_or_create(data_dir)  # the API's key: one signer per data directory
    store = open_store(url)
    counts = {"checked": 0, "changed": 0, "stale": 0}
    stale: list[str] = []
    for project in store.projects():
        cursor: str | None = None
        while True:
            page = store.list_items(
                project, ItemFilter(statuses=CHECKABLE_STATUSES), limit=_PAGE, cursor=cursor
            )
            for item in page.items:
                if item.claim is None and not any(e.get("kind") == "fact" for e in item.evidence):
                    continue
                counts["checked"] += 1
                written, _ = recheck_item(
                    store,
                    reader,
                    index,
                    item,
                    actor=PIPELINE_ACTOR,
                    record_unchanged=False,
                    sign_head=lambda head: head_signature(key, head),
                )
                if written is not None:
                    counts["changed"] += 1
                    now = written.item.status if written.item is not None else item.status
                    if now == "potentially_stale" and item.status != "potentially_stale":
                        counts["stale"] += 1
                        stale.append(f"{project}/{item.id}")
            if page.next_cursor is None:
                break
            cursor = page.next_cursor
    store.close()
    return {**counts, "snapshot_id": reader.snapshot_id, "became_stale": stale[:50]}


@asset(
    group_name="memory",
    description="Memories re-checked against the cube's tip: verdicts that flipped and cited "
    "facts that changed are recorded by actor 'pipeline' (items become potentially_stale).",
    check_specs=[
        AssetCheckSpec(
            "no_new_stale_memories",
            asset="memory_rechecks",
            description="Warns when the re-check marked items potentially_stale.",
        )
    ],
)
def memory_rechecks(context: AssetExecutionContext, store: StoreResource) -> MaterializeResult:
    """Re-check the memories of every project (see the module docstring)."""
    try:
        outcome = recheck_all(store.data_dir)
    except CubeNotFound:
        context.log.info("no cube yet: nothing to re-check")
        return MaterializeResult(  # the declared check still reports (Dagster requires it)
            metadata={"checked": 0, "note": "no cube yet"},
            check_results=[_stale_check(0, note="no cube yet: nothing re-checked")],
        )
    except StoreError as exc:
        raise RuntimeError(f"memory re-check failed: {exc}") from exc
    context.log.info(
        f"memory re-check at {outcome['snapshot_id']}: {outcome['checked']} checked, "
        f"{outcome['changed']} changed, {outcome['stale']} became stale"
    )
    return MaterializeResult(
        metadata={
            "checked": outcome["checked"],
            "changed": outcome["changed"],
            "became_stale": outcome["stale"],
            "snapshot_id": outcome["snapshot_id"],
            "stale_items": ", ".join(outcome["became_stale"]) or "-",
        },
        check_results=[_stale_check(outcome["stale"])],
    )


def _stale_check(stale: int, note: str | None = None) -> AssetCheckResult:
    """``no_new_stale_memories``: passes when the re-check marked no item potentially_stale."""
    metadata: dict[str, Any] = {"became_stale": stale}
    if note is not None:
        metadata["note"] = note
    return AssetCheckResult(
        check_name="no_new_stale_memories",
        passed=stale == 0,
        severity=AssetCheckSeverity.WARN,
        metadata=metadata,
    )


memory_recheck_job = define_asset_job("memory_recheck_job", selection=[memory_rechecks])
"""Runs ``memory_rechecks`` (the sensor's target)."""


@sensor(job=memory_recheck_job, minimum_interval_seconds=60)
def memory_recheck_sensor(context: SensorEvaluationContext) -> RunRequest | SkipReason:
    """Request a re-check when the cube's branch tip moved since the last one (cursor: its id)."""
    data_dir = os.environ.get("EARTHMEM_DATA", "data")
    try:
        tip = open_repository(open_storage(cube_location(data_dir))).lookup_branch(MAIN_BRANCH)
    except StoreError as exc:
        return SkipReason(f"no cube to watch: {exc}")
    if tip == context.cursor:
        return SkipReason(f"cube tip {tip} already re-checked")
    context.update_cursor(tip)
    return RunRequest(run_key=f"memory-recheck-{tip}")
