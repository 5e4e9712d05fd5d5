"""Paired A/B of memory_create over HTTP: two source trees' ``earthmem serve`` alternated.

Both servers (``earthmem serve --workers W --no-access-log``, each run from its own tree,
each with its own data directory and SQLite memory database, ``synchronous=FULL``) are up
at once; each round drives one with ``writers`` keep-alive connections of
:mod:`bench.loadgen` (connected before the clock starts, as :mod:`bench.memory_api` does) for ``writes``
memory_create calls, then the other (the order alternates round by round). Per window:
the server's CPU per write (user + system time of its process tree, from /proc), the
latency p50 and the writes/s. Reported: per-side medians and the median of the
per-round ratios B/A with p10-p90 (:func:`bench.paired.ratio_stats`).

    python -m bench.memory_http_ab --a-tree OLD --b-tree NEW [--rounds 8] [--writes 300] \
        [--writers 1] [--workers 1]
"""

from __future__ import annotations

import argparse
import functools
import itertools
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from bench.memory_api import _UNLIMITED, _loadgen
from bench.paired import ratio_stats
from bench.queries.http_server import Server
from bench.server_cpu import settle, tree_cpu_s

__all__ = ["Side", "main"]

_ISSUE = (
    "import sys; from api.context import ServiceContext; from api.memory.auth import issue_token;"
    "ctx = ServiceContext(sys.argv[1]); print(issue_token(ctx.memory(), 'bench', "
    "('read', 'write'))[0]); ctx.memory().close()"
)


class Side:
    """One tree's server (:class:`bench.queries.http_server.Server`), its data and its token."""

    def __init__(self, name: str, tree: Path, root: Path, workers: int, log: Path) -> None:
        self.name = name
        self.data = root / name
        self.data.mkdir()
        env = {**_UNLIMITED, "EARTHMEM_MEMORY_URL": f"sqlite:///{self.data}/memory.sqlite"}
        self.token = subprocess.run(
            [sys.executable, "-c", _ISSUE, str(self.data)],
            cwd=tree,
            env={**os.environ, **env, "PYTHONPATH": str(tree)},
            check=True,
            capture_output=True,
            text=True,
        ).stdout.strip()
        self.server = Server(self.data, log, quiet=True, workers=workers, env=env, tree=tree)
        self.url = self.server.url
        self.proc = self.server.proc
        self.drive = _loadgen(self.url, self.token, itertools.count(1).__next__)
        """Writers as :mod:`bench.loadgen` connections (as :mod:`bench.memory_api` drives)."""

    def stop(self) -> None:
        self.server.stop()


def _window(side: Side, writers: int, writes: int) -> dict[str, Any]:
    per = max(1, writes // writers)
    cpu0 = tree_cpu_s(side.proc.pid)
    lat, wall = side.drive(writers, per)
    cpu = tree_cpu_s(side.proc.pid) - cpu0
    n = len(lat)
    return {
        "cpu_us": cpu * 1e6 / n,
        "p50_ms": statistics.median(lat) * 1e3,
        "rate": n / wall,
        "load": os.getloadavg()[0],
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--a-tree", type=Path, required=True)
    p.add_argument("--b-tree", type=Path, required=True)
    p.add_argument("--rounds", type=int, default=8)
    p.add_argument("--writes", type=int, default=300)
    p.add_argument("--writers", type=int, default=1)
    p.add_argument("--workers", type=int, default=1)
    p.add_argument("--json", type=Path, default=None, help="write the raw windows here")
    args = p.parse_args(argv)
    out: dict[str, list[dict[str, Any]]] = {"a": [], "b": []}
    with tempfile.TemporaryDirectory(prefix="s16-mem-ab-") as tmp:
        root = Path(tmp)
        sides = {
            "a": Side("a", args.a_tree.resolve(), root, args.workers, root / "a.log"),
            "b": Side("b", args.b_tree.resolve(), root, args.workers, root / "b.log"),
        }
        try:
            for s in sides.values():  # warm-up: first calls, the pooled connections
                settle(functools.partial(tree_cpu_s, s.proc.pid))
                _window(s, args.writers, 4 * args.writers)
            for rnd in range(args.rounds):
                order = ("a", "b") if rnd % 2 == 0 else ("b", "a")
                for key in order:
                    out[key].append(_window(sides[key], args.writers, args.writes))
                print(
                    f"round {rnd}: "
                    + "  ".join(
                        f"{key} cpu {out[key][-1]['cpu_us']:.0f} us p50 "
                        f"{out[key][-1]['p50_ms']:.2f} ms {out[key][-1]['rate']:.0f}/s"
                        for key in ("a", "b")
                    )
                    + f"  load {os.getloadavg()[0]:.1f}",
                    flush=True,
                )
        finally:
            for s in sides.values():
                s.stop()
    for measure in ("cpu_us", "p50_ms", "rate"):
        a = [w[measure] for w in out["a"]]
        b = [w[measure] for w in out["b"]]
        r = ratio_stats(b, a)
        print(
            f"{measure}: a {statistics.median(a):.2f}  b {statistics.median(b):.2f}  "
            f"b/a {r.median:.3f} [{r.p10:.3f}-{r.p90:.3f}]"
        )
    if args.json is not None:
        args.json.write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
