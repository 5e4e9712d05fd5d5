"""RESULTS.md names what limits each missed target row (bench/limits.py), and says when nothing is recorded."""

from __future__ import annotations

from typing import Any

from bench.limits import LIMITS, limit_of
from bench.report import render


def _row(case: str, met: bool) -> dict[str, Any]:
    return {"case": case, "unit": "ms", "median": 10.0, "target": ">= 100x", "met": met}


def _doc(rows: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "rows": rows,
        "_run": {
            "status": "ok",
            "seconds": 1.0,
            "command": "-m bench.bench_queries",
            "log": "x.log",
            "load_before": [0.1, 0.1, 0.1],
            "load_after": [0.1, 0.1, 0.1],
        },
    }


def test_each_missed_row_gets_its_measured_limit_or_says_none_is_recorded() -> None:
    cold = "area_over_time ~1 km^2 x 1 year, cold context"
    docs = {"queries": _doc([_row(cold, False), _row("a new row", False), _row("area warm", True)])}
    text = render(docs, "default", "2026-01-01 00:00 UTC", 60.0)
    section = text.split("### What limits the missed rows", 1)[1].split("\n## ", 1)[0]
    lines = [x for x in section.splitlines() if x.startswith("- ")]
    assert len(lines) == 2  # the met row is not listed
    assert lines[0].startswith(f"- queries / {cold}: the ~1 km² box (105 x 114 cells)")
    assert lines[1] == "- queries / a new row: no measured limit recorded yet"


def test_no_section_when_every_target_is_met() -> None:
    docs = {"queries": _doc([_row("area warm", True)])}
    assert "What limits" not in render(docs, "default", "2026-01-01 00:00 UTC", 60.0)


def test_entries_match_by_bench_and_case_prefix() -> None:
    for bench, prefix, text in LIMITS:
        assert limit_of(bench, prefix + " anything") == text
        assert limit_of("no such bench", prefix) is None
