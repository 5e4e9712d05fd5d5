"""Ingestion bench: the Dagster ingest of the demo area vs reading and reprojecting the same scenes.

For growing prefixes of the demo period (about 10, 40 and 160 S2 + S1 scenes)
the scene partitions (week x block) are materialised through Dagster exactly
as :func:`pipelines.run.ingest_area` does (one run per block and range of up to
``RANGE_WEEKS`` weeks, the four scene assets, one cube commit per week, an
ephemeral instance, a fresh data directory), and timed. Baseline in the same run: the same partitions' scenes found, read and
reprojected onto the lattice and turned into indices by the pipeline's own
plain functions (:func:`pipelines.sentinel2.ingest.stack_week` and
:func:`pipelines.sentinel1.ingest.stack_week`) without writing and without
Dagster. A third pass writes those stacks with :class:`store.cube.CubeWriter`
(one transaction per asset and partition, as the assets do) but without
Dagster, so the table splits the cost into read+compute, writing, and Dagster's
per-run overhead (run creation, event log), which is part of what is measured.

Rates: scenes/s counts S2 + S1 items per partition (an item over two blocks
counts twice: it is read twice); cells/s counts lattice cells of the window x
items read.

Flatness: with T(n) the Dagster ingest time of n scenes, the target row is the
marginal cost per scene read between successive sizes,
(T(n_i) - T(n_{i-1})) / (reads_i - reads_{i-1}), largest over smallest: a fixed
cost (one instance, the first run) cancels out, so the ratio stays near 1
unless the cost per scene grows with size. The raw cost per scene, T(n) / reads at the largest size over
the smallest, is kept as information: it falls with size as the fixed cost spreads.

The largest size (``--flat-size``, default 1,000 scenes) comes from a
bench-only "long" catalog built once under ``bench/.cache`` at the demo's
density (about one scene per partition-week): the demo's S2 + S1 items, a copy
of each 104 weeks later (same weekday; the week partitions start 2022-12-29,
so time alone gives ~400 scenes), and ``LONG_TILES - 1`` copies of all of
those moved ``k * LONG_EAST_M`` east onto fresh level-8 blocks (each asset a GDAL VRT over
the demo's COG with the GeoTransform moved), ~1,600 scenes over 8 blocks. Its
prefix is ingested through Dagster once (no baseline passes); the run is
checked: no failed partition or error check, and every block has inventory
rows and cube chunks of S2 and S1.

    python -m bench.bench_ingest [--quick] [--sizes 10,40,160] [--flat-size 1000] [--json PATH]
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from itertools import pairwise
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import CACHE_DIR, Timing, demo_area, machine, write_json
from bench.ingest.catalog import LONG_EAST_M, LONG_TILES, long_area
from bench.ingest.passes import Plan, blocks_with_data, plans, run_baseline, run_dagster

__all__ = ["flatness_rows", "main", "marginal_costs"]


def _log(msg: str) -> None:
    print(f"[bench_ingest] {msg}", file=sys.stderr, flush=True)


def marginal_costs(points: list[tuple[int, int, float]]) -> list[tuple[int, int, float]]:
    """Seconds per additional scene read between successive sizes.

    Args:
        points: ``(scenes, scene_reads, seconds)`` per size, ascending.

    Returns:
        ``(scenes[i-1], scenes[i], (T[i] - T[i-1]) / (reads[i] - reads[i-1]))`` for
        each step whose reads grow.
    """
    return [
        (s0, s1, (t1 - t0) / (r1 - r0))
        for (s0, r0, t0), (s1, r1, t1) in pairwise(points)
        if r1 > r0
    ]


def flatness_rows(
    points: list[tuple[int, int, float, int, float]], flat: dict[str, Any]
) -> list[dict[str, Any]]:
    """The cost-per-scene rows: marginal (the target) and raw (information).

    Args:
        points: ``(scenes, scene_reads, seconds, repeats, cells_per_read)`` per size.
        flat: Checks of the largest (long catalog) run; empty when it did not run.
    """
    points = sorted(points)
    steps = marginal_costs([(sc, r, t) for sc, r, t, _, _ in points])
    marg = [m for _, _, m in steps]
    sizes = ", ".join(
        f"{sc} scenes: {t:.1f} s (n={k}) / {r} reads = {t / r:.4f} s/read, {c / 1e3:.1f} k cells/read"
        for sc, r, t, k, c in points
    )
    step_text = ", ".join(f"{a}->{b}: {m:.4f}" for a, b, m in steps)
    ok_run = not flat or (
        not flat["failed_partitions"]
        and not flat["failed_error_checks"]
        and not flat["blocks_without_data"]
    )
    run_note = ""
    if flat:
        run_note = (
            f"; largest size: {flat['catalog']}, one pass, failed partitions "
            f"{len(flat['failed_partitions'])}, failed checks {flat['failed_checks']} "
            f"({len(flat['failed_error_checks'])} error), blocks without data "
            f"{flat['blocks_without_data'] or 'none'}"
        )
    lo, hi = points[0], points[-1]
    raw = (hi[2] / hi[1]) / (lo[2] / lo[1])
    ratio = max(marg) / min(marg) if len(marg) >= 2 and min(marg) > 0 else None
    return [
        {
            "case": f"cost per scene, marginal, {lo[0]} to {hi[0]} scenes (Dagster ingest)",
            "unit": "x",
            "median": ratio,
            "baseline_case": "smallest marginal s per added scene read",
            "baseline": {"median": min(marg) if marg else None},
            "ratio": ratio,
            "ratio_def": "largest / smallest marginal s per added scene read between successive sizes",
            "target": "<= 1.25 (cost per scene does not grow with size)",
            "met": None if len(marg) < 2 else (ratio is not None and ratio <= 1.25 and ok_run),
            "data": (
                f"marginal s/read {step_text}"
                + (f"; last/first step {marg[-1] / marg[0]:.3g}" if marg[0] > 0 else "")
                + (
                    "; a step is not positive (timing noise): not judged"
                    if ratio is None and len(marg) >= 2
                    else ""
                )
                + f"; {sizes}"
                if marg
                else sizes
            )
            + run_note,
            "marginal_s_per_read": marg,
            "sizes": [
                {"scenes": sc, "scene_reads": r, "seconds": t, "n": k, "cells_per_read": c}
                for sc, r, t, k, c in points
            ],
            "largest_run": flat,
        },
        {
            "case": f"cost per scene, raw, {hi[0]} vs {lo[0]} scenes (Dagster ingest)",
            "unit": "x",
            "median": raw,
            "baseline_case": f"s/scene read at {lo[0]} scenes",
            "baseline": {"median": lo[2] / lo[1]},
            "ratio": raw,
            "ratio_def": "s/scene read at the largest size / at the smallest",
            "target": "(info: the smallest size carries Dagster's fixed per-run cost)",
            "met": None,
            "data": sizes,
        },
    ]


def _fmt(x: float | None) -> str:
    return "-" if x is None else format(x, ".4g")


def _t(samples: list[float]) -> Timing:
    return Timing.of(samples)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--quick", action="store_true", help="tiny sample, 3 and 8 scenes, one repeat")
    ap.add_argument(
        "--sizes", default=None, help="comma-separated scene counts (default 10,40,160)"
    )
    ap.add_argument(
        "--repeats", type=int, default=None, help="repeats of the smallest size (default 3)"
    )
    ap.add_argument(
        "--flat-size",
        type=int,
        default=None,
        help="scenes of the long catalog ingested once for the cost-per-scene rows "
        "(default 1000; 0 = none; --quick: none)",
    )
    ap.add_argument("--size", choices=("demo", "tiny"), default=None)
    ap.add_argument("--json", help="write results as JSON here")
    args = ap.parse_args(argv)
    quick = args.quick
    size = args.size or ("tiny" if quick else "demo")
    sizes = [int(s) for s in (args.sizes or ("3,8" if quick else "10,40,160")).split(",")]
    small_repeats = args.repeats or (1 if quick else 3)
    t_start = time.perf_counter()
    area = demo_area(size)
    CACHE_DIR.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="ingest_tmp_", dir=CACHE_DIR))  # private: runs may overlap
    the_plans = plans(area, sizes)
    # warm-up (imports, Dagster, GDAL, the per-grid nearest-neighbour maps): one partition each way
    warm = Plan(the_plans[0].weeks[:1], the_plans[0].blocks, 0, 0, 0)
    run_baseline(area, warm, None)
    if not quick:
        run_dagster(area, warm, work / "warm")
    rows: list[dict[str, Any]] = []
    # (scenes, scene reads, median seconds, repeats, cells per read) per size, for the flatness rows
    points: list[tuple[int, int, float, int, float]] = []
    for i, plan in enumerate(the_plans):
        reps = small_repeats if i == 0 else (2 if i == 1 and not quick else 1)
        ing, base, bw = [], [], []
        per_ing: list[float] = []
        per_base: list[float] = []
        failed: list[str] = []
        failed_checks: list[str] = []
        for _ in range(reps):
            tb, pb = run_baseline(area, plan, None)
            base.append(tb)
            per_base += pb
            dp = run_dagster(area, plan, work / "dagster")
            failed, failed_checks = dp.failed, dp.failed_checks
            ing.append(dp.seconds)
            per_ing += dp.per_partition
            tw, _ = run_baseline(area, plan, work / "plain")
            bw.append(tw)
        for sub in ("dagster", "plain"):
            shutil.rmtree(work / sub, ignore_errors=True)
        n = plan.scene_reads
        ti_t, tb_t, tw_t = _t(ing), _t(base), _t(bw)
        points.append((plan.scenes, n, ti_t.median, ti_t.n, plan.cells / n))
        parts = len(plan.partitions)
        overhead = (ti_t.median - tw_t.median) / parts
        data = (
            f"{plan.scenes} scenes ({n} scene reads), {len(plan.weeks)} weeks x "
            f"{len(plan.blocks)} blocks = {parts} partitions, {plan.cells / 1e6:.1f} M cell reads"
        )
        ratio = tb_t.median / ti_t.median
        rows.append(
            {
                "case": f"Dagster ingest, {plan.scenes} scenes: seconds per scene read",
                "unit": "s/scene",
                "median": ti_t.median / n,
                "p10": ti_t.p10 / n,
                "p90": ti_t.p90 / n,
                "n": ti_t.n,
                "baseline_case": "stack_week S2 + S1 (find, read, reproject, indices; no write, no Dagster)",
                "baseline": {
                    "median": tb_t.median / n,
                    "p10": tb_t.p10 / n,
                    "p90": tb_t.p90 / n,
                    "n": tb_t.n,
                },
                "ratio": ratio,
                "ratio_def": "ingest rate / baseline rate",
                "target": ">= 0.8",
                "met": ratio >= 0.8 and not failed,
                "data": data,
                "scenes_per_s": n / ti_t.median,
                "cells_per_s": plan.cells / ti_t.median,
                "baseline_scenes_per_s": n / tb_t.median,
                "baseline_cells_per_s": plan.cells / tb_t.median,
                "per_partition_ms": {
                    "dagster_median": 1e3 * _t(per_ing).median,
                    "dagster_p90": 1e3 * _t(per_ing).p90,
                    "baseline_median": 1e3 * _t(per_base).median,
                    "plain_write_total_s": tw_t.median,
                    "dagster_overhead_per_partition_ms": 1e3 * overhead,
                },
                "failed_partitions": failed,
                "failed_checks": len(failed_checks),
            }
        )
        rows.append(
            {
                "case": f"read + compute + CubeWriter commits without Dagster, {plan.scenes} scenes",
                "unit": "s/scene",
                "median": tw_t.median / n,
                "p10": tw_t.p10 / n,
                "p90": tw_t.p90 / n,
                "n": tw_t.n,
                "baseline_case": "stack_week S2 + S1 (no write, no Dagster)",
                "baseline": {
                    "median": tb_t.median / n,
                    "p10": tb_t.p10 / n,
                    "p90": tb_t.p90 / n,
                    "n": tb_t.n,
                },
                "ratio": tb_t.median / tw_t.median,
                "ratio_def": "rate / baseline rate",
                "target": "(info: splits write cost from Dagster overhead)",
                "met": None,
                "data": data,
                "dagster_overhead_per_partition_ms": 1e3 * overhead,
            }
        )
        _log(f"{plan.scenes} scenes done ({time.perf_counter() - t_start:.0f} s)")
    flat_size = args.flat_size if args.flat_size is not None else (0 if quick else 1000)
    flat: dict[str, Any] = {}
    if flat_size and flat_size > max(p[0] for p in points):
        longer = long_area(area)
        plan = plans(longer, [flat_size])[0]
        run_baseline(longer, Plan(plan.weeks[:1], plan.blocks, 0, 0, 0), None)  # warm the new grids
        dp = run_dagster(longer, plan, work / "long")
        per_block = blocks_with_data(work / "long")
        shutil.rmtree(work / "long", ignore_errors=True)
        points.append((plan.scenes, plan.scene_reads, dp.seconds, 1, plan.cells / plan.scene_reads))
        empty = [b for b in plan.blocks if min(per_block.get(b, {"": 0}).values()) == 0]
        flat = {
            "catalog": f"{longer.sample.name}: {len(plan.weeks)} weeks x {len(plan.blocks)} blocks",
            "failed_partitions": dp.failed,
            "failed_checks": len(dp.failed_checks),
            "failed_error_checks": [c for c in dp.failed_checks if not c.endswith("(warn)")][:20],
            "blocks_without_data": empty,
            "per_block": per_block,
        }
        _log(
            f"{plan.scenes} scenes (long catalog) done in {dp.seconds:.0f} s "
            f"({time.perf_counter() - t_start:.0f} s)"
        )
    shutil.rmtree(work, ignore_errors=True)
    rows += flatness_rows(points, flat)
    from pipelines.run import RANGE_WEEKS

    doc = {
        "bench": "ingest",
        "title": "Ingestion: Dagster ingest vs reading and reprojecting the same scenes",
        "machine": machine(),
        "data": {"area": size, "sizes": sizes, "cached_full_ingest": area.report},
        "rows": rows,
        "notes": [
            "Dagster's per-run overhead (run record, event log, asset checks; one run per block "
            f"and range of up to {RANGE_WEEKS} weeks) is part of the ingest time; the 'without "
            "Dagster' row isolates it.",
            "Scenes are the demo sample's synthetic COGs (2 km area, 10/20 m UTM) on local disk. "
            "The demo holds 207 S2 + S1 scenes; the cost-per-scene rows' largest size comes from "
            f"a bench-only catalog at the demo's density: the demo's items, copies 104 weeks later, "
            f"and of both {LONG_TILES - 1} copies {LONG_EAST_M:.0f} m, {2 * LONG_EAST_M:.0f} m, ... "
            "east onto fresh blocks (GDAL VRTs over the demo's COGs with the GeoTransform moved), "
            "about 1,600 scenes over 8 blocks. Its partition windows hold ~12% more cells per scene "
            "read (the area's bbox spans the ~220 m gaps between copies) and a VRT read costs "
            "~0.8 ms more per band than the COG's: both make the largest size's cost per scene "
            "higher, never lower.",
            "The baseline finds items through the source as the assets do (the static catalog "
            "parsed once per process); before, it walked the whole catalog JSON per partition "
            "(~60 ms, about 40% of its time).",
        ],
        "seconds": time.perf_counter() - t_start,
    }
    write_json(args.json, doc)
    for r in rows:
        ratio_text = "n/a" if r["ratio"] is None else f"{r['ratio']:.3g}"
        print(
            f"{r['case'][:72]:72} {r['median'] if r['median'] is None else format(r['median'], '.4g')} "
            f"{r['unit']} base {_fmt(r['baseline']['median'])} "
            f"ratio {ratio_text} {r['target']} {'' if r['met'] is None else ('MET' if r['met'] else 'MISSED')}"
        )
        if r["case"].startswith("cost per scene"):
            print(f"    {r['data']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
