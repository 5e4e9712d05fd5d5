"""Ingestion bench: the Dagster ingest of the demo area vs reading and reprojecting the same scenes.

For growing prefixes of the demo period (about 10, 40 and 160 S2 + S1 scenes)
the scene partitions (week x block) are materialised through Dagster exactly
as :func:`pipelines.run.ingest_area` does (one run per block and range of up to
``RANGE_WEEKS`` weeks, the four scene assets, one cube commit per week, the
persistent instance ``earthmem ingest`` opens, fresh in a fresh data directory), and timed. Baseline in the same run: the same partitions' scenes found, read and
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

Flatness, the target row, is paired (:mod:`bench.ingest.flat`): a small
(``FLAT_SMALL`` scenes) and a large (``--flat-size``, default 1,000 scenes)
store are built once and cached (each with its own persistent Dagster instance;
a run ingests into copies), and in every round the same batch of new weeks is
ingested into both back to back; the ratio is the
median of the per-round large / small seconds. Kept as information: the
marginal cost per scene read between successive sizes,
(T(n_i) - T(n_{i-1})) / (reads_i - reads_{i-1}), largest over smallest, which
compares sizes timed minutes apart (the largest once, for minutes) and so moves
with the machine's load between them; and the raw cost per scene, T(n) / reads
at the largest size over the smallest.

The large store (``--flat-size``, default 1,000 scenes) comes from a
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
    python -m bench.bench_ingest --prepare   # build the cached stores only (minutes, once)
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
from bench.ingest.flat import flat_paired, flat_row, prepare_stores
from bench.ingest.passes import Plan, plans, run_baseline, run_dagster
from bench.paired import paired_samples

FLAT_SMALL = 10
"""Scenes of the small store of the paired flatness row."""
FLAT_ROUNDS = 5
"""Paired rounds of the flatness row (7 until session 15: ``make bench`` took ~20 minutes on
this machine, over its ~15-minute budget; the row's per-round CPU ratios vary by ±10 %)."""
FLAT_BATCH_WEEKS = 2
"""Weeks (x every block) of each round's batch."""

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
    """The unpaired cost-per-scene rows, both information: marginal and raw.

    The marginal row compares sizes timed minutes apart (the largest once), so a
    load change between them moves it; ``unpaired_verdict`` keeps what the old
    target said. The target is the paired row (:mod:`bench.ingest.flat`).

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
            "target": "(info: sizes timed minutes apart, unpaired; the paired row is the target)",
            "met": None,
            "unpaired_verdict": None
            if len(marg) < 2
            else (ratio is not None and ratio <= 1.25 and ok_run),
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
        "--repeats", type=int, default=None, help="repeats of the smallest size (default 2)"
    )
    ap.add_argument(
        "--flat-size",
        type=int,
        default=None,
        help="scenes of the long catalog ingested once for the cost-per-scene rows "
        "(default 1000; 0 = none; --quick: none)",
    )
    ap.add_argument("--size", choices=("demo", "tiny"), default=None)
    ap.add_argument(
        "--prepare",
        action="store_true",
        help="only build what the default run caches (the demo area, the long catalog, the "
        "flatness row's small and large stores) and exit: a first run then measures only",
    )
    ap.add_argument("--json", help="write results as JSON here")
    args = ap.parse_args(argv)
    quick = args.quick
    size = args.size or ("tiny" if quick else "demo")
    sizes = [int(s) for s in (args.sizes or ("3,8" if quick else "10,40,160")).split(",")]
    small_repeats = args.repeats or (1 if quick else 2)
    t_start = time.perf_counter()
    area = demo_area(size)
    CACHE_DIR.mkdir(parents=True, exist_ok=True)
    if args.prepare:
        record = prepare_stores(long_area(area), FLAT_SMALL, args.flat_size or 1000)
        _log(f"prepared in {time.perf_counter() - t_start:.0f} s: {record}")
        return 0
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
        pair = paired_samples(ing, base)  # each repeat ran the baseline, then the ingest
        ratio = pair.inverse().median
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
                **pair.ratio_fields(inverse=True),
                "ratio_def": "ingest rate / baseline rate, per round",
                "target": ">= 0.8",
                "met": ratio >= 0.8 and not failed,
                "caches": "baseline pass first in each round (scenes then in GDAL and page "
                "caches for the ingest); fresh data directory per ingest",
                "load_sensitive": "yes: single-threaded seconds-long passes; a round with 1 "
                "repeat has no spread",
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
    flat_size = args.flat_size if args.flat_size is not None else (4 if quick else 1000)
    flat: dict[str, Any] = {}
    flat_rows: list[dict[str, Any]] = []
    if flat_size:
        src = area if quick else long_area(area)
        try:
            fr = flat_paired(
                src,
                1 if quick else FLAT_SMALL,
                flat_size,
                2 if quick else FLAT_ROUNDS,
                1 if quick else FLAT_BATCH_WEEKS,
                work,
                cache=None if quick else CACHE_DIR,
            )
        except RuntimeError as exc:  # too few weeks for the rounds (a small sample)
            _log(f"paired flatness not measured: {exc}")
        else:
            flat_rows.append(flat_row(fr, judged=not quick))
            if fr.large_point[0] > max(p[0] for p in points):
                points.append(fr.large_point)
            flat = {
                "catalog": f"{src.sample.name}",
                "failed_partitions": fr.failed,
                "failed_checks": len(fr.failed),
                "failed_error_checks": fr.failed_error_checks,
                "blocks_without_data": fr.blocks_without_data,
            }
        _log(f"paired flatness done ({time.perf_counter() - t_start:.0f} s)")
    shutil.rmtree(work, ignore_errors=True)
    rows += flat_rows + flatness_rows(points, flat)
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
