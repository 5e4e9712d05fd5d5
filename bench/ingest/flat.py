"""Flat cost per scene, paired: the same batch of new scenes ingested into a small and a large store.

"Cost per scene does not grow with size" means: ingesting the next batch of
scenes costs the same whether the store already holds ~10 scenes or ~1,000.
So two stores are built once, each with its own Dagster instance (the small one
from a short prefix of the catalog, the large one from a long prefix), and in
every round the *same* batch of later weeks (the same scenes, the same blocks)
is ingested into both, back to back. The round's ratio is large-store over
small-store CPU seconds of the process (user + system, its threads and waited-for
children: ``getrusage``); the row reports the median over rounds with p10–p90, and
the wall-clock ratio beside it as information. On this 2-core machine shared with
other jobs (load ~10), two probe runs of 5 rounds each had per-round wall ratios of
0.61–1.26 and 0.76–1.37 and CPU ratios of 0.89–1.17 and 0.87–1.35 (medians 1.03 / 0.82
wall, 0.99 / 1.05 CPU): the wall clock is what moved the row between runs.

Both stores grow by the same batch each round, so their sizes stay ~``small``
and ~``large`` scenes apart. Each round first reads the batch's scenes once
without writing (GDAL and the page cache then hold them equally for both
ingests), and the order alternates (large first in even rounds, small first in
odd ones), so neither store systematically gets the warmer caches.

Both stores are built once and cached under ``bench/.cache`` (the large one
takes minutes: a run must not pay it), each with the persistent SQLite
Dagster instance ``earthmem ingest`` uses (``deploy/dagster.yaml``), so what
grows with the store (run records, event log, asset partitions) grows as it
does for a user. A run copies both into its work directory and ingests the
rounds into the copies; the cache is never written after it is complete. The
cache key names the catalog, both sizes, the cube's ``LAYOUT_VERSION``,
:data:`FLAT_CACHE_VERSION` and Dagster's version; the row says when the cached
stores were built and by which commit.
"""

from __future__ import annotations

import datetime as dt
import json
import resource
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from bench.common import CACHE_DIR, REPO, DemoArea
from bench.ingest.passes import (
    DAGSTER_YAML,
    Plan,
    blocks_with_data,
    local_executor,
    materialise,
    plans,
    run_baseline,
)
from bench.paired import Paired, paired_samples

__all__ = ["FLAT_CACHE_VERSION", "FlatRun", "flat_paired", "flat_row", "prepare_stores"]

FLAT_CACHE_VERSION = 2
"""Bump to rebuild the cached small and large stores (a bench change to how they are built).

2: built with manifests split by time (:func:`store.snapshots.repository_config`); a v1 store
would be split by its first batch, a one-off rewrite the rounds must not pay."""


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
    cache: dict[str, Any]
    """Where the built stores came from: cache key, built at / by, reused or built now."""
    cpu: Paired | None = None
    """Per round: CPU seconds of the batch into the large store (A) and the small one (B); the
    judged ratio when present (``pair``, the wall seconds, is then information)."""


