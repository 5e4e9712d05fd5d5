"""Flat cost per scene, paired: the same batch of new scenes ingested into a small and a large store.

"Cost per scene does not grow with size" means: ingesting the next batch of
scenes costs the same whether the store already holds ~10 scenes or ~1,000.
So two stores are built once, each with its own Dagster instance (the small one
from a short prefix of the catalog, the large one from a long prefix), and in
every round the *same* batch of later weeks (the same scenes, the same blocks)
is ingested into both, back to back. The round's ratio is large-store seconds
over small-store seconds; the row reports the median over rounds with p10–p90.

Both stores grow by the same batch each round, so their sizes stay ~``small``
and ~``large`` scenes apart. Each round first reads the batch's scenes once
without writing (GDAL and the page cache then hold them equally for both
ingests), and the order alternates (large first in even rounds, small first in
odd ones), so neither store systematically gets the warmer caches.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.common import DemoArea
from bench.ingest.passes import Plan, blocks_with_data, materialise, plans, run_baseline
from bench.paired import Paired, paired_samples

__all__ = ["FlatRun", "flat_paired", "flat_row"]


@dataclass(frozen=True)
class FlatRun:
    """The paired flatness measurement."""

    pair: Paired
    """Per round: seconds of the batch into the large store (A) and into the small store (B)."""
    small_scenes: int
    """Scenes in the small store before the rounds."""
    large_scenes: int
    """Scenes in the large store before the rounds."""
    large_seconds: float
    """Seconds the large store's initial ingest took (information)."""
    batch_weeks: int
    """Weeks per round's batch."""
    batch_partitions: list[int]
    """Partitions (week x block) of each round's batch."""
    blocks: int
    """Blocks of the area (every batch covers all of them)."""
    failed: list[str]
    """Runs that failed (any store, any round)."""
    failed_error_checks: list[str]
    """Error-severity asset checks that failed."""
    large_point: tuple[int, int, float, int, float]
    """The large store's initial ingest as a size point: (scenes, reads, seconds, 1, cells per read)."""
    blocks_without_data: list[str]
    """Blocks of the large store with no inventory row or no cube chunk of S2 or S1."""


def flat_paired(
    area: DemoArea, small: int, large: int, rounds: int, batch_weeks: int, work: Path
) -> FlatRun:
    """Build the small and large stores of ``area`` and ingest ``rounds`` batches into both.

    Raises:
        RuntimeError: the catalog has too few weeks after the large prefix for the rounds.
    """
    from dagster import DagsterInstance

    from pipelines.partitions import register_area_blocks
    from pipelines.resources import load_area
    from pipelines.run import resources_for

    p_small, p_large = plans(area, [small, large])
    every = plans(area, [10**9])[0]
    after = [w for w in every.weeks if w > p_large.weeks[-1]]
    if len(after) < rounds * batch_weeks:
        raise RuntimeError(
            f"{area.sample}: {len(after)} weeks after the large prefix, "
            f"{rounds * batch_weeks} needed for {rounds} rounds"
        )
    blocks = p_large.blocks
    dirs = {"large": work / "flat_large", "small": work / "flat_small"}
    for d in dirs.values():
        shutil.rmtree(d, ignore_errors=True)
        d.mkdir(parents=True)
    failed: list[str] = []
    checks: list[str] = []
    _, bbox = load_area(area.manifest_path)
    with DagsterInstance.ephemeral() as inst_l, DagsterInstance.ephemeral() as inst_s:
        insts = {"large": inst_l, "small": inst_s}
        res = {k: resources_for(d, area.catalog, area.manifest_path) for k, d in dirs.items()}
        for inst in insts.values():
            register_area_blocks(inst, bbox)
        built = {}
        for key, plan in (("large", p_large), ("small", p_small)):
            dp = materialise(res[key], insts[key], plan.partitions)
            built[key] = dp.seconds
            failed += dp.failed
            checks += dp.failed_checks
        a: list[float] = []
        b: list[float] = []
        reads: list[int] = []
        for i in range(rounds):
            weeks = after[i * batch_weeks : (i + 1) * batch_weeks]
            batch = Plan(weeks, blocks, 0, 0, 0)
            run_baseline(area, batch, None)  # the batch's scenes in GDAL's and the OS's caches
            order = ("large", "small") if i % 2 == 0 else ("small", "large")
            took = {}
            for key in order:
                dp = materialise(res[key], insts[key], batch.partitions)
                took[key] = dp.seconds
                failed += dp.failed
                checks += dp.failed_checks
            a.append(took["large"])
            b.append(took["small"])
            reads.append(len(batch.partitions))
    per_block = blocks_with_data(dirs["large"])
    empty = [b for b in blocks if min(per_block.get(b, {"": 0}).values()) == 0]
    for d in dirs.values():
        shutil.rmtree(d, ignore_errors=True)
    return FlatRun(
        paired_samples(a, b),
        p_small.scenes,
        p_large.scenes,
        built["large"],
        batch_weeks,
        reads,
        len(blocks),
        failed,
        [c for c in checks if not c.endswith("(warn)")][:20],
        (
            p_large.scenes,
            p_large.scene_reads,
            built["large"],
            1,
            p_large.cells / max(1, p_large.scene_reads),
        ),
        empty,
    )


def flat_row(f: FlatRun, judged: bool) -> dict[str, Any]:
    """The target row: median of per-round (large store / small store) batch seconds."""
    r = f.pair.ratio
    ok = not f.failed and not f.failed_error_checks and not f.blocks_without_data
    return {
        "case": f"cost per scene, paired: a batch into a {f.large_scenes}-scene vs a "
        f"{f.small_scenes}-scene store (Dagster ingest)",
        "unit": "s/batch",
        "median": f.pair.a.median,
        "p10": f.pair.a.p10,
        "p90": f.pair.a.p90,
        "n": f.pair.rounds,
        "baseline_case": f"the same batch into the {f.small_scenes}-scene store, same round",
        "baseline": {
            "median": f.pair.b.median,
            "p10": f.pair.b.p10,
            "p90": f.pair.b.p90,
            "n": f.pair.rounds,
        },
        **f.pair.ratio_fields(),
        "ratio_def": "large-store s / small-store s for the same batch, per round",
        "target": "<= 1.25 (cost per scene does not grow with size)",
        "met": (r.median <= 1.25 and ok) if judged else None,
        "data": f"{f.pair.rounds} rounds, each {f.batch_weeks} new weeks x {f.blocks} blocks "
        f"({', '.join(map(str, f.batch_partitions))} partitions); large store built in "
        f"{f.large_seconds:.0f} s; failed runs {len(f.failed)}, failed error checks "
        f"{len(f.failed_error_checks)}, blocks of the large store without data "
        f"{f.blocks_without_data or 'none'}",
        "caches": "batch read once before both ingests (GDAL, page cache); order alternates",
        "load_sensitive": "less than unpaired sizes: both ingests of a round are seconds apart; "
        "a load change inside a round still moves that round",
        "per_round_s": {"large": list(f.pair.a_samples), "small": list(f.pair.b_samples)},
    }
