"""Address algebra rates: vectorised cell64 encode/decode, integer and text forms.

Baseline (same run): the plain-numpy elementwise formula (what a user would
write), which makes a dozen N-sized temporaries.

Two info rows time the offline gazetteer that turns place text into a point
(``api.places``): building its index in this process (once per process, on the
first place lookup) and one lookup over a mix of names (found, ambiguous,
qualified, partial, not found), per lookup.

    python -m bench.bench_address [--n 10000000] [--repeats 5] [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from store import address as a


def numpy_baseline_encode(lat: np.ndarray, lng: np.ndarray) -> np.ndarray:
    """Elementwise numpy encode (the baseline)."""
    x = (lat + 90.0) / 180.0 * a.LAT_MAX_Q
    y = (lng + 180.0) / 360.0 * a.LNG_MAX_Q
    lat_q = np.floor(x)
    lat_q += (x - lat_q) >= 0.5
    lng_q = np.floor(y)
    lng_q += (y - lng_q) >= 0.5
    lat_q = lat_q.astype(np.int64)
    lng_q = lng_q.astype(np.int64)
    lng_q[(lng_q == a.LNG_MAX_Q) | (lat_q == 0) | (lat_q == a.LAT_MAX_Q)] = 0
    return a.q_to_raw_array(lat_q, lng_q)


def _time(fn: Callable[[], Any], repeats: int) -> tuple[float, float]:
    fn()  # warm-up (and JIT)
    ts = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts), (max(ts) - min(ts))


def run(n: int, repeats: int) -> list[dict[str, Any]]:
    rng = np.random.default_rng(42)
    lat = rng.uniform(-90, 90, n)
    lng = rng.uniform(-180, 180, n)
    raw = a.encode_int_array(lat, lng)
    assert np.array_equal(raw, numpy_baseline_encode(lat, lng))
    text_n = min(n, 1_000_000)
    texts = list(a.format_cells(raw[:text_n]))
    text_bytes = a.format_cells_bytes(raw)
    cases: list[tuple[str, int, Callable[[], Any]]] = [
        ("encode lat/lng -> int (numpy baseline)", n, lambda: numpy_baseline_encode(lat, lng)),
        ("encode lat/lng -> int (earthmem)", n, lambda: a.encode_int_array(lat, lng)),
        ("decode int -> centre lat/lng", n, lambda: a.decode_array(raw)),
        ("format int -> text (S23 bytes)", n, lambda: a.format_cells_bytes(raw)),
        ("format int -> text (str)", n, lambda: a.format_cells(raw)),
        ("parse text -> int (S23 bytes)", n, lambda: a.parse_cells(text_bytes)),
        ("parse text -> int (str list)", text_n, lambda: a.parse_cells(texts)),
    ]
    rows: list[dict[str, Any]] = []
    for name, count, fn in cases:
        med, spread = _time(fn, repeats)
        rows.append(
            {
                "case": name,
                "n": count,
                "median_s": med,
                "spread_s": spread,
                "rate_per_s": count / med,
            }
        )
    base = float(rows[0]["median_s"])
    for r in rows[:2]:
        r["ratio_vs_baseline"] = r["median_s"] / base
    return rows


GAZETTEER_QUERIES = (
    "Ranchi",
    "Paris",
    "Springfield",
    "São Paulo",
    "Kanke Lake",
    "Paris, Texas",
    "Ranchi, Jharkhand",
    "Lake near Ranchi",
    "Nowhere-ville",
)
"""The lookup mix of the gazetteer row (the removed test_lookup_is_fast's, plus three)."""


def run_gazetteer(repeats: int) -> list[dict[str, Any]]:
    """Gazetteer index build (first lookup of the process) and per-lookup time over the mix."""
    from api.places.gazetteer import Gazetteer

    gaz = Gazetteer()
    t0 = time.perf_counter()
    stats = gaz.stats()  # builds the geonames index (cached for the rest of the process)
    build = time.perf_counter() - t0
    n = len(GAZETTEER_QUERIES) * 50
    med, spread = _time(lambda: [gaz.resolve(q) for q in GAZETTEER_QUERIES * 50], repeats)
    return [
        {
            "case": f"gazetteer: build the index ({stats.entries:,} places, {stats.keys:,} names)",
            "n": 1,
            "unit_n": "build",
            "median_s": build,
            "spread_s": 0.0,
            "rate_per_s": 1 / build,
        },
        {
            "case": "gazetteer: resolve place text, per lookup",
            "n": n,
            "unit_n": "lookups",
            "median_s": med / n,
            "spread_s": spread / n,
            "rate_per_s": n / med,
            "target": "<= 5 ms",
            "met": med / n <= 0.005,
        },
    ]


def print_table(rows: list[dict[str, Any]]) -> None:
    print(
        f"{'case':42} {'n':>10} {'median ms':>10} {'spread ms':>10} {'M cells/s':>10} {'ratio':>6}"
    )
    for r in rows:
        ratio = f"{r['ratio_vs_baseline']:.2f}" if "ratio_vs_baseline" in r else ""
        print(
            f"{r['case']:42} {r['n']:>10} {r['median_s'] * 1e3:>10.1f} {r['spread_s'] * 1e3:>10.1f}"
            f" {r['rate_per_s'] / 1e6:>10.1f} {ratio:>6}"
        )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--n", type=int, default=10_000_000)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--quick", action="store_true", help="100k points, 2 repeats")
    ap.add_argument("--json", help="also write rows as JSON here")
    args = ap.parse_args(argv)
    n, repeats = (100_000, 2) if args.quick else (args.n, args.repeats)
    rows = run(n, repeats) + run_gazetteer(repeats)
    print_table(rows)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"bench": "address", "rows": rows}, f, indent=2)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
