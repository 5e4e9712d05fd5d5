"""The bench harness works: report rendering (pure) and a quick run of every bench (subprocess).

No timing is asserted: only that each bench ran, produced its rows with a
baseline measured in the same run, and that the report holds them.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from bench.report import render
from bench.run import BENCHES

REPO = Path(__file__).resolve().parents[2]


def _run_meta(name: str) -> dict:
    return {
        "status": "ok",
        "seconds": 1.0,
        "command": f"-m bench.bench_{name} --json x.json",
        "log": f"bench/.cache/logs/{name}.log",
        "load_before": [0.1, 0.1, 0.1],
        "load_after": [0.2, 0.1, 0.1],
    }


def _knn_doc(n: int) -> dict:
    """A knn document as bench_knn writes it: common rows from paired rounds."""
    from bench.bench_knn import SizeResult, size_rows
    from bench.paired import paired_samples, share_of_limit

    vals = {
        "cos_faiss": (10.0, 100.0),
        "full_faiss": (15.0, 100.0),
        "inline_faiss": (20.0, 100.0),
        "ham_faiss": (1.0, 2.0),
        "ham_faiss_mt": (0.8, 2.0),
        "rr_cos": (1.5, 10.0),
        "rr_full": (1.5, 15.0),
        "rrapi_cos": (1.6, 10.0),
        "rrham_cos": (3.0, 10.0),
    }
    names = {
        "cos_faiss": "cosine (earthmem, int8)",
        "full_faiss": "cosine full scan, no pruning (earthmem, int8)",
        "inline_faiss": "cosine inline float query (earthmem, f32 x int8)",
        "ham_faiss": "hamming (earthmem), 1 thread each side",
        "ham_faiss_mt": "hamming (earthmem, 2 threads) vs FAISS on 1",
        "rr_cos": "hamming_then_rerank, 4 of 1024 k-means lists, x32 (earthmem)",
        "rr_full": "hamming_then_rerank, 4 of 1024 k-means lists, x32 (earthmem) vs the unpruned exact scan",
        "rrapi_cos": "hamming_then_rerank as find_similar runs it",
        "rrham_cos": "hamming_then_rerank, full Hamming triage x32 (calibrated here)",
    }
    share = share_of_limit([7.0, 7.0, 7.0], [10.0, 10.0, 10.0])
    result = SizeResult(
        n=n,
        pairs={k: paired_samples([a / 1e3] * 3, [b / 1e3] * 3) for k, (a, b) in vals.items()},
        names=names,
        shares={"cosine": (share, 7.0, 10.0), "full": (share, 7.0, 10.0)},
        recall={
            "hamming": 0.4,
            "rerank, the table's triage": 0.97,
            "rerank as find_similar": 0.98,
            "rerank, full triage x32": 0.96,
        },
        multiple=32,
        recall_queries=20,
        bytes_read=1e6,
    )
    return {
        "bench": "knn",
        "machine": {"threads": 2, "faiss": "1.x"},
        "rows": size_rows(result),
        "_run": _run_meta("knn"),
    }


def test_render_pairs_each_row_with_its_baseline_and_judges_targets_at_1e7() -> None:
    common_row = {
        "case": "did_change p50, in process, warm context",
        "unit": "ms",
        "median": 0.9,
        "p10": 0.8,
        "p90": 1.1,
        "n": 100,
        "baseline_case": "CubeReader.cell_series",
        "baseline": {"median": 7.0, "p10": 6.0, "p90": 8.0, "n": 100},
        "ratio": 0.13,
        "ratio_def": "earthmem / baseline",
        "target": "p50 <= 2 ms",
        "met": True,
        "data": "1 cell",
    }
    docs = {
        "address": {
            "bench": "address",
            "rows": [
                {
                    "case": "encode (numpy baseline)",
                    "n": 10,
                    "median_s": 2e-3,
                    "spread_s": 1e-4,
                    "rate_per_s": 5e3,
                    "ratio_vs_baseline": 1.0,
                },
                {
                    "case": "encode (earthmem)",
                    "n": 10,
                    "median_s": 1e-3,
                    "spread_s": 1e-4,
                    "rate_per_s": 1e4,
                    "ratio_vs_baseline": 0.5,
                },
            ],
            "_run": _run_meta("address"),
        },
        "knn": _knn_doc(10_000_000),
        "queries": {
            "title": "Queries",
            "rows": [common_row],
            "_run": _run_meta("queries"),
            "notes": ["a note"],
        },
        "ingest": {
            "rows": [],
            "_run": {**_run_meta("ingest"), "status": "exit status 1", "log_tail": ["Traceback"]},
        },
    }
    text = render(docs, "default", "2026-01-01 00:00 UTC", 60.0)
    assert "## Machine" in text
    assert "numpy BLAS" in text
    lines = text.splitlines()
    enc = next(line for line in lines if line.startswith("| encode (earthmem)"))
    assert "encode (numpy baseline)" in enc
    assert "| 2 (speed-up vs baseline)" in enc
    cos = next(line for line in lines if line.startswith("| find_like cosine: cosine (earthmem"))
    assert "FAISS IndexFlatIP" in cos
    assert "0.1 (earthmem / FAISS, per round)" in cos
    assert "paired, 3 rounds" in cos
    assert "**met**" in cos
    ham = next(
        line
        for line in lines
        if line.startswith("| find_like hamming: hamming (earthmem), 1 thread")
    )
    assert "**met**" in ham  # 1.0 / 2.0 = 0.5 <= 0.6
    assert "same threads" in ham
    bw = next(
        line
        for line in lines
        if "share of the read-bandwidth limit" in line and line.startswith("| find")
    )
    assert "**met**" in bw
    rr = next(
        line
        for line in lines
        if line.startswith("| find_like hamming_then_rerank: hamming_then_rerank, 4 of 1024")
    )
    assert "**met**" in rr  # 1.5 / 10 = 0.15 <= 0.2 and recall 0.97
    assert any(
        line.startswith("| did_change p50") and "CubeReader.cell_series" in line for line in lines
    )
    targets = text.split("## Targets", 1)[1].split("\n## ", 1)[0]
    assert "did_change p50" in targets
    assert "find_like cosine" in targets
    assert "Benches that did not finish: ingest" in text
    assert "Traceback" in text
    assert "> a note" in text

    small = render({"knn": _knn_doc(100_000)}, "quick", "2026-01-01 00:00 UTC", 1.0)
    cos_small = next(
        line
        for line in small.splitlines()
        if line.startswith("| find_like cosine: cosine (earthmem")
    )
    assert "at 10^7" in cos_small
    assert "**met**" not in cos_small


def test_unpaired_flatness_rows_see_the_marginal_cost_per_scene_not_the_fixed_cost() -> None:
    from bench.bench_ingest import flatness_rows, marginal_costs

    # T = 5 s fixed + 0.1 s per read: the raw cost per scene falls, the marginal one is flat
    sizes = [(10, 20), (40, 80), (160, 320), (1000, 2000)]
    flat_pts = [(sc, r, 5.0 + 0.1 * r, 1, 1e4) for sc, r in sizes]
    assert [round(m, 9) for _, _, m in marginal_costs([p[:3] for p in flat_pts])] == [0.1] * 3
    marginal, raw = flatness_rows(flat_pts, {})
    assert marginal["case"].startswith("cost per scene, marginal")
    assert abs(marginal["ratio"] - 1.0) < 1e-9
    assert marginal["met"] is None  # information: the paired row is the target
    assert marginal["unpaired_verdict"] is True
    assert raw["met"] is None
    assert raw["ratio"] < 0.5
    assert "1000 scenes: 205.0 s" in marginal["data"]
    # a cost per read that grows with size misses, whatever the fixed cost
    grow_pts = [(sc, r, 5.0 + 0.1 * r + 2e-5 * r * r, 1, 1e4) for sc, r in sizes]
    assert flatness_rows(grow_pts, {})[0]["unpaired_verdict"] is False
    # the largest run's checks count: a block without data misses
    run = {
        "catalog": "c",
        "failed_partitions": [],
        "failed_checks": 0,
        "failed_error_checks": [],
        "blocks_without_data": ["b8.1.1"],
    }
    assert flatness_rows(flat_pts, run)[0]["unpaired_verdict"] is False
    # one step (the quick run): reported, not judged
    one = flatness_rows(flat_pts[:2], {})[0]
    assert one["unpaired_verdict"] is None
    assert one["ratio"] is None


EXPECTED_ROWS = {
    "address": ["encode lat/lng -> int (earthmem)"],
    "knn": [
        "find_like cosine: cosine (earthmem",
        "find_like hamming: hamming (earthmem",
        "find_like hamming_then_rerank",
    ],
    "queries": [
        "did_change p50, in process, warm context",
        "did_change over HTTP, 16 keep-alive connections",
        "read_cell p50 (1 band, latest clear), in process, warm context",
        "read_cells p50, 256 cells x 1 band",
        "fact resolution p50",
        "verify_receipt p50",
        "area_over_time ~1 km^2 x 1 year, cold context",
        "area_over_time means vs exactextract weighted_mean on the cube",
        "query server peak RSS (VmHWM), find_similar all modes",
    ],
    "ingest": [
        "Dagster ingest, ",
        "read + compute + CubeWriter commits without Dagster",
        "cost per scene, paired",
        "cost per scene, marginal",
    ],
    "recall": [
        "recall quality nDCG@10, overall",
        "recall quality nDCG@10, paraphrase",
    ],
}


def test_the_smoke_run_is_make_bench_quick_and_left_out_of_ci() -> None:
    """CI and `make test` leave the smoke run below out (minutes of CPU); `make bench-quick`
    runs it, so it is not orphaned."""
    makefile = (REPO / "Makefile").read_text()
    quick = makefile.split("\nbench-quick:", 1)[1].split("\n\n", 1)[0]
    assert "-m bench_smoke" in quick
    for target in ("test", "pytest"):
        recipe = makefile.split(f"\n{target}:", 1)[1].split("\n\n", 1)[0]
        assert "not bench_smoke" in recipe, target


@pytest.mark.slow  # subprocesses: every bench's --quick variant, minutes on 2 cores
@pytest.mark.bench_smoke  # `make bench-quick`; left out of `make test` and CI
def test_quick_harness_runs_every_bench_and_reports_every_row(tiny_store, tmp_path: Path) -> None:
    env = {
        **os.environ,
        "PYTHONPATH": str(REPO),
        # the test suite's tiny area, already ingested: the quick run does not rebuild one
        "EARTHMEM_BENCH_SAMPLE": str(tiny_store.sample),
        "EARTHMEM_BENCH_DATA": str(tiny_store.data),
    }
    out = tmp_path / "RESULTS.md"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "bench.run",
            "--quick",
            "--out",
            str(out),
            "--workdir",
            str(tmp_path / "work"),
        ],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    merged = json.loads((tmp_path / "work" / "merged.json").read_text())
    statuses = {name: doc["_run"]["status"] for name, doc in merged.items()}
    assert proc.returncode == 0, (statuses, proc.stderr[-3000:])
    assert set(merged) == {b.name for b in BENCHES if b.default}
    text = out.read_text()
    for name, rows in EXPECTED_ROWS.items():
        for row in rows:
            assert any(line.startswith(f"| {row}") for line in text.splitlines()), (name, row)
    # every judged row of our own benches carries a baseline measured in the same run, but for
    # the rows the issues bound absolutely (worst-case time and memory of one request)
    for name in ("queries", "ingest"):
        for r in merged[name]["rows"]:
            if r.get("absolute"):
                assert r["target"], r["case"]
                continue
            assert r["baseline_case"], r["case"]
            if r["ratio"] is not None:
                assert r["baseline"]["median"] is not None, r["case"]
            if r["met"] is not None:
                assert r["target"], r["case"]
    ee = next(r for r in merged["queries"]["rows"] if "exactextract" in r["case"])
    assert ee["met"], ee  # correctness, not speed: the means agree within 1e-6
    assert "## Targets" in text
    assert "load average" in text
