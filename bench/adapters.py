"""Bench documents to report rows: the address bench's own rows in the common format.

The knn, query and ingest benches already write common rows (case, unit,
median and spread, baseline, ratio with its per-round spread, target, met);
the address bench writes its own, adapted here.
"""

from __future__ import annotations

from typing import Any

__all__ = ["bench_rows", "bench_title"]


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
        unit_n = r.get("unit_n", "points")
        rate = r.get("rate_per_s", 0)
        row = {
            "case": r["case"],
            "data": f"{r['n']:,} {unit_n}",
            "median": med,
            "unit": "ms",
            "spread_note": f"max-min {half:.3g} ms",
            "target": r.get("target", "(info)"),
            "met": r.get("met"),
            "rate": f"{rate / 1e6:.1f} M/s" if unit_n == "points" else f"{rate:,.0f} /s",
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


def bench_rows(name: str, doc: dict[str, Any]) -> list[dict[str, Any]]:
    """The common-format rows of one bench's JSON document (the address bench's are adapted)."""
    if name == "address":
        return _rows_address(doc)
    return list(doc.get("rows", []))


def bench_title(name: str, doc: dict[str, Any]) -> str:
    """The section title of one bench: its document's title, or a default per bench."""
    default = {
        "address": "Address algebra (cell64 encode/decode/format/parse)",
        "knn": "find_like k-NN scans vs FAISS",
    }
    return str(doc.get("title") or default.get(name, name))
