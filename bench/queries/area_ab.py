"""Paired A/B of two source trees' area_over_time CPU, in process, in short turns.

Starts a worker from each tree (``PYTHONPATH`` the tree, same data directory), then
alternates them turn by turn, the order swapped every round, so both sides of a round
see the same load; reports the median of the per-round ratios B/A with p10-p90.

Turns:

* ``warm``: ``--calls`` warm calls of the bench's ~1 km^2 x 1 year request
  (:func:`bench.queries.area.area_args`) on one open context; CPU (process time, all
  threads) and wall per call.
* ``six``: the worst case's six whole-extent areas (:func:`bench.queries.worst_case.worst_args`)
  on a fresh context (reader and overpass index opened first, as the bench does); one
  call a turn; CPU and wall.

``--hash``: instead, every tree answers a set of requests and prints a digest of each
answer without its receipt (request id, time, signature): equal digests, equal answers.

    python -m bench.queries.area_ab --a-tree OLD --b-tree NEW --data DIR --mode warm
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from bench.queries.probe_ab import close_children

__all__ = ["main", "requests"]


def requests(data: Path) -> dict[str, dict[str, Any]]:
    """The requests whose answers are compared (the bench's, and variants around them)."""
    from bench.common import DemoArea
    from bench.queries.area import area_args
    from bench.queries.worst_case import worst_args

    area = DemoArea("demo", data.parent / "sample", data, {})
    warm = area_args(area, 1.0, 2024)
    worst = worst_args(area)
    b = area.manifest()["bbox"]
    out: dict[str, dict[str, Any]] = {
        "warm_2024": warm,
        "warm_2023": area_args(area, 1.0, 2023),
        "half_km_evi": {**area_args(area, 0.5, 2024), "index": "evi", "max_scenes": 7},
        "warm_cells_only": {**warm, "use_summaries": False},
        "warm_ndwi_thr": {**warm, "index": "ndwi", "clear_fraction": 0.7, "max_scenes": 5},
        "vh_s1": {**warm, "index": "vh", "max_scenes": 12},
        "six_areas": worst["six_areas"],
        "six_cells_only": {**worst["six_areas"], "use_summaries": False},
        "repro_polygon": worst["repro_polygon"],
        "polygon_small": {
            "geometry": {
                "type": "Polygon",
                "coordinates": [
                    [
                        [b[0] + 0.002, b[1] + 0.002],
                        [b[0] + 0.012, b[1] + 0.003],
                        [b[0] + 0.008, b[1] + 0.011],
                        [b[0] + 0.002, b[1] + 0.002],
                    ]
                ],
            },
            "start_date": "2023-03-01",
            "end_date": "2024-10-31",
            "max_scenes": 20,
        },
        "whole_one": {**worst["six_areas"], "areas": worst["six_areas"]["areas"][:1]},
    }
    return out


def _digest(answer: dict[str, Any]) -> str:
    answer = {k: v for k, v in answer.items() if k != "receipt"}
    return hashlib.sha256(json.dumps(answer, sort_keys=True).encode()).hexdigest()[:16]


def _worker(data: Path) -> None:  # pragma: no cover - a child process
    from api.context import ServiceContext
    from api.dispatch import run
    from api.receipts import Signer

    reqs = requests(data)
    signer = Signer.generate()
    ctx = ServiceContext(data, signer=signer)
    for _ in range(3):
        run(ctx, "area_over_time", reqs["warm_2024"])
    run(ctx, "area_over_time", reqs["six_areas"])
    print("ready", flush=True)
    for line in sys.stdin:
        cmd, _, arg = line.strip().partition(" ")
        if cmd == "warm":
            n = int(arg)
            c0, t0 = time.process_time(), time.perf_counter()
            for _ in range(n):
                run(ctx, "area_over_time", reqs["warm_2024"])
            cpu, wall = (time.process_time() - c0) / n, (time.perf_counter() - t0) / n
        elif cmd == "six":
            fresh = ServiceContext(data, signer=signer)
            fresh.reader()
            fresh.overpass_index()
            c0, t0 = time.process_time(), time.perf_counter()
            run(fresh, "area_over_time", reqs["six_areas"])
            cpu, wall = time.process_time() - c0, time.perf_counter() - t0
        elif cmd == "hash":
            got = {}
            for name, body in reqs.items():
                ans = run(ctx, "area_over_time", body).model_dump(mode="json")
                cold = run(ServiceContext(data, signer=signer), "area_over_time", body)
                got[name] = [_digest(ans), _digest(cold.model_dump(mode="json"))]
            print(json.dumps(got), flush=True)
            continue
        else:
            raise SystemExit(f"unknown command {cmd!r}")
        print(json.dumps([cpu, wall]), flush=True)


def _start(tree: Path, data: Path) -> subprocess.Popen[str]:
    cmd = [sys.executable, str(Path(__file__).resolve()), "--worker", "--data", str(data)]
    env = {**os.environ, "PYTHONPATH": str(tree)}
    proc = subprocess.Popen(
        cmd, cwd=tree, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None
    if proc.stdout.readline().strip() != "ready":
        raise RuntimeError(f"the worker of {tree} did not start")
    return proc


def _ask(proc: subprocess.Popen[str], line: str) -> Any:
    assert proc.stdin is not None
    assert proc.stdout is not None
    proc.stdin.write(line + "\n")
    proc.stdin.flush()
    return json.loads(proc.stdout.readline())


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--a-tree", type=Path)
    ap.add_argument("--b-tree", type=Path)
    ap.add_argument("--data", required=True, type=Path)
    ap.add_argument("--mode", choices=("warm", "six"), default="warm")
    ap.add_argument("--rounds", type=int, default=16)
    ap.add_argument("--calls", type=int, default=5)
    ap.add_argument("--hash", action="store_true")
    ap.add_argument("--worker", action="store_true")
    args = ap.parse_args(argv)
    if args.worker:
        _worker(args.data.resolve())
        return 0
    from bench.paired import ratio_stats

    trees = {"a": args.a_tree.resolve(), "b": args.b_tree.resolve()}
    procs = {side: _start(tree, args.data.resolve()) for side, tree in trees.items()}
    try:
        if args.hash:
            got = {side: _ask(p, "hash") for side, p in procs.items()}
            same = [k for k in got["a"] if got["a"][k] == got["b"][k]]
            for k in got["a"]:
                print(f"{k}: a {got['a'][k]} b {got['b'][k]}")
            print(f"identical: {len(same)} of {len(got['a'])}")
            return 0 if len(same) == len(got["a"]) else 1
        line = f"warm {args.calls}" if args.mode == "warm" else "six"
        cpu: dict[str, list[float]] = {"a": [], "b": []}
        wall: dict[str, list[float]] = {"a": [], "b": []}
        for r in range(args.rounds):
            for side in ("a", "b") if r % 2 == 0 else ("b", "a"):
                c, w = _ask(procs[side], line)
                cpu[side].append(c)
                wall[side].append(w)
            print(
                f"round {r}: cpu a {cpu['a'][-1] * 1e3:.1f} b {cpu['b'][-1] * 1e3:.1f} ms; "
                f"wall a {wall['a'][-1] * 1e3:.1f} b {wall['b'][-1] * 1e3:.1f} ms",
                flush=True,
            )
        for name, d in (("CPU", cpu), ("wall", wall)):
            ratio = ratio_stats(d["b"], d["a"])
            med = {s: sorted(v)[len(v) // 2] * 1e3 for s, v in d.items()}
            print(
                f"{name} ms per call: median a {med['a']:.1f}, b {med['b']:.1f}; per-round b/a "
                f"{ratio.median:.3f} [{ratio.p10:.3f}-{ratio.p90:.3f}] over {args.rounds} rounds"
            )
    finally:
        close_children(procs.values(), timeout=60)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
