"""A scene family's range of weeks on a Dask cluster: one task per partition, one commit.

Each (week, block) partition is one task: read, mask and reproject the week's scenes, compute
the indices and flags, run the checks (:func:`pipelines.family.prepare_week`) and write the
week's chunks, summaries and inventory rows into its own fork of the coordinator's session
(:func:`store.cube.cooperative.write_in_fork`). A partition owns its chunks whole (a week is
one time chunk, a level-8 block one spatial chunk), so the forks never overlap. The
coordinator (the Dagster step) merges the forks of the partitions that may be written and
commits once for the range; a held week or one whose ERROR checks failed is dropped, and
until the commit nothing is visible. A worker that dies mid-task has its task rerun
elsewhere by the scheduler (from the same, unwritten fork); a task lost for good fails the
run with :class:`~pipelines.cluster.ClusterError` and commits nothing.

:func:`run_range` is where a run's executor choice is applied (:mod:`pipelines.cluster`).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

from dagster import AssetCheckResult

from pipelines.cluster import ExecutorChoice, dask_client, gather_all
from pipelines.family import (
    PartitionOutcome,
    PartitionWork,
    SceneFamily,
    fill_week,
    ingest_range,
    partition_work,
    prepare_week,
    week_outcome,
)
from pipelines.scenes import Discovery, ScenePartition, skip_line
from store.cube import CubeReader, CubeWriter
from store.cube.cooperative import CooperativeCommit, ForkWrite, write_in_fork

__all__ = ["TaskResult", "ingest_range_dask", "partition_task", "run_range"]

TASK_RETRIES = 1
"""Reruns of a task that raised (a transient read or storage error); a dead worker's task is
rerun by the scheduler up to its ``allowed-failures``."""


@dataclass(frozen=True)
class CheckData:
    """An ``AssetCheckResult`` as plain fields: Dagster's results do not unpickle."""

    check_name: str
    asset_key: Any
    passed: bool
    metadata: dict[str, Any]
    severity: Any
    description: str | None

    @classmethod
    def of(cls, r: AssetCheckResult) -> CheckData:
        return cls(
            str(r.check_name),
            r.asset_key,
            bool(r.passed),
            dict(r.metadata),
            r.severity,
            r.description,
        )

    def result(self) -> AssetCheckResult:
        """The Dagster result again (equal to the one it was made of)."""
        return AssetCheckResult(
            check_name=self.check_name,
            asset_key=self.asset_key,
            passed=self.passed,
            metadata=self.metadata,
            severity=self.severity,
            description=self.description,
        )


@dataclass(frozen=True)
class TaskResult:
    """What one partition's task sends back to the coordinator (picklable)."""

    key: str
    """The partition key."""
    checks: tuple[CheckData, ...]
    """The week's check results."""
    meta: dict[str, Any]
    """The partition's metadata so far."""
    reason: str | None
    """Why the week must not be written (None: its fork is to be merged)."""
    write: ForkWrite | None
    """The fork holding the week (None when it must not be written)."""
    item_ids: tuple[str, ...] = ()
    """The week's item ids (recorded in the commit when the family asks)."""


def partition_task(family: SceneFamily[Any], work: PartitionWork, fork: Any) -> TaskResult:
    """One partition on a worker: stack and check its week, write it into ``fork`` if it may be."""
    if work.items or work.stored:
        week, rows, results, meta, reason = prepare_week(family, work)
    else:
        week, rows, results, meta, reason = None, [], [], work.empty_meta(), None
    key = work.part.key
    checks = tuple(CheckData.of(r) for r in results)
    if reason is not None:
        return TaskResult(key, checks, meta, reason, None)
    written = write_in_fork(fork, key, partial(fill_week, family, work.part, week, rows))
    ids = tuple(sorted(i.id for i in work.items))
    return TaskResult(key, checks, meta, None, written, ids)


def ingest_range_dask(
    family: SceneFamily[Any],
    parts: Sequence[ScenePartition],
    found: Discovery,
    writer: CubeWriter,
    warn: Callable[[str], None],
    client: Any,
) -> list[PartitionOutcome]:
    """:func:`pipelines.family.ingest_range` with the partitions as tasks on ``client``'s cluster.

    The same rules and outcomes (holding, checks, skips), except that every written partition
    of the range lands in one commit (its metadata names them all, ``partition_keys``), so all
    of them report that snapshot.

    Raises:
        ClusterError: A task was lost for good (its workers kept dying) or the cluster went
            away; nothing was committed.
        CommitConflict: A concurrent commit changed the same chunks; nothing was committed.
    """
    # only the range's own partitions: the cost follows the range, not the store
    keys = [f"{family.name}|{p.key}" for p in parts]
    tip = CubeReader(writer.data_dir).inventory_of(keys)
    undated = [skip_line(s) for s in found.skipped if s.when is None]
    ordered = sorted(parts, key=lambda p: (p.week, p.block))
    works = [partition_work(family, p, found, tip.partition_item_ids, undated) for p in ordered]
    run = uuid.uuid4().hex[:8]
    with CooperativeCommit(writer) as coop:
        futures = [
            client.submit(
                partition_task,
                family,
                w,
                coop.fork(),
                key=f"earthmem-{family.name}-{w.part.key}-{run}",
                pure=False,
                retries=TASK_RETRIES,
            )
            for w in works
        ]
        try:  # the client outlives the run: its futures (the forks) are released either way
            done: list[TaskResult] = gather_all(
                client, futures, f"{family.asset}: a task of the range", "rerun the range"
            )
            for r in done:
                if r.reason is not None:
                    warn(f"{family.name} {r.key}: {r.reason}")
            keep = [r for r in done if r.reason is None]
            snapshot = "none"
            if keep:
                metadata: dict[str, Any] = {
                    "asset": family.asset,
                    "skipped": sorted({line for r in keep for line in r.meta["skipped"]}),
                }
                if family.commit_items:
                    metadata["items"] = sorted({i for r in keep for i in r.item_ids})
                first, last = keep[0].key, keep[-1].key
                snapshot, _ = coop.commit(
                    [r.write for r in keep if r.write is not None],
                    [r.key for r in keep],
                    f"materialise {family.asset} {first}..{last}",
                    metadata,
                )
        finally:
            client.cancel(futures)
    by_key = {p.key: p for p in ordered}
    return [
        week_outcome(
            family,
            by_key[r.key],
            [c.result() for c in r.checks],
            r.meta,
            r.reason,
            None if r.reason is not None else (snapshot, r.write.chunks_written if r.write else 0),
        )
        for r in done
    ]


def run_range(
    family: SceneFamily[Any],
    parts: Sequence[ScenePartition],
    found: Discovery,
    writer: CubeWriter,
    warn: Callable[[str], None],
    choice: ExecutorChoice,
) -> list[PartitionOutcome]:
    """Run a range's partitions on the chosen executor (the one place the choice is applied)."""
    if choice.kind == "local":
        return ingest_range(family, parts, found, writer, warn)
    with dask_client(choice) as client:
        return ingest_range_dask(family, parts, found, writer, warn, client)