def cpu_seconds() -> float:
    """User + system CPU seconds of this process, its threads and its waited-for children."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def _instance(home: Path) -> Any:
    """The persistent Dagster instance at ``home`` (created with ``deploy/dagster.yaml``)."""
    from dagster import DagsterInstance

    home.mkdir(parents=True, exist_ok=True)
    # today's config, as earthmem ingest refreshes it; a storage rooted at $DAGSTER_HOME is
    # rooted at this home instead (the bench holds two instances in one process)
    config = yaml.safe_load(DAGSTER_YAML.read_text())
    custom = (config.get("storage") or {}).get("custom") or {}
    if "base_dir" in (custom.get("config") or {}):
        custom["config"]["base_dir"] = str(home.resolve())
    (home / "dagster.yaml").write_text(yaml.safe_dump(config))
    return DagsterInstance.from_config(str(home))


def _commit() -> str:
    try:
        out = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True
        )
        return out.stdout.strip() or "unknown"
    except OSError:
        return "unknown"


def _cache_key(area: DemoArea, small: int, large: int) -> str:
    from dagster import __version__ as dagster_version

    from store.cube import LAYOUT_VERSION

    return (
        f"flat_v{FLAT_CACHE_VERSION}_{area.sample.name}_{small}_{large}"
        f"_layout{LAYOUT_VERSION}_dagster{dagster_version}"
    )


def _built_stores(
    area: DemoArea, plans_by_key: dict[str, Plan], cache: Path, key: str
) -> tuple[Path, dict[str, Any]]:
    """The cached small and large stores (built now when missing); their directory and record.

    A store is built into a temporary directory and renamed into place with its
    record (``built.json``) only when both ingests finished, so an interrupted
    build is never taken for a complete one.
    """
    from pipelines.partitions import register_area_blocks
    from pipelines.resources import load_area
    from pipelines.run import resources_for

    root = cache / key
    record = root / "built.json"
    if record.exists():
        return root, {**json.loads(record.read_text()), "reused": True}
    tmp = cache / f".{key}.building"
    shutil.rmtree(tmp, ignore_errors=True)
    _, bbox = load_area(area.manifest_path)
    built: dict[str, Any] = {"key": key, "commit": _commit(), "stores": {}}
    for name, plan in plans_by_key.items():
        data, home = tmp / name / "data", tmp / name / "dagster_home"
        data.mkdir(parents=True)
        with _instance(home) as inst:
            register_area_blocks(inst, bbox)
            dp = materialise(
                resources_for(data, area.catalog, area.manifest_path, local_executor()),
                inst,
                plan.partitions,
            )
        built["stores"][name] = {
            "scenes": plan.scenes,
            "partitions": len(plan.partitions),
            "seconds": dp.seconds,
            "failed": dp.failed,
            "failed_checks": dp.failed_checks,
        }
    built["built_at"] = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    (tmp / "built.json").write_text(json.dumps(built, indent=1))
    shutil.rmtree(root, ignore_errors=True)
    tmp.rename(root)
    return root, {**built, "reused": False}


def prepare_stores(
    area: DemoArea, small: int, large: int, cache: Path = CACHE_DIR
) -> dict[str, Any]:
    """Build the cached small and large stores of ``area`` now if missing (``--prepare``)."""
    p_small, p_large = plans(area, [small, large])
    return _built_stores(
        area, {"large": p_large, "small": p_small}, cache, _cache_key(area, small, large)
    )[1]


def flat_paired(
    area: DemoArea,
    small: int,
    large: int,
    rounds: int,
    batch_weeks: int,
    work: Path,
    cache: Path | None = CACHE_DIR,
) -> FlatRun:
    """Ingest ``rounds`` batches into copies of the small and large stores of ``area``.

    ``cache``: where the built stores are kept between runs (None: built in ``work``
    and dropped, as ``--quick`` does).

    Raises:
        RuntimeError: the catalog has too few weeks after the large prefix for the rounds.
    """
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
    key = _cache_key(area, small, large)
    src, record = _built_stores(
        area, {"large": p_large, "small": p_small}, cache if cache is not None else work, key
    )
    failed: list[str] = []
    checks: list[str] = []
    for s in record["stores"].values():
        failed += s["failed"]
        checks += s["failed_checks"]
    dirs = {k: work / f"flat_{k}" for k in ("large", "small")}
    for k, d in dirs.items():
        shutil.rmtree(d, ignore_errors=True)
        shutil.copytree(src / k, d, symlinks=True)
    if cache is None:
        shutil.rmtree(src, ignore_errors=True)
    _, bbox = load_area(area.manifest_path)
    with (
        _instance(dirs["large"] / "dagster_home") as inst_l,
        _instance(dirs["small"] / "dagster_home") as inst_s,
    ):
        insts = {"large": inst_l, "small": inst_s}
        res = {
            k: resources_for(d / "data", area.catalog, area.manifest_path, local_executor())
            for k, d in dirs.items()
        }
        for inst in insts.values():
            register_area_blocks(inst, bbox)
        a: list[float] = []
        b: list[float] = []
        ca: list[float] = []
        cb: list[float] = []
        reads: list[int] = []
        for i in range(rounds):
            weeks = after[i * batch_weeks : (i + 1) * batch_weeks]
            batch = Plan(weeks, blocks, 0, 0, 0)
            run_baseline(area, batch, None)  # the batch's scenes in GDAL's and the OS's caches
            order = ("large", "small") if i % 2 == 0 else ("small", "large")
            took = {}
            cpu = {}
            for k in order:
                c0 = cpu_seconds()
                dp = materialise(res[k], insts[k], batch.partitions)
                cpu[k] = cpu_seconds() - c0
                took[k] = dp.seconds
                failed += dp.failed
                checks += dp.failed_checks
            a.append(took["large"])
            b.append(took["small"])
            ca.append(cpu["large"])
            cb.append(cpu["small"])
            reads.append(len(batch.partitions))
    per_block = blocks_with_data(dirs["large"] / "data")
    empty = [b for b in blocks if min(per_block.get(b, {"": 0}).values()) == 0]
    for d in dirs.values():
        shutil.rmtree(d, ignore_errors=True)
    large_s = record["stores"]["large"]["seconds"]
    return FlatRun(
        paired_samples(a, b),
        p_small.scenes,
        p_large.scenes,
        large_s,
        batch_weeks,
        reads,
        len(blocks),
        failed,
        [c for c in checks if not c.endswith("(warn)")][:20],
        (
            p_large.scenes,
            p_large.scene_reads,
            large_s,
            1,
            p_large.cells / max(1, p_large.scene_reads),
        ),
        empty,
        {k: record.get(k) for k in ("key", "commit", "built_at", "reused")},
        paired_samples(ca, cb),
    )


def flat_row(f: FlatRun, judged: bool) -> dict[str, Any]:
    """The target row: median of per-round (large store / small store) batch CPU seconds.

    Wall seconds when the run has no CPU figures; the other measure is information.
    """
    judged_pair = f.cpu if f.cpu is not None else f.pair
    r = judged_pair.ratio
    ok = not f.failed and not f.failed_error_checks and not f.blocks_without_data
    return {
        "case": f"cost per scene, paired: a batch into a {f.large_scenes}-scene vs a "
        f"{f.small_scenes}-scene store (Dagster ingest)",
        "unit": "CPU s/batch" if f.cpu is not None else "s/batch",
        "median": judged_pair.a.median,
        "p10": judged_pair.a.p10,
        "p90": judged_pair.a.p90,
        "n": judged_pair.rounds,
        "baseline_case": f"the same batch into the {f.small_scenes}-scene store, same round",
        "baseline": {
            "median": judged_pair.b.median,
            "p10": judged_pair.b.p10,
            "p90": judged_pair.b.p90,
            "n": judged_pair.rounds,
        },
        **judged_pair.ratio_fields(),
        "ratio_def": (
            "large-store CPU s / small-store CPU s for the same batch, per round "
            "(process user + system, threads and waited-for children)"
            if f.cpu is not None
            else "large-store s / small-store s for the same batch, per round"
        ),
        "wall_ratio": (
            {"median": f.pair.ratio.median, "p10": f.pair.ratio.p10, "p90": f.pair.ratio.p90}
            if f.cpu is not None
            else None
        ),
        "target": "<= 1.25 (cost per scene does not grow with size)",
        "met": (r.median <= 1.25 and ok) if judged else None,
        "data": f"{f.pair.rounds} rounds, each {f.batch_weeks} new weeks x {f.blocks} blocks "
        f"({', '.join(map(str, f.batch_partitions))} partitions); large store built in "
        f"{f.large_seconds:.0f} s ({'cached: built ' + str(f.cache['built_at']) + ' by ' + str(f.cache['commit']) if f.cache['reused'] else 'built in this run'}, "
        f"persistent SQLite Dagster instance, deploy/dagster.yaml); failed runs {len(f.failed)}, failed error checks "
        f"{len(f.failed_error_checks)}, blocks of the large store without data "
        f"{f.blocks_without_data or 'none'}",
        "caches": "batch read once before both ingests (GDAL, page cache); order alternates; "
        "both stores copied from the bench cache before the rounds",
        "store_cache": f.cache,
        "load_sensitive": "CPU seconds: little (other jobs take cores, not this process's CPU "
        "time; cache and memory-bandwidth contention remain); the wall ratio beside it moves "
        "with the load inside a round",
        "per_round_s": {"large": list(f.pair.a_samples), "small": list(f.pair.b_samples)},
        "per_round_cpu_s": (
            {"large": list(f.cpu.a_samples), "small": list(f.cpu.b_samples)}
            if f.cpu is not None
            else None
        ),
    }
