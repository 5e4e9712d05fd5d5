"""The bench harness: run every benchmark as a subprocess, merge, write ``bench/RESULTS.md``.

    python -m bench.run [--quick] [--only address,knn,queries,ingest] [--out PATH]

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
so it never overwrites the real results.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import math
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import CACHE_DIR, REPO, machine

__all__ = ["BENCHES", "Bench", "main", "render"]

RESULTS = Path(__file__).resolve().parent / "RESULTS.md"
"""Where the default run writes its report."""
QUICK_RESULTS = CACHE_DIR / "RESULTS-quick.md"
"""Where ``--quick`` writes its report by default."""


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


BENCHES: tuple[Bench, ...] = (
    Bench("address", "bench.bench_address", timeout_s=300),
    Bench("knn", "bench.bench_knn", timeout_s=1200),
    Bench("queries", "bench.bench_queries", timeout_s=900),
    Bench("ingest", "bench.bench_ingest", timeout_s=900),
)
"""Every bench, in run order."""


def _log(msg: str) -> None:
    print(f"[bench.run] {msg}", file=sys.stderr, flush=True)


def run_one(bench: Bench, quick: bool, workdir: Path) -> dict[str, Any]:
    """Run one bench script; return its JSON document plus run metadata."""
    out = workdir / f"{bench.name}.json"
    log = workdir / "logs" / f"{bench.name}.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    if out.exists():
        out.unlink()
    cmd = [sys.executable, "-m", bench.module, "--json", str(out)]
    cmd += list(bench.quick_args if quick else bench.args)
    timeout = bench.timeout_s / (5 if quick else 1)
    load_before = os.getloadavg()
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
    }
    if status != "ok":
        tail = log.read_text(errors="replace").splitlines()[-15:]
        doc["_run"]["log_tail"] = tail
    return doc


# ---------------------------------------------------------------------- rendering helpers


def _num(x: Any, digits: int = 3) -> str:
    """Compact number: 3 significant digits, thousands separators for big values."""
    if x is None:
        return "—"
    if isinstance(x, bool):
        return str(x)
    try:
        v = float(x)
    except (TypeError, ValueError):
        return str(x)
    if math.isnan(v):
        return "nan"
    if v == 0:
        return "0"
    if abs(v) >= 1000:
        return f"{v:,.0f}"
    if abs(v) < 1e-3:
        return f"{v:.2e}"
    return f"{v:.{digits}g}"


def _spread(d: dict[str, Any] | None) -> str:
    """``median [p10–p90]`` (or ``median`` alone)."""
    if not d or d.get("median") is None:
        return "—"
    s = _num(d["median"])
    lo, hi = d.get("p10", d.get("min")), d.get("p90", d.get("max"))
    if lo is not None and hi is not None and d.get("n", 2) > 1 and (lo, hi) != (d["median"],) * 2:
        s += f" [{_num(lo)}–{_num(hi)}]"
    if d.get("n"):
        s += f" (n={d['n']})"
    return s


def _met(m: Any) -> str:
    if m is None:
        return ""
    return "**met**" if m else "**missed**"


def _cell(text: Any) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


TABLE_HEAD = [
    "| case | data | earthmem: median [p10–p90] | unit | baseline (same run) | baseline: median [p10–p90] | ratio | target | met |",
    "|---|---|---|---|---|---|---|---|---|",
]


def _row_line(r: dict[str, Any]) -> str:
    ratio = _num(r.get("ratio"))
    if r.get("ratio_def") and r.get("ratio") is not None:
        ratio += f" ({r['ratio_def']})"
    return (
        "| "
        + " | ".join(
            _cell(x)
            for x in (
                r.get("case", ""),
                r.get("data", ""),
                _spread(r),
                r.get("unit", ""),
                r.get("baseline_case") or "—",
                _spread(r.get("baseline")),
                ratio,
                r.get("target", ""),
                _met(r.get("met")),
            )
        )
        + " |"
    )


# ---------------------------------------------------------------------- adapters


def _rows_address(doc: dict[str, Any]) -> list[dict[str, Any]]:
    """bench_address rows (median_s, spread_s = max - min) -> common rows."""
    rows = doc.get("rows", [])
    base = next((r for r in rows if "baseline" in r.get("case", "")), None)
    out = []
    for r in rows:
        if r is base:
            continue
        med = r["median_s"] * 1e3
        half = r.get("spread_s", 0.0) * 1e3
        row = {
            "case": r["case"],
            "data": f"{r['n']:,} points",
            "median": med,
            "unit": "ms",
            "spread_note": f"max-min {half:.3g} ms",
            "target": "(info)",
            "met": None,
            "rate": f"{r.get('rate_per_s', 0) / 1e6:.1f} M/s",
        }
        if base is not None and "ratio_vs_baseline" in r:
            row.update(
                baseline_case=base["case"],
                baseline={"median": base["median_s"] * 1e3},
                ratio=base["median_s"] / r["median_s"],
                ratio_def="speed-up vs baseline",
            )
        out.append(row)
    return out


_KNN_TARGET_N = 10_000_000


def _rows_knn(doc: dict[str, Any]) -> list[dict[str, Any]]:
    """bench_knn rows (per size: cases + a summary) -> common rows with the issue's targets."""
    rows = doc.get("rows", [])
    bw = doc.get("bandwidth", {})
    out: list[dict[str, Any]] = []
    sizes = sorted({r["n"] for r in rows})

    def timing(r: dict[str, Any]) -> dict[str, Any]:
        return {"median": r["median_ms"], "p10": r.get("min_ms"), "p90": r.get("max_ms")}

    for n in sizes:
        at = [r for r in rows if r["n"] == n]
        by = {r["case"]: r for r in at}
        summary: dict[str, Any] = next((r for r in at if r["case"] == "summary"), {})
        judged = n == _KNN_TARGET_N
        data = f"{n:,} cells x 128-D int8, k=10"
        flat = next((r for c, r in by.items() if "FAISS IndexFlatIP" in c), None)
        binary = next((r for c, r in by.items() if "FAISS IndexBinaryFlat" in c), None)
        cos = next((r for c, r in by.items() if c.startswith("cosine (earthmem")), None)

        def tgt(text: str, judged: bool = judged) -> str:
            return text if judged else f"(info; target {text} at 10^7)"

        if cos and flat:
            ratio = cos["median_ms"] / flat["median_ms"]
            out.append(
                {
                    "case": f"find_like cosine: {cos['case']}",
                    "data": data,
                    **timing(cos),
                    "unit": "ms",
                    "baseline_case": flat["case"],
                    "baseline": timing(flat),
                    "ratio": ratio,
                    "ratio_def": "earthmem / FAISS",
                    "target": tgt("<= 0.15"),
                    "met": (ratio <= 0.15) if judged else None,
                }
            )
            pct = cos.get("pct_bw")
            out.append(
                {
                    "case": "find_like cosine: share of the read-bandwidth limit",
                    "data": data,
                    "median": pct,
                    "unit": "% of read bw",
                    "baseline_case": f"measured read bandwidth {bw.get('numba_read_GBps', float('nan')):.1f} GB/s "
                    f"(numpy sum {bw.get('numpy_sum_GBps', float('nan')):.1f} GB/s)",
                    "baseline": {"median": bw.get("numba_read_GBps")},
                    "ratio": None,
                    "target": tgt(">= 60%"),
                    "met": (pct is not None and pct >= 60) if judged else None,
                    "scan_GBps": cos.get("GBps"),
                    "bytes_read": cos.get("bytes_read"),
                    "rows_read_whole": cos.get("rows_read_whole"),
                }
            )
        unpruned = next((r for c, r in by.items() if c.startswith("cosine full scan")), None)
        inline = next((r for c, r in by.items() if c.startswith("cosine inline")), None)
        for info, note, extra in (
            (unpruned, "(info: every byte of every row read)", "pct_bw"),
            (inline, "(info)", None),
        ):
            if info and flat:
                out.append(
                    {
                        "case": f"find_like cosine: {info['case']}",
                        "data": data,
                        **timing(info),
                        "unit": "ms",
                        "baseline_case": flat["case"],
                        "baseline": timing(flat),
                        "ratio": info["median_ms"] / flat["median_ms"],
                        "ratio_def": "earthmem / FAISS",
                        "target": note,
                        "met": None,
                        **({"pct_of_read_bw": info.get(extra)} if extra else {}),
                    }
                )
        ham = next((r for c, r in by.items() if c.startswith("hamming (earthmem")), None)
        if ham and binary:
            ratio = ham["median_ms"] / binary["median_ms"]
            out.append(
                {
                    "case": f"find_like hamming: {ham['case']}",
                    "data": data,
                    **timing(ham),
                    "unit": "ms",
                    "baseline_case": binary["case"],
                    "baseline": timing(binary),
                    "ratio": ratio,
                    "ratio_def": "earthmem / FAISS",
                    "target": tgt("<= 0.6"),
                    "met": (ratio <= 0.6) if judged else None,
                }
            )
        multiple = summary.get("chosen_rerank_multiple")
        rr = next(
            (
                r
                for c, r in by.items()
                if c.startswith(f"hamming_then_rerank x{multiple} (earthmem")
            ),
            None,
        )
        recall = (summary.get("recall_at_10") or {}).get(f"rerank x{multiple}")
        if rr and cos:
            ratio = rr["median_ms"] / cos["median_ms"]
            ok = ratio <= 0.2 and recall is not None and recall >= 0.95
            out.append(
                {
                    "case": f"find_like hamming_then_rerank: {rr['case']}",
                    "data": data,
                    **timing(rr),
                    "unit": "ms",
                    "baseline_case": "exact cosine (earthmem, same run)",
                    "baseline": timing(cos),
                    "ratio": ratio,
                    "ratio_def": "rerank / exact cosine",
                    "target": tgt("<= 0.2 (5x less) and recall@10 >= 0.95"),
                    "met": ok if judged else None,
                    "recall_at_10": recall,
                }
            )
            if unpruned:
                out.append(
                    {
                        "case": f"find_like {rr['case']} vs the unpruned exact scan",
                        "data": data,
                        **timing(rr),
                        "unit": "ms",
                        "baseline_case": unpruned["case"],
                        "baseline": timing(unpruned),
                        "ratio": rr["median_ms"] / unpruned["median_ms"],
                        "ratio_def": "rerank / exact cosine reading every byte",
                        "target": "(info)",
                        "met": None,
                    }
                )
            out.append(
                {
                    "case": f"find_like hamming_then_rerank x{multiple}: recall@10 vs exact cosine",
                    "data": f"{data}, {summary.get('recall_queries', '?')} queries",
                    "median": recall,
                    "unit": "recall",
                    "baseline_case": "exact cosine top-10",
                    "baseline": {"median": 1.0},
                    "ratio": None,
                    "target": tgt(">= 0.95"),
                    "met": (recall is not None and recall >= 0.95) if judged else None,
                    "all_recalls": summary.get("recall_at_10"),
                }
            )
        for c, r in by.items():
            if c.startswith("hamming_then_rerank") and r is not rr:
                out.append(
                    {
                        "case": f"find_like {c}",
                        "data": data,
                        **timing(r),
                        "unit": "ms",
                        "baseline_case": "exact cosine (earthmem, same run)",
                        "baseline": timing(cos) if cos else None,
                        "ratio": r["median_ms"] / cos["median_ms"] if cos else None,
                        "ratio_def": "rerank / exact cosine",
                        "target": "(info)",
                        "met": None,
                    }
                )
    return out


