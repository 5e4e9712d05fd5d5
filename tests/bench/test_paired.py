"""The pure parts of the bench instrument: per-round ratios, the 100 % cap, the spread of runs."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from bench.bench_knn import SizeResult, size_rows
from bench.ingest.flat import FlatRun, flat_row
from bench.paired import (
    paired,
    paired_calls,
    paired_samples,
    ratio_stats,
    run_spread,
    share_of_limit,
)
from bench.report import ratio_text, render, spread_rows


def test_ratio_stats_is_the_median_of_per_round_ratios_not_the_ratio_of_medians() -> None:
    # a load burst slows both halves of round 2 by 10x: per round the ratio stays 0.5
    a = [1.0, 10.0, 1.0, 1.0]
    b = [2.0, 20.0, 2.0, 2.0]
    r = ratio_stats(a, b)
    assert r.median == pytest.approx(0.5)
    assert r.p10 == pytest.approx(0.5)
    assert r.p90 == pytest.approx(0.5)
    # while the ratio of the medians of unpaired samples would see the burst on one side only
    a2 = [1.0, 1.0, 10.0, 10.0]
    b2 = [2.0, 2.0, 2.0, 2.0]
    assert ratio_stats(a2, b2).median == pytest.approx(2.75)
    assert ratio_stats([1.0, 2.0, 3.0], [1.0, 1.0, 1.0]).n == 3


@pytest.mark.parametrize(("a", "b"), [([], []), ([1.0], [1.0, 2.0]), ([1.0], [0.0])])
def test_ratio_stats_refuses_unpaired_or_undefined_samples(a: list[float], b: list[float]) -> None:
    with pytest.raises(ValueError, match=r"paired samples|not positive"):
        ratio_stats(a, b)


def test_paired_alternates_a_and_b_on_the_same_round_index() -> None:
    calls: list[tuple[str, int]] = []
    p = paired(lambda i: calls.append(("a", i)), lambda i: calls.append(("b", i)), 3, warmup=1)
    assert calls == [
        ("a", -1),
        ("b", -1),
        ("a", 0),
        ("b", 0),
        ("a", 1),
        ("b", 1),
        ("a", 2),
        ("b", 2),
    ]
    assert p.rounds == 3
    assert len(p.a_samples) == len(p.b_samples) == 3
    with pytest.raises(ValueError, match="rounds"):
        paired(lambda i: None, lambda i: None, 0)


def test_paired_calls_keeps_the_values_the_calls_return() -> None:
    p = paired_calls(lambda i: 2.0 * (i + 2), lambda i: float(i + 2), 4, warmup=0)
    assert p.a_samples == (4.0, 6.0, 8.0, 10.0)
    assert p.ratio.median == pytest.approx(2.0)
    assert p.inverse().median == pytest.approx(0.5)
    f = p.ratio_fields(inverse=True)
    assert f["ratio"] == pytest.approx(0.5)
    assert f["rounds"] == 4


def test_share_above_the_limit_is_a_metric_defect_not_a_result() -> None:
    ok = share_of_limit([6.0, 7.0, 8.0], [10.0, 10.0, 10.0])
    assert ok.median == pytest.approx(0.7)
    assert not ok.defect
    assert ok.rounds_over == 0
    assert ok.as_fields()["median"] == pytest.approx(70.0)
    # one noisy round over the limit is counted, the median decides
    noisy = share_of_limit([6.0, 11.0, 8.0], [10.0, 10.0, 10.0])
    assert noisy.rounds_over == 1
    assert not noisy.defect
    bad = share_of_limit([22.0, 21.0, 23.0], [10.0, 10.0, 10.0])
    assert bad.defect
    assert bad.as_fields()["metric_defect"] is True


def test_run_spread_reports_min_median_max_and_the_20_percent_goal() -> None:
    s = run_spread([1.0, 1.1, None, 0.9])
    assert s == {"min": 0.9, "median": 1.0, "max": 1.1, "n": 3, "within_20pct": True}
    wide = run_spread([0.216, 0.059, 0.2])
    assert wide is not None
    assert wide["within_20pct"] is False
    assert run_spread([None]) is None


def _size_result(n: int, share_scan: list[float], share_limit: list[float]) -> SizeResult:
    def pair(a: float, b: float) -> object:
        return paired_samples([a, a * 1.1, a * 0.9], [b, b * 1.1, b * 0.9])

    keys = (
        "cos_faiss",
        "full_faiss",
        "inline_faiss",
        "ham_faiss",
        "ham_faiss_mt",
        "rr_cos",
        "rr_full",
        "rrapi_cos",
        "rrham_cos",
    )
    vals = {
        "cos_faiss": (0.1, 1.0),
        "full_faiss": (0.2, 1.0),
        "inline_faiss": (0.3, 1.0),
        "ham_faiss": (0.01, 0.02),
        "ham_faiss_mt": (0.008, 0.02),
        "rr_cos": (0.015, 0.1),
        "rr_full": (0.015, 0.2),
        "rrapi_cos": (0.016, 0.1),
        "rrham_cos": (0.03, 0.1),
    }
    share = share_of_limit(share_scan, share_limit)
    return SizeResult(
        n=n,
        pairs={k: pair(*vals[k]) for k in keys},  # type: ignore[misc]
        names={k: k for k in keys},
        shares={"cosine": (share, 7.0, 10.0), "full": (share, 7.0, 10.0)},
        recall={"hamming": 0.3, "rerank, the table's triage": 0.97},
        multiple=32,
        recall_queries=20,
        bytes_read=7.2e8,
    )


def test_knn_rows_are_judged_at_1e7_and_a_share_over_100_percent_fails_as_a_defect() -> None:
    rows = size_rows(_size_result(10_000_000, [7.0, 7.0, 7.0], [10.0, 10.0, 10.0]))
    by = {r["case"]: r for r in rows}
    cos = by["find_like cosine: cos_faiss"]
    assert cos["ratio"] == pytest.approx(0.1)
    assert cos["met"] is True
    assert cos["rounds"] == 3
    share = by["find_like cosine: share of the read-bandwidth limit"]
    assert share["median"] == pytest.approx(70.0)
    assert share["met"] is True
    bad = size_rows(_size_result(10_000_000, [22.0, 22.0, 22.0], [10.0, 10.0, 10.0]))
    bad_share = next(r for r in bad if r["case"].endswith("share of the read-bandwidth limit"))
    assert bad_share["met"] is False
    assert bad_share["target"].startswith("METRIC DEFECT")
    small = size_rows(_size_result(100_000, [7.0] * 3, [10.0] * 3))
    assert all(r["met"] is None for r in small)
    # a table of a few MB gets no share at all (its timed pass measures a launch): even a
    # "share" over 100 % there is neither reported nor a defect
    tiny = size_rows(_size_result(100_000, [22.0] * 3, [10.0] * 3))
    tiny_shares = [r for r in tiny if "share of the read-bandwidth limit" in r["case"]]
    assert tiny_shares
    assert all(r["median"] is None for r in tiny_shares)
    assert all("not measured" in r["baseline_case"] for r in tiny_shares)
    assert not any(r["target"].startswith("METRIC DEFECT") for r in tiny_shares)


def test_report_shows_the_ratio_spread_and_the_spread_of_runs(tmp_path: Path) -> None:
    def doc(ratio: float) -> dict:
        return {
            "rows": [
                {
                    "case": "area warm",
                    "unit": "ms",
                    "median": 10.0,
                    "baseline_case": "rioxarray",
                    "baseline": {"median": 1000.0},
                    "ratio": ratio,
                    "ratio_p10": ratio * 0.9,
                    "ratio_p90": ratio * 1.1,
                    "rounds": 7,
                    "caches": "warm",
                    "target": ">= 100x",
                    "met": ratio >= 100,
                    "load_sensitive": "yes",
                }
            ],
            "_run": {
                "status": "ok",
                "seconds": 1.0,
                "command": "-m bench.bench_queries",
                "log": "x.log",
                "load_before": [0.1, 0.1, 0.1],
                "load_after": [0.1, 0.1, 0.1],
            },
        }

    runs = [{"queries": doc(r)} for r in (150.0, 100.0, 160.0)]
    assert ratio_text(runs[0]["queries"]["rows"][0]) == "150 [135–165]"
    sp = spread_rows(runs)
    assert len(sp) == 1
    assert sp[0]["values"] == [150.0, 100.0, 160.0]
    assert sp[0]["spread"]["within_20pct"] is False  # 100 is 33 % under the median 150
    text = render(runs[-1], "default", "2026-01-01 00:00 UTC", 60.0, runs=runs)
    assert "## Spread of 3 runs" in text
    spread = text.split("## Spread of 3 runs", 1)[1]
    line = next(x for x in spread.splitlines() if x.startswith("| queries | area warm"))
    assert "150, 100, 160" in line
    assert "**no**" in line
    row = next(x for x in text.splitlines() if x.startswith("| area warm"))
    assert "paired, 7 rounds; warm" in row
    # the same report from runs made one by one (``--workdir`` each), read back from JSON
    from bench.run import main as run_main

    paths = []
    for i, r in enumerate(runs):
        path = tmp_path / f"rep{i + 1}" / "merged.json"
        path.parent.mkdir()
        path.write_text(json.dumps(r))
        paths.append(str(path))
    out = tmp_path / "RESULTS.md"
    assert run_main(["--from-runs", *paths, "--out", str(out)]) == 0
    again = out.read_text()
    assert "## Spread of 3 runs" in again
    assert "150, 100, 160" in again.split("## Spread of 3 runs", 1)[1]
    # a whole run then two `--only` runs of another bench: each bench's tables come from the
    # last run that ran it (the whole run's ingest table is kept)
    whole = {"ingest": {**doc(0.5), "title": "Ingest table"}, "queries": doc(90.0)}
    whole["ingest"]["rows"][0]["case"] = "ingest ratio"
    only = [{"queries": doc(95.0)}, {"queries": doc(110.0)}]
    paths = []
    for i, r in enumerate([whole, *only]):
        path = tmp_path / f"mixed{i}" / "merged.json"
        path.parent.mkdir()
        path.write_text(json.dumps(r))
        paths.append(str(path))
    assert run_main(["--from-runs", *paths, "--out", str(out)]) == 0
    mixed = out.read_text()
    tables = mixed.split("## Spread of 3 runs", 1)[0]
    assert "| queries | area warm | 10 ms; ratio 110" in tables  # the last run's
    assert "| ingest | ingest ratio |" in tables  # from the whole run, not dropped


def test_flat_row_judges_the_median_per_round_ratio_and_the_runs_checks() -> None:
    def run(large: list[float], small: list[float], **kw: object) -> FlatRun:
        base = {
            "small_scenes": 10,
            "large_scenes": 1000,
            "large_seconds": 150.0,
            "batch_weeks": 2,
            "batch_partitions": [16] * len(large),
            "blocks": 8,
            "failed": [],
            "failed_error_checks": [],
            "large_point": (1000, 2000, 150.0, 1, 2.5e4),
            "blocks_without_data": [],
            "cache": {
                "key": "k",
                "commit": "abc",
                "built_at": "2026-12-01T00:00:00Z",
                "reused": True,
            },
        }
        base.update(kw)
        return FlatRun(pair=paired_samples(large, small), **base)  # type: ignore[arg-type]

    flat = flat_row(run([2.1, 2.0, 2.2, 3.9], [2.0, 2.0, 2.0, 2.0]), judged=True)
    assert flat["ratio"] == pytest.approx(float(np.median([1.05, 1.0, 1.1, 1.95])))
    assert flat["met"] is True
    grows = flat_row(run([3.0, 3.1, 2.9], [2.0, 2.0, 2.0]), judged=True)
    assert grows["met"] is False
    broken = flat_row(run([2.0], [2.0], blocks_without_data=["b8.1.1"]), judged=True)
    assert broken["met"] is False
    assert flat_row(run([2.0], [2.0]), judged=False)["met"] is None


def test_flat_row_judges_cpu_seconds_and_keeps_the_wall_ratio_as_information() -> None:
    base = {
        "small_scenes": 10,
        "large_scenes": 1000,
        "large_seconds": 150.0,
        "batch_weeks": 2,
        "batch_partitions": [16] * 3,
        "blocks": 8,
        "failed": [],
        "failed_error_checks": [],
        "large_point": (1000, 2000, 150.0, 1, 2.5e4),
        "blocks_without_data": [],
        "cache": {"key": "k", "commit": "abc", "built_at": "2026-12-01T00:00:00Z", "reused": True},
    }
    # the wall clock of the large store's ingests fell under load; their CPU did not grow
    wall = paired_samples([3.8, 4.0, 3.9], [2.0, 2.0, 2.0])
    cpu = paired_samples([2.1, 2.0, 2.2], [2.0, 2.0, 2.0])
    row = flat_row(FlatRun(pair=wall, cpu=cpu, **base), judged=True)  # type: ignore[arg-type]
    assert row["ratio"] == pytest.approx(1.05)
    assert row["met"] is True
    assert row["unit"] == "CPU s/batch"
    assert row["wall_ratio"]["median"] == pytest.approx(1.95)
    assert row["per_round_cpu_s"]["large"] == [2.1, 2.0, 2.2]
    grows = paired_samples([3.0, 3.1, 2.9], [2.0, 2.0, 2.0])
    assert flat_row(FlatRun(pair=cpu, cpu=grows, **base), judged=True)["met"] is False  # type: ignore[arg-type]
