"""Paired A/B of did_change over HTTP: two source trees' ``earthmem serve`` alternated in windows.

Both servers (each ``earthmem serve`` with its default workers, run from its own tree)
are up at once; each round loads one for a window, then the other (the order alternates
round by round), with the bench's load generator and the bench's rotating bodies. Per
window: requests/s and the server's CPU per request (user + system time of the server's
processes, from /proc, over the requests answered). Reported: per-side medians and the
median of the per-round ratios B/A with p10-p90 (:func:`bench.paired.ratio_stats`).

    python -m bench.queries.http_ab --a-tree OLD --b-tree NEW --data DIR --bodies FILE \
        [--rounds 6] [--seconds 4] [--connections 16]
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from bench.common import free_port, wait_http
from bench.paired import ratio_stats
from bench.queries.http_server import _load
from bench.queries.probe_ab import ab_arguments

__all__ = ["main"]

_TICK = os.sysconf("SC_CLK_TCK")


def _tree_cpu(pid: int) -> float:
    """User + system seconds of ``pid`` and its live descendants."""
    total = 0.0
    todo = [pid]
    while todo:
        p = todo.pop()
        try:
            fields = Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()
            total += (int(fields[11]) + int(fields[12])) / _TICK
            kids = Path(f"/proc/{p}/task/{p}/children").read_text().split()
        except (FileNotFoundError, ProcessLookupError, IndexError):
            continue
        todo.extend(int(k) for k in kids)
    return total


def _serve(tree: Path, data: Path, log: Path) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    env = {**os.environ, "PYTHONPATH": str(tree)}
    cmd = [sys.executable, "-m", "cli.main", "serve", "--data", str(data), "--port", str(port)]
    proc = subprocess.Popen(cmd, cwd=tree, env=env, stdout=log.open("wb"), stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    wait_http(url + "/healthz", timeout=120)
    return proc, url


def main(argv: list[str] | None = None) -> int:
    ap = ab_arguments(__doc__)
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--seconds", type=float, default=4.0)
    ap.add_argument("--connections", type=int, default=16)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args(argv)
    bodies = json.loads(args.bodies.read_text())
    logdir = Path("/tmp") / f"http_ab_{os.getpid()}"
    logdir.mkdir(exist_ok=True)
    servers = {}
    try:
        for side, tree in (("a", args.a_tree), ("b", args.b_tree)):
            servers[side] = _serve(tree.resolve(), args.data.resolve(), logdir / f"{side}.log")
        for side in ("a", "b"):  # warm-up: context, column cache, settled fast path
            _load(servers[side][1] + "/v1/did_change", bodies, 4, 2.0)
        out: dict[str, list[dict[str, Any]]] = {"a": [], "b": []}
        for r in range(args.rounds):
            for side in ("a", "b") if r % 2 == 0 else ("b", "a"):
                proc, url = servers[side]
                c0, l0 = _tree_cpu(proc.pid), os.getloadavg()[0]
                res = _load(url + "/v1/did_change", bodies, args.connections, args.seconds)
                c1 = _tree_cpu(proc.pid)
                ok = res["requests_ok"]
                out[side].append(
                    {
                        "rps": res["rps"],
                        "cpu_us_per_request": 1e6 * (c1 - c0) / max(ok, 1),
                        "errors": res["errors"] + res["non_200"],
                        "load": l0,
                        "p50_ms": res["latency_ms"]["p50"],
                    }
                )
                w = out[side][-1]
                print(
                    f"round {r} {side}: {w['rps']:.0f} req/s, "
                    f"{w['cpu_us_per_request']:.0f} us CPU/request, load {l0:.1f}",
                    flush=True,
                )
        rps = ratio_stats([w["rps"] for w in out["b"]], [w["rps"] for w in out["a"]])
        cpu = ratio_stats(
            [w["cpu_us_per_request"] for w in out["b"]],
            [w["cpu_us_per_request"] for w in out["a"]],
        )
        summary = {
            "rounds": args.rounds,
            "seconds": args.seconds,
            "connections": args.connections,
            "a_tree": str(args.a_tree),
            "b_tree": str(args.b_tree),
            "rps_ratio_b_over_a": {"median": rps.median, "p10": rps.p10, "p90": rps.p90},
            "cpu_ratio_b_over_a": {"median": cpu.median, "p10": cpu.p10, "p90": cpu.p90},
            "windows": out,
        }
        for side in ("a", "b"):
            ws = sorted(w["rps"] for w in out[side])
            cs = sorted(w["cpu_us_per_request"] for w in out[side])
            print(f"{side}: median {ws[len(ws) // 2]:.0f} req/s, {cs[len(cs) // 2]:.0f} us CPU/req")
        print(
            f"b/a req/s per round: {rps.median:.3f} [{rps.p10:.3f}-{rps.p90:.3f}]; "
            f"CPU/request: {cpu.median:.3f} [{cpu.p10:.3f}-{cpu.p90:.3f}]"
        )
        if args.json:
            args.json.write_text(json.dumps(summary, indent=2))
    finally:
        for proc, _ in servers.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGINT)
                try:
                    proc.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    proc.kill()
        time.sleep(0.1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