def _rows(name: str, doc: dict[str, Any]) -> list[dict[str, Any]]:
    if name == "address":
        return _rows_address(doc)
    if name == "knn":
        return _rows_knn(doc)
    return list(doc.get("rows", []))


def _title(name: str, doc: dict[str, Any]) -> str:
    default = {
        "address": "Address algebra (cell64 encode/decode/format/parse)",
        "knn": "find_like k-NN scans vs FAISS",
    }
    return str(doc.get("title") or default.get(name, name))


def render(docs: dict[str, dict[str, Any]], mode: str, started: str, seconds: float) -> str:
    """The Markdown report of one harness run."""
    mach = machine()
    lines = [
        "# earthmem benchmark results",
        "",
        f"Generated by `python -m bench.run{' --quick' if mode == 'quick' else ''}` at {started} "
        f"({mode} run, {seconds / 60:.1f} min wall). Every baseline was measured in the same run, "
        "on the same machine, right beside the earthmem figure it is compared with. Spreads are "
        "p10–p90 of the repeats (min–max where a bench reports only those); `n` = repeats.",
        "",
        "## Machine",
        "",
        "| item | value |",
        "|---|---|",
        f"| CPU | {mach['cpu']} |",
        f"| cores (usable) | {mach['cores']} ({mach['affinity_cores']}) |",
        f"| memory | {mach['memory_GiB']} GiB |",
        f"| Python / kernel | {mach['python']} / {mach['kernel']} |",
        f"| numpy | {mach['numpy']} |",
        f"| numpy BLAS | {mach.get('numpy_blas')} (SIMD: {mach.get('numpy_simd', '?')}) |",
        f"| threadpools (threadpoolctl) | {_cell(mach.get('threadpools'))} |",
        f"| thread environment | {_cell(mach.get('thread_env'))} |",
        f"| load average (1, 5, 15 min) at the end | {mach['load_average']} |",
        "",
        "The machine is shared (other jobs may run): the load average before and after each bench "
        "is listed with its table. A 1-minute load well above the core count means the figures "
        "are pessimistic.",
        "",
    ]
    extra = {
        name: doc["machine"]
        for name, doc in docs.items()
        if isinstance(doc.get("machine"), dict) and name == "knn"
    }
    for name, m in extra.items():
        keys = ("threads", "numba", "numba_threading_layer", "faiss")
        lines.append(
            f"{name} bench libraries: " + ", ".join(f"{k} {m.get(k)}" for k in keys if k in m)
        )
        lines.append("")
    summary: list[tuple[str, dict[str, Any]]] = []
    sections: list[str] = []
    for name, doc in docs.items():
        run = doc["_run"]
        sec = [f"## {_title(name, doc)}", ""]
        sec.append(
            f"`{run['command']}`: {run['status']}, {run['seconds']:.0f} s; load average "
            f"before {run['load_before']}, after {run['load_after']}; log `{run['log']}`."
        )
        if doc.get("data"):
            sec.append(f"Data: `{json.dumps(doc['data'], default=str)}`")
        sec.append("")
        try:
            rows = _rows(name, doc)
        except (KeyError, TypeError, ValueError, ZeroDivisionError) as exc:
            rows = []
            sec.append(
                f"(could not read this bench's rows: {type(exc).__name__}: {exc}; raw JSON below)"
            )
            sec += ["```json", json.dumps(doc.get("rows"), indent=1, default=str)[:20000], "```"]
        if rows:
            sec += TABLE_HEAD
            for r in rows:
                sec.append(_row_line(r))
                if r.get("met") is not None:
                    summary.append((name, r))
            details = [
                (r["case"], {k: v for k, v in r.items() if k in _DETAIL_KEYS})
                for r in rows
                if any(k in r for k in _DETAIL_KEYS)
            ]
            if details:
                sec += ["", "Details:", ""]
                for case, d in details:
                    sec.append(f"- {case}: `{json.dumps(d, default=_round)}`")
        if run["status"] != "ok":
            sec += ["", "Log tail:", "", "```", *run.get("log_tail", []), "```"]
        for note in doc.get("notes", []):
            sec.append(f"\n> {note}")
        sec.append("")
        sections += sec
    lines += [
        "## Targets",
        "",
        "| bench | case | measured | target | met |",
        "|---|---|---|---|---|",
    ]
    for name, r in summary:
        measured = f"{_num(r.get('median'))} {r.get('unit', '')}"
        if r.get("ratio") is not None:
            measured += f"; ratio {_num(r['ratio'])}"
        lines.append(
            f"| {name} | {_cell(r['case'])} | {_cell(measured)} | {_cell(r['target'])} | {_met(r['met'])} |"
        )
    failed = [n for n, d in docs.items() if d["_run"]["status"] != "ok"]
    if failed:
        lines += ["", f"Benches that did not finish: {', '.join(failed)} (see their sections)."]
    lines.append("")
    return "\n".join(lines + sections)


