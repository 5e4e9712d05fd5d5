"""bench.adapters: the address bench's own rows in the common report format."""

from __future__ import annotations

from bench.adapters import bench_rows


def test_address_rows_keep_their_unit_and_target_and_pair_only_the_encode_rows() -> None:
    doc = {
        "bench": "address",
        "rows": [
            {
                "case": "encode (numpy baseline)",
                "n": 100,
                "median_s": 0.010,
                "spread_s": 0.001,
                "rate_per_s": 1e4,
                "ratio_vs_baseline": 1.0,
            },
            {
                "case": "encode (earthmem)",
                "n": 100,
                "median_s": 0.002,
                "spread_s": 0.0,
                "rate_per_s": 5e4,
                "ratio_vs_baseline": 0.2,
            },
            {
                "case": "gazetteer: resolve place text, per lookup",
                "n": 450,
                "unit_n": "lookups",
                "median_s": 0.0003,
                "spread_s": 0.0,
                "rate_per_s": 3333.0,
                "target": "<= 5 ms",
                "met": True,
            },
        ],
    }
    rows = bench_rows("address", doc)
    assert [r["case"] for r in rows] == [
        "encode (earthmem)",
        "gazetteer: resolve place text, per lookup",
    ]
    enc, gaz = rows
    assert enc["ratio"] == 5.0
    assert enc["target"] == "(info)"
    assert enc["data"] == "100 points"
    assert gaz["data"] == "450 lookups"
    assert gaz["unit"] == "ms"
    assert abs(gaz["median"] - 0.3) < 1e-9
    assert gaz["target"] == "<= 5 ms"
    assert gaz["met"] is True
    assert "ratio" not in gaz
    assert gaz["rate"] == "3,333 /s"


def test_steal_is_read_from_proc_stat_or_reported_missing() -> None:
    from bench.common import steal_seconds

    got = steal_seconds()
    assert got is None or got >= 0.0


def test_the_report_names_the_steal_of_a_bench_that_recorded_it() -> None:
    from bench.report import _steal_text

    run = {"seconds": 100.0, "steal_s": 30.0, "cpus": 2}
    assert _steal_text(run) == "; CPU time stolen by the hypervisor 30.0 s (15.0 % of 2 CPUs)"
    assert _steal_text({"seconds": 100.0, "steal_s": None}) == ""
    assert _steal_text({"seconds": 100.0}) == ""
