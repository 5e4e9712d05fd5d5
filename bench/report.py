"""The Markdown report of a harness run (``bench/RESULTS.md``): machine, targets, one table per bench."""

from __future__ import annotations

import json
import math
import re
from typing import Any

from bench.adapters import bench_rows, bench_title
from bench.common import machine
from bench.limits import limit_of

__all__ = ["TABLE_HEAD", "ratio_text", "render", "spread_rows"]


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


def _steal_text(run: dict[str, Any]) -> str:
    """``; CPU time stolen by the hypervisor ...`` for a run that recorded it, else ``""``."""
    steal = run.get("steal_s")
    if steal is None:
        return ""
    cpus = run.get("cpus") or 2
    share = 100 * steal / (cpus * run["seconds"]) if run.get("seconds") else 0.0
    return f"; CPU time stolen by the hypervisor {steal:.1f} s ({share:.1f} % of {cpus} CPUs)"


def _met(m: Any) -> str:
    if m is None:
        return ""
    return "**met**" if m else "**missed**"


def _cell(text: Any) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


TABLE_HEAD = [
    "| case | data | earthmem: median [p10–p90] | unit | baseline (same run) | baseline: median [p10–p90] "
    "| ratio: median [p10–p90] of rounds | target | met | rounds, caches | load-sensitive |",
    "|---|---|---|---|---|---|---|---|---|---|---|",
]


def ratio_text(r: dict[str, Any]) -> str:
    """``median [p10–p90]`` of a row's per-round ratios (``median`` alone when unpaired)."""
    if r.get("ratio") is None:
        return "—"
    s = _num(r["ratio"])
    lo, hi = r.get("ratio_p10"), r.get("ratio_p90")
    if lo is not None and hi is not None and (lo, hi) != (r["ratio"],) * 2:
        s += f" [{_num(lo)}–{_num(hi)}]"
    return s


def _pairing(r: dict[str, Any]) -> str:
    parts = []
    if r.get("rounds"):
        parts.append(f"paired, {r['rounds']} rounds")
    elif r.get("ratio") is not None:
        parts.append("unpaired")
    if r.get("caches"):
        parts.append(str(r["caches"]))
    return "; ".join(parts)


def _row_line(r: dict[str, Any]) -> str:
    ratio = ratio_text(r)
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
                _pairing(r),
                r.get("load_sensitive", ""),
            )
        )
        + " |"
    )


_UNIT_TARGET = re.compile(r"\d\s*(ms|s|kb|mb|mib|gb|gib|req/s|writes/s|/s|%)(?![a-z])")
"""A target stated in units (``p50 <= 2 ms``, ``>= 1500 req/s``, ``<= 256 MB``, ``>= 60%``)."""


def judged_figure(r: dict[str, Any]) -> tuple[str, float | None]:
    """The figure a row's target judges, and its name: ``ratio``, ``value`` or a rate.

    A target in units judges the row's value (its median; a rate target on a latency row its
    ``writes_per_s``); any other target judges the ratio when the row has one, else the value
    (a recall, an nDCG, a difference).
    """
    target = str(r.get("target") or "").lower()
    name = "ratio" if r.get("ratio") is not None else "value"
    if _UNIT_TARGET.search(target):
        name = "value"
        if "/s" in target and "/s" not in str(r.get("unit", "")) and "writes_per_s" in r:
            name = "writes_per_s"
    key = {"ratio": "ratio", "value": "median"}.get(name, name)
    v = r.get(key)
    return name, None if v is None or isinstance(v, bool) else float(v)


def spread_rows(runs: list[dict[str, dict[str, Any]]]) -> list[dict[str, Any]]:
    """Per row of the first run: its figure in every run, and min / median / max across runs.

    Rows are matched by bench, case and occurrence (the knn bench repeats its
    cases per table size). Only rows with a ratio or a judged target are listed.
    """
    from bench.paired import run_spread

    keyed: dict[tuple[str, str, int], list[dict[str, Any]]] = {}
    order: list[tuple[str, str, int]] = []
    for docs in runs:
        for name, doc in docs.items():
            try:
                rows = bench_rows(name, doc)
            except (KeyError, TypeError, ValueError, ZeroDivisionError):
                continue
            seen: dict[str, int] = {}
            for r in rows:
                case = str(r.get("case", ""))
                key = (name, case, seen.get(case, 0))
                seen[case] = key[2] + 1
                if key not in keyed:
                    keyed[key] = []
                    order.append(key)
                keyed[key].append(r)
    out = []
    for key in order:
        rs = keyed[key]
        first = rs[0]
        if first.get("ratio") is None and first.get("met") is None:
            continue
        figures = [judged_figure(r) for r in rs]
        values = [v for _, v in figures]
        out.append(
            {
                "bench": key[0],
                "case": key[1],
                "data": first.get("data", ""),
                "figure": figures[0][0],
                "values": values,
                "spread": run_spread(values),
                "target": first.get("target", ""),
                "judged": any(r.get("met") is not None for r in rs),
                "load_sensitive": first.get("load_sensitive", ""),
            }
        )
    return out