_DETAIL_KEYS = (
    "latency_ms",
    "baseline_latency_ms",
    "errors",
    "scenes_per_s",
    "cells_per_s",
    "baseline_scenes_per_s",
    "baseline_cells_per_s",
    "per_partition_ms",
    "dagster_overhead_per_partition_ms",
    "failed_partitions",
    "idle_rss_mib",
    "peak_anon_mib",
    "peak_file_mib",
    "http_median_ms",
    "scan_GBps",
    "all_recalls",
    "rate",
    "spread_note",
)


def _round(x: Any) -> Any:
    return str(x)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--quick", action="store_true", help="smoke check (tiny sample, small tables)")
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
    args = ap.parse_args(argv)
    names = [b.name for b in BENCHES]
    only = args.only.split(",") if args.only else names
    unknown = set(only) - set(names)
    if unknown:
        ap.error(f"unknown bench(es) {sorted(unknown)}; valid: {names}")
    mode = "quick" if args.quick else "default"
    out = Path(args.out) if args.out else (QUICK_RESULTS if args.quick else RESULTS)
    workdir = (
        Path(args.workdir) if args.workdir else CACHE_DIR / ("run-quick" if args.quick else "run")
    )
    workdir.mkdir(parents=True, exist_ok=True)
    started = dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC")
    t0 = time.perf_counter()
    docs: dict[str, dict[str, Any]] = {}
    for b in BENCHES:
        if b.name not in only:
            continue
        _log(f"{b.name}: python -m {b.module} ... (log in {workdir / 'logs' / (b.name + '.log')})")
        docs[b.name] = run_one(b, args.quick, workdir)
        _log(
            f"{b.name}: {docs[b.name]['_run']['status']} in {docs[b.name]['_run']['seconds']:.0f} s"
        )
    text = render(docs, mode, started, time.perf_counter() - t0)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text)
    (workdir / "merged.json").write_text(json.dumps(docs, indent=1, default=str))
    _log(f"wrote {out} ({time.perf_counter() - t0:.0f} s)")
    return 0 if all(d["_run"]["status"] == "ok" for d in docs.values()) else 1


if __name__ == "__main__":
    raise SystemExit(main())
