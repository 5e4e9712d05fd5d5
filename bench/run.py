"""The bench harness: run every benchmark as a subprocess, merge, write ``bench/RESULTS.md``.

    python -m bench.run [--quick | --large] [--only address,knn,queries,ingest,memory,recall,scale]
                        [--out PATH] [--repeat N] [--workdir DIR]
    python -m bench.run --from-runs DIR1/merged.json DIR2/merged.json ... [--out PATH]

Each bench script runs in its own process (``python -m bench.<script> --json
FILE [--quick]``) so that one bench's memory, threads and JIT caches do not
leak into the next, and a failing bench is reported without stopping the
others. Its stdout/stderr go to ``bench/.cache/logs/<name>.log``. The merged
report has, per benchmark, a table with the median and spread of repeated
runs, the baseline measured in the same run, the ratio, the target and
whether it is met, plus the data size; and once for the run the machine
(cores, memory, CPU model, numpy and its BLAS build) and the load average
before and after each bench (the machine may be shared).

The default run targets < 15 minutes on 2 cores (the first run also builds and
ingests the demo area and generates the 10^7-row vector table, cached under
``bench/.cache``). ``--quick`` is a smoke check on the tiny sample and small
tables; it writes ``bench/.cache/RESULTS-quick.md`` unless ``--out`` is given,
so it never overwrites the real results. ``--large`` runs only the benches
with a large mode (recall at 10^6 items; ``make bench-large``) and writes
``bench/RESULTS-large.md``. ``--repeat N`` runs the benches N
times in turn and adds the spread of every ratio row across the runs (min /
median / max, and whether every run is within ±20 % of the median run); three
default runs take about three times as long as one. ``scale`` (local disk vs a loopback S3
server, 1 vs 2 Dask workers: whole ingests of the demo, ~8 minutes) runs only when named
(``--only scale``); ``--from-runs`` takes each bench's tables from the last run that ran it, so
a run of ``--only scale`` beside the default runs puts its rows in the same report.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import CACHE_DIR, REPO, steal_during, steal_seconds
from bench.report import render

__all__ = ["BENCHES", "Bench", "main"]

RESULTS = Path(__file__).resolve().parent / "RESULTS.md"
"""Where the default run writes its report."""
QUICK_RESULTS = CACHE_DIR / "RESULTS-quick.md"
"""Where ``--quick`` writes its report by default."""
LARGE_RESULTS = RESULTS.with_name("RESULTS-large.md")
"""Where ``--large`` writes its report by default."""
LARGE_TIMEOUT_S = 7200.0
"""Kill a large-mode bench after this long (its first run builds a 10^6-item store)."""


@dataclass(frozen=True)
class Bench:
    """One bench script."""

    name: str
    """Short name (``--only``)."""
    module: str
    """Module run with ``python -m``."""
    args: tuple[str, ...] = ()
    """Extra arguments of the default run."""
    quick_args: tuple[str, ...] = ("--quick",)
    """Arguments of the quick run."""
    timeout_s: float = 900.0
    """Kill the bench after this long (default run)."""
    large_args: tuple[str, ...] | None = None
    """Arguments of the ``--large`` run (None: the bench has no large mode)."""
    default: bool = True
    """Part of a run without ``--only`` (False: only when named, e.g. ``--only scale``)."""


BENCHES: tuple[Bench, ...] = (
    Bench("address", "bench.bench_address", timeout_s=300),
    Bench("knn", "bench.bench_knn", timeout_s=1200),
    Bench("queries", "bench.bench_queries", timeout_s=1500),
    Bench("ingest", "bench.bench_ingest", timeout_s=1800),
    Bench("memory", "bench.bench_memory", timeout_s=900),
    Bench("recall", "bench.bench_recall", timeout_s=900, large_args=("--large",)),
    # whole ingests of the demo: ~8 minutes, past the default run's ~15-minute budget
    Bench("scale", "bench.bench_scale", timeout_s=2400, default=False),
)
"""Every bench, in run order (``scale`` only when named)."""


def _log(msg: str) -> None:
    print(f"[bench.run] {msg}", file=sys.stderr, flush=True)


def run_one(bench: Bench, quick: bool, workdir: Path, large: bool = False) -> dict[str, Any]:
    """Run one bench script; return its JSON document plus run metadata."""
    out = workdir / f"{bench.name}.json"
    log = workdir / "logs" / f"{bench.name}.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    if out.exists():
        out.unlink()
    cmd = [sys.executable, "-m", bench.module, "--json", str(out)]
    if large:
        cmd += list(bench.large_args or ())
        timeout = LARGE_TIMEOUT_S
    else:
        cmd += list(bench.quick_args if quick else bench.args)
        timeout = bench.timeout_s / (3 if quick else 1)
    load_before = os.getloadavg()
    steal_before = steal_seconds()
    t0 = time.perf_counter()
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    status = "ok"
    with log.open("wb") as f:
        try:
            rc = subprocess.run(
                cmd, cwd=REPO, env=env, stdout=f, stderr=subprocess.STDOUT, timeout=timeout
            ).returncode
            if rc != 0:
                status = f"exit status {rc}"
        except subprocess.TimeoutExpired:
            status = f"timed out after {timeout:.0f} s"
    wall = time.perf_counter() - t0
    doc: dict[str, Any] = {}
    if out.exists():
        try:
            doc = json.loads(out.read_text())
        except json.JSONDecodeError as exc:
            status = f"unreadable JSON: {exc}"
    elif status == "ok":
        status = "no JSON written"
    doc["_run"] = {
        "status": status,
        "seconds": wall,
        "command": " ".join(cmd[1:]),
        "log": str(log.relative_to(REPO)) if log.is_relative_to(REPO) else str(log),
        "load_before": [round(x, 2) for x in load_before],
        "load_after": [round(x, 2) for x in os.getloadavg()],
        "steal_s": steal_during(steal_before),
        "cpus": os.cpu_count(),
    }
    if status != "ok":
        tail = log.read_text(errors="replace").splitlines()[-15:]
        doc["_run"]["log_tail"] = tail
    return doc


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    size = ap.add_mutually_exclusive_group()
    size.add_argument(
        "--quick", action="store_true", help="smoke check (tiny sample, small tables)"
    )
    size.add_argument(
        "--large", action="store_true", help="only the benches' large modes (recall at 10^6)"
    )
    ap.add_argument(
        "--only",
        default=None,
        help="comma-separated bench names: " + ",".join(b.name for b in BENCHES),
    )
    ap.add_argument(
        "--out",
        default=None,
        help="report path (default bench/RESULTS.md; quick: bench/.cache/RESULTS-quick.md)",
    )
    ap.add_argument(
        "--workdir", default=None, help="where JSON and logs go (default bench/.cache/run[-quick])"
    )
    ap.add_argument(
        "--repeat",
        type=int,
        default=1,
        help="run the selected benches N times in turn and report the spread of every ratio "
        "row across the runs (min / median / max); the tables show the last run that ran each bench",
    )
    ap.add_argument(
        "--from-runs",
        nargs="+",
        default=None,
        metavar="MERGED_JSON",
        help="write the report from earlier runs' merged.json files (in run order; the spread of "
        "runs when more than one) instead of running anything",
    )
    args = ap.parse_args(argv)
    if args.from_runs:
        return _report_from_runs([Path(p) for p in args.from_runs], args.out)
    names = [b.name for b in BENCHES]
    if args.large:
        names = [b.name for b in BENCHES if b.large_args is not None]
    only = (
        args.only.split(",")
        if args.only
        else [b.name for b in BENCHES if b.default and b.name in names]
    )
    unknown = set(only) - set(names)
    if unknown:
        ap.error(f"unknown bench(es) {sorted(unknown)}; valid: {names}")
    mode = "quick" if args.quick else "large" if args.large else "default"
    default_out = {"quick": QUICK_RESULTS, "large": LARGE_RESULTS, "default": RESULTS}[mode]
    out = Path(args.out) if args.out else default_out
    workdir = (
        Path(args.workdir)
        if args.workdir
        else CACHE_DIR / ("run" if mode == "default" else f"run-{mode}")
    )
    workdir.mkdir(parents=True, exist_ok=True)
    if args.repeat < 1:
        ap.error("--repeat must be >= 1")
    started = dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC")
    t0 = time.perf_counter()
    runs: list[dict[str, dict[str, Any]]] = []
    for rep in range(args.repeat):
        wd = workdir if args.repeat == 1 else workdir / f"rep{rep + 1}"
        wd.mkdir(parents=True, exist_ok=True)
        docs: dict[str, dict[str, Any]] = {}
        for b in BENCHES:
            if b.name not in only:
                continue
            _log(
                f"run {rep + 1}/{args.repeat} {b.name}: python -m {b.module} ... "
                f"(log in {wd / 'logs' / (b.name + '.log')})"
            )
            docs[b.name] = run_one(b, args.quick, wd, large=args.large)
            _log(
                f"{b.name}: {docs[b.name]['_run']['status']} in "
                f"{docs[b.name]['_run']['seconds']:.0f} s"
            )
        runs.append(docs)
    docs = runs[-1]
    text = render(docs, mode, started, time.perf_counter() - t0, runs=runs)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text)
    (workdir / "merged.json").write_text(json.dumps(docs, indent=1, default=str))
    if len(runs) > 1:
        (workdir / "runs.json").write_text(json.dumps(runs, indent=1, default=str))
    _log(f"wrote {out} ({time.perf_counter() - t0:.0f} s)")
    return 0 if all(d["_run"]["status"] == "ok" for r in runs for d in r.values()) else 1


def _report_from_runs(paths: list[Path], out_arg: str | None) -> int:
    """Render one report from runs made separately (``--workdir`` each): a run that was cut
    short still leaves the others' results, and the spread needs no single long invocation."""
    runs = [json.loads(p.read_text()) for p in paths]
    started = min(
        dt.datetime.fromtimestamp(
            p.stat().st_mtime - sum(d["_run"]["seconds"] for d in r.values()), dt.UTC
        )
        for p, r in zip(paths, runs, strict=True)
    ).strftime("%Y-%m-%d %H:%M UTC")
    seconds = sum(d["_run"]["seconds"] for r in runs for d in r.values())
    out = Path(out_arg) if out_arg else RESULTS
    latest: dict[str, Any] = {}
    for run in runs:  # each bench's tables from the last run that has it
        latest.update(run)
    text = render(latest, "default", started, seconds, runs=runs if len(runs) > 1 else None)
    out.write_text(text)
    _log(f"wrote {out} from {len(runs)} run(s)")
    return 0 if all(d["_run"]["status"] == "ok" for r in runs for d in r.values()) else 1


if __name__ == "__main__":
    raise SystemExit(main())