def _spread_section(runs: list[dict[str, dict[str, Any]]]) -> list[str]:
    lines = [
        f"## Spread of {len(runs)} runs",
        "",
        f"The figure each row's target judges, in each of the {len(runs)} runs of this invocation"
        " (`--repeat`), and min / median / max across runs: the value where the target is stated"
        " in units (ms, s, MB, req/s, writes/s, %), else the ratio (else the value: a recall, an"
        " nDCG). The goal for target rows is every run within ±20 % of the median run.",
        "",
        "| bench | case | data | figure | per run | min | median | max | within ±20 % | target"
        " | load-sensitive |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for s in spread_rows(runs):
        sp = s["spread"] or {}
        per = ", ".join(_num(v) for v in s["values"])
        within = "" if not sp else ("yes" if sp["within_20pct"] else "**no**")
        lines.append(
            "| "
            + " | ".join(
                _cell(x)
                for x in (
                    s["bench"],
                    s["case"],
                    s["data"],
                    s["figure"],
                    per,
                    _num(sp.get("min")),
                    _num(sp.get("median")),
                    _num(sp.get("max")),
                    within,
                    s["target"],
                    s["load_sensitive"],
                )
            )
            + " |"
        )
    lines.append("")
    return lines


def render(
    docs: dict[str, dict[str, Any]],
    mode: str,
    started: str,
    seconds: float,
    runs: list[dict[str, dict[str, Any]]] | None = None,
) -> str:
    """The Markdown report of one harness run (``docs``: the last of ``runs`` when repeated)."""
    mach = machine()
    lines = [
        "# earthmem benchmark results",
        "",
        f"Generated by `python -m bench.run{'' if mode == 'default' else ' --' + mode}` at {started} "
        f"({mode} run, {seconds / 60:.1f} min wall"
        + (
            f", {len(runs)} runs; each bench's tables are from the last run that ran it"
            if runs and len(runs) > 1
            else ""
        )
        + "). Every baseline was measured in the same run, on the same machine, right beside the "
        "earthmem figure it is compared with. Paired rows alternate earthmem and its baseline in "
        "rounds (A, B, A, B, ...: same process, same input) and report the median of the "
        "per-round ratios with its p10–p90; `rounds, caches` says how many rounds and how caches "
        "were treated. Other spreads are p10–p90 of the repeats; `n` = repeats. A share of a "
        "physical limit above 100 % is marked METRIC DEFECT: it is never a result.",
        "",
        "Hand-written notes of single benches run between generated reports (before/after "
        "measurements of a change, diagnostics) are kept in `bench/HISTORY.md`.",
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
        sec = [f"## {bench_title(name, doc)}", ""]
        sec.append(
            f"`{run['command']}`: {run['status']}, {run['seconds']:.0f} s; load average "
            f"before {run['load_before']}, after {run['load_after']}{_steal_text(run)};"
            f" log `{run['log']}`."
        )
        if doc.get("data"):
            sec.append(f"Data: `{json.dumps(doc['data'], default=str)}`")
        sec.append("")
        try:
            rows = bench_rows(name, doc)
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
            measured += f"; ratio {ratio_text(r)}"
        lines.append(
            f"| {name} | {_cell(r['case'])} | {_cell(measured)} | {_cell(r['target'])} | {_met(r['met'])} |"
        )
    lines += _limits_section(summary)
    failed = [n for n, d in docs.items() if d["_run"]["status"] != "ok"]
    if failed:
        lines += ["", f"Benches that did not finish: {', '.join(failed)} (see their sections)."]
    lines.append("")
    if runs and len(runs) > 1:
        lines += _spread_section(runs)
    return "\n".join(lines + sections)


def _limits_section(summary: list[tuple[str, dict[str, Any]]]) -> list[str]:
    """What limits each missed target row, as measured (:mod:`bench.limits`)."""
    missed = [(name, r) for name, r in summary if r.get("met") is False]
    if not missed:
        return []
    out = ["", "### What limits the missed rows", ""]
    groups: dict[str, list[str]] = {}  # rows with the same limit are listed together
    for name, r in missed:
        text = limit_of(name, str(r["case"])) or "no measured limit recorded yet"
        groups.setdefault(text, []).append(f"{name} / {r['case']}")
    for text, rows in groups.items():
        out.append(f"- {'; '.join(rows)}: {text}")
    return out


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
    "limit_GBps",
    "bytes_read",
    "rounds_over_100pct",
    "metric_defect",
    "marginal_s",
    "all_recalls",
    "rate",
    "spread_note",
    "recall_at_10",
    "hidden_shown",
    "fts_ndcg",
    "no_vector_ndcg",
)


def _round(x: Any) -> Any:
    return str(x)
