"""Paired A/B of two source trees' CPU per did_change request, in process, in short turns.

Starts :mod:`bench.queries.asgi_probe` ``--stdin`` from each tree (same data, same
rotating bodies), then alternates them turn by turn (``--turn`` requests each, the order
alternating by round), so both sides of a round see the same load; reports the median of
the per-round CPU ratios B/A with p10-p90. First both trees answer the same requests with
pinned request ids and times (``asgi_probe --check``): the answers must be equal byte for byte,
signatures included (``--no-check`` skips this).

    python -m bench.queries.probe_ab --a-tree OLD --b-tree NEW --data DIR --bodies FILE
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from bench.paired import ratio_stats

__all__ = ["main"]


def _start(tree: Path, data: Path, bodies: Path) -> subprocess.Popen[str]:
    probe = Path(__file__).resolve().parent / "asgi_probe.py"
    cmd = [sys.executable, str(probe), "--data", str(data), "--bodies", str(bodies), "--stdin"]
    env = {**os.environ, "PYTHONPATH": str(tree)}
    proc = subprocess.Popen(
        cmd, cwd=tree, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None
    if proc.stdout.readline().strip() != "ready":
        raise RuntimeError(f"the probe of {tree} did not start")
    return proc


def same_answers(a_tree: Path, b_tree: Path, data: Path, bodies: Path) -> tuple[int, int]:
    """How many of the ``asgi_probe --check`` answers the two trees give byte for byte alike,
    of how many."""
    probe = Path(__file__).resolve().parent / "asgi_probe.py"
    got = []
    with tempfile.TemporaryDirectory() as tmp:
        for i, tree in enumerate((a_tree, b_tree)):
            out = Path(tmp) / f"{i}.txt"
            cmd = [sys.executable, str(probe), "--data", str(data), "--bodies", str(bodies)]
            env = {**os.environ, "PYTHONPATH": str(tree)}
            subprocess.run([*cmd, "--check", str(out)], cwd=tree, env=env, check=True)
            got.append(out.read_text().splitlines())
    a, b = got
    return sum(x == y for x, y in zip(a, b, strict=False)), max(len(a), len(b))


def _turn(proc: subprocess.Popen[str], n: int) -> float:
    assert proc.stdin is not None
    assert proc.stdout is not None
    proc.stdin.write(f"{n}\n")
    proc.stdin.flush()
    return float(proc.stdout.readline())


def ab_arguments(doc: str | None) -> argparse.ArgumentParser:
    """The arguments every A/B tool of two trees takes: the trees, the data, the bodies."""
    ap = argparse.ArgumentParser(description=doc)
    ap.add_argument("--a-tree", required=True, type=Path)
    ap.add_argument("--b-tree", required=True, type=Path)
    ap.add_argument("--data", required=True, type=Path)
    ap.add_argument("--bodies", required=True, type=Path)
    return ap


def main(argv: list[str] | None = None) -> int:
    ap = ab_arguments(__doc__)
    ap.add_argument("--rounds", type=int, default=30)
    ap.add_argument("--turn", type=int, default=600)
    ap.add_argument("--no-check", action="store_true", help="skip the byte-for-byte check")
    args = ap.parse_args(argv)
    if not args.no_check:
        same, total = same_answers(
            args.a_tree.resolve(), args.b_tree.resolve(), args.data.resolve(), args.bodies.resolve()
        )
        print(f"answers byte for byte alike: {same} of {total}", flush=True)
        if same != total:
            return 1
    procs = {
        side: _start(tree.resolve(), args.data.resolve(), args.bodies.resolve())
        for side, tree in (("a", args.a_tree), ("b", args.b_tree))
    }
    try:
        for side in ("a", "b"):
            _turn(procs[side], 4096)  # every body once: the column cache and memos as in use
        got: dict[str, list[float]] = {"a": [], "b": []}
        for r in range(args.rounds):
            for side in ("a", "b") if r % 2 == 0 else ("b", "a"):
                got[side].append(_turn(procs[side], args.turn))
            print(f"round {r}: a {got['a'][-1]:.0f} us, b {got['b'][-1]:.0f} us", flush=True)
        ratio = ratio_stats(got["b"], got["a"])
        med = {s: sorted(v)[len(v) // 2] for s, v in got.items()}
        low = {s: min(v) for s, v in got.items()}
        print(
            f"CPU us per request: median a {med['a']:.0f}, b {med['b']:.0f}; lowest turn "
            f"a {low['a']:.0f}, b {low['b']:.0f}; per-round b/a "
            f"{ratio.median:.3f} [{ratio.p10:.3f}-{ratio.p90:.3f}] over {args.rounds} rounds"
        )
    finally:
        close_children(procs.values(), timeout=30)
    return 0


def close_children(procs: Iterable[subprocess.Popen[Any]], timeout: float) -> None:
    """End the A/B tools' child processes: close each one's stdin, then wait for it."""
    for proc in procs:
        assert proc.stdin is not None
        proc.stdin.close()
        proc.wait(timeout=timeout)


if __name__ == "__main__":
    raise SystemExit(main())
