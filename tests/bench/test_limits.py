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


def test_the_spread_follows_the_figure_the_target_judges() -> None:
    from bench.report import judged_figure, spread_rows

    def row(target: str, median: float, ratio: float | None, **extra: Any) -> dict[str, Any]:
        return {
            "case": "c",
            "unit": "ms",
            "median": median,
            "ratio": ratio,
            "target": target,
            "met": True,
            **extra,
        }

    assert judged_figure(row("p50 <= 1 ms", 0.3, 0.001)) == ("value", 0.3)
    assert judged_figure(row(">= 1500 req/s", 1600.0, 0.1)) == ("value", 1600.0)
    assert judged_figure(row("<= 256 MB", 170.0, None)) == ("value", 170.0)
    assert judged_figure(row(">= 60%", 84.0, None)) == ("value", 84.0)
    assert judged_figure(row(">= 100x", 20.0, 130.0)) == ("ratio", 130.0)
    assert judged_figure(row("<= 0.15", 60.0, 0.09)) == ("ratio", 0.09)
    assert judged_figure(row(">= 0.95", 0.97, None)) == ("value", 0.97)
    rate = row(">= 500 writes/s", 18.0, 35.0, writes_per_s=431.0)
    assert judged_figure(rate) == ("writes_per_s", 431.0)
    # a value target whose ratio moves 2x between runs but whose value holds: within ±20 %
    runs = [
        {"queries": _doc([row("p50 <= 1 ms", 0.28 + d, r)])}
        for d, r in ((0.0, 0.0008), (0.01, 0.0016), (0.005, 0.0012))
    ]
    (sp,) = spread_rows(runs)
    assert sp["figure"] == "value"
    assert sp["spread"]["within_20pct"] is True


def test_rows_with_one_limit_are_listed_together() -> None:
    rows = [_row("Dagster ingest, 10 scenes", False), _row("Dagster ingest, 40 scenes", False)]
    text = render({"ingest": _doc(rows)}, "default", "2026-01-01 00:00 UTC", 60.0)
    section = text.split("### What limits the missed rows", 1)[1].split("\n## ", 1)[0]
    (line,) = [x for x in section.splitlines() if x.startswith("- ")]
    assert line.startswith(
        "- ingest / Dagster ingest, 10 scenes; ingest / Dagster ingest, 40 scenes: a commit costs"
    )
