"""did_change over loopback HTTP: the real ``earthmem serve`` in a subprocess, load from another."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from bench.common import CACHE_DIR, REPO, DemoArea, Timing, free_port, wait_http
from bench.paired import paired_calls, share_of_limit
from bench.queries.rows import ENV, row
from bench.server_cpu import settle, tree_cpu_s

HTTP_ROUNDS = 5
"""Paired rounds of the loaded HTTP row: a did_change window then a ceiling-app window, each
``seconds / HTTP_ROUNDS`` long (at least 0.5 s)."""

__all__ = ["Server", "bench_http"]


class Server:
    """``earthmem serve --data DIR --port P`` in a subprocess (the real command).

    With ``quiet=True`` the same command runs with ``--no-access-log`` (same workers);
    ``env`` adds to the child's environment (e.g. ``EARTHMEM_MEMORY_URL``); ``tree`` is the
    source tree it runs from (default this checkout; another one for an A/B of two trees).
    ``workers=None`` serves with ``earthmem serve``'s default (one per core); the
    ceiling app then runs as many processes.
    """

    def __init__(
        self,
        data: Path,
        log: Path,
        *,
        quiet: bool = False,
        workers: int | None = None,
        ceiling: bool = False,
        env: dict[str, str] | None = None,
        tree: Path = REPO,
    ) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self._log = log.open("wb")
        cmd = (
            [
                sys.executable,
                "-m",
                "bench.queries.ceiling",
                "--port",
                str(self.port),
                "--workers",
                str(workers or os.cpu_count() or 1),
                *(["--no-access-log"] if quiet else []),
            ]
            if ceiling
            else self._serve_cmd(data, quiet, workers)
        )
        self.proc = subprocess.Popen(
            cmd,
            cwd=tree,
            env={**ENV, "PYTHONPATH": str(tree), **(env or {})},
            stdout=self._log,
            stderr=subprocess.STDOUT,
        )
        try:
            wait_http(self.url + "/healthz", timeout=90)
        except TimeoutError:
            self.stop()
            raise

    def _serve_cmd(self, data: Path, quiet: bool, workers: int | None) -> list[str]:
        return [
            sys.executable,
            "-m",
            "cli.main",
            "serve",
            "--data",
            str(data),
            "--port",
            str(self.port),
            *(["--workers", str(workers)] if workers else []),
            *(["--no-access-log"] if quiet else []),
        ]

    def status(self) -> dict[str, int]:
        """``Vm*``/``Rss*`` lines of /proc/<pid>/status in KiB."""
        out = {}
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith(("VmHWM", "VmRSS", "RssAnon", "RssFile", "RssShmem")):
                k, v = line.split(":", 1)
                out[k] = int(v.split()[0])
        return out

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log.close()

    def __enter__(self) -> Server:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _load(
    url: str,
    body: dict[str, Any] | list[dict[str, Any]] | None,
    connections: int,
    seconds: float,
) -> dict[str, Any]:
    """Run bench.loadgen in its own process; return its JSON (a list of bodies rotates)."""
    with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as f:
        out = f.name
    bodies = None
    if isinstance(body, list):
        with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
            json.dump(body, f)
            bodies = f.name
    cmd = [
        sys.executable,
        "-m",
        "bench.loadgen",
        "--url",
        url,
        "--connections",
        str(connections),
        "--seconds",
        str(seconds),
        "--json",
        out,
    ]
    if bodies is not None:
        cmd += ["--bodies", bodies]
    elif body is not None:
        cmd += ["--body", json.dumps(body)]
    try:
        subprocess.run(cmd, cwd=REPO, env=ENV, check=True, timeout=seconds + 60)
    finally:
        if bodies is not None:
            os.unlink(bodies)
    res: dict[str, Any] = json.loads(Path(out).read_text())
    os.unlink(out)
    return res


def bench_http(
    area: DemoArea, args: list[dict[str, Any]], seconds: float, connections: int
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """did_change requests/s over loopback HTTP vs the ceiling app (:mod:`bench.queries.ceiling`).

    ``earthmem serve`` runs as a user starts it (its default workers, one per
    core) and the ceiling app with as many processes and the same logging. The
    requests rotate through ``args`` (distinct cells, so the server's per-cell
    series memo is not one entry hit for ever). The loaded row alternates a
    did_change window and a ceiling window (:data:`HTTP_ROUNDS` paired rounds);
    its ratio is the per-round share of the ceiling, which can never exceed
    100 % (above it the row is marked a metric defect).
    """
    workers = os.cpu_count() or 1
    log = CACHE_DIR / "logs" / "serve_http.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    window = max(0.5, seconds / HTTP_ROUNDS)
    rounds = HTTP_ROUNDS if seconds >= 2 * HTTP_ROUNDS * 0.5 else 2
    windows: list[dict[str, Any]] = []
    ceil_windows: list[dict[str, Any]] = []
    with (
        Server(area.data, log, workers=workers) as srv,
        Server(
            area.data, log.with_name("serve_ceiling.log"), ceiling=True, workers=workers
        ) as ceil,
    ):
        url = srv.url + "/v1/did_change"
        _load(url, args, 4, min(2.0, seconds / 2))  # warm-up: column cache, signer, JIT paths
        # and each worker's start-up warm-up (~1.3 s of CPU on a background thread) is over
        # before the first window: otherwise it lands in the first earthmem windows
        settle(lambda: tree_cpu_s(srv.proc.pid))

        def fa(_: int) -> float:
            windows.append(_load(url, args, connections, window))
            return float(windows[-1]["rps"])

        def fb(_: int) -> float:
            ceil_windows.append(_load(ceil.url + "/v1/did_change", args, connections, window))
            return float(ceil_windows[-1]["rps"])

        pair = paired_calls(fa, fb, rounds, warmup=0)
        single = _load(url, args, 1, max(1.0, seconds / 3))
        rss = srv.status()
    with (
        Server(
            area.data, log.with_name("serve_http_quiet.log"), quiet=True, workers=workers
        ) as srv,
        Server(
            area.data,
            log.with_name("serve_ceiling_quiet.log"),
            quiet=True,
            ceiling=True,
            workers=workers,
        ) as ceil,
    ):
        url = srv.url + "/v1/did_change"
        _load(url, args, 4, min(2.0, seconds / 2))
        settle(lambda: tree_cpu_s(srv.proc.pid))
        quiet = _load(url, args, connections, seconds / 2)
        quiet_ceil = _load(ceil.url + "/v1/did_change", args, connections, seconds / 2)
    share = share_of_limit(pair.a_samples, pair.b_samples)
    errors = sum(w["errors"] + w["non_200"] for w in windows)
    ok = errors == 0
    ceiling_case = (
        f"ceiling: a constant-answer ASGI app, {workers} uvicorn processes (SO_REUSEPORT, as "
        "earthmem serve), same logging, same load"
    )
    rps = pair.a.median
    rows = [
        row(
            f"did_change over HTTP, {connections} keep-alive connections",
            "req/s",
            Timing.of(list(pair.a_samples)),
            baseline_case=ceiling_case,
            baseline=Timing.of(list(pair.b_samples)),
            ratio=share.median,
            ratio_p10=share.p10,
            ratio_p90=share.p90,
            rounds=pair.rounds,
            ratio_def="earthmem rps / ceiling rps, per round (share of the ceiling, <= 1)",
            target=(
                ">= 1500 req/s" if not share.defect else "METRIC DEFECT (share > 1): >= 1500 req/s"
            ),
            met=rps >= 1500 and ok and not share.defect,
            latency_ms=windows[-1]["latency_ms"],
            baseline_latency_ms=ceil_windows[-1]["latency_ms"],
            errors=errors,
            rounds_over_100pct=share.rounds_over,
            metric_defect=share.defect,
            data=f"{sum(w['requests_ok'] for w in windows)} requests in "
            f"{sum(w['seconds'] for w in windows):.1f} s ({pair.rounds} windows of {window:.1f} s); "
            f"earthmem serve with its default {workers} workers; requests rotate over "
            f"{len(args)} cells",
            caches="warm: server context and column cache filled by a warm-up load",
            load_sensitive="yes: server, load generator and any other job share the 2 cores; "
            "the absolute req/s follows the load, the per-round share less",
        ),
        row(
            "did_change over HTTP, 1 connection (unloaded latency)",
            "req/s",
            single["rps"],
            baseline_case=ceiling_case + f" ({connections} connections)",
            baseline=pair.b.median,
            ratio=single["rps"] / pair.b.median,
            ratio_def="earthmem rps / ceiling rps (unpaired)",
            target="(info)",
            latency_ms=single["latency_ms"],
            data=f"{single['requests_ok']} requests in {single['seconds']:.1f} s",
            load_sensitive="yes: latency of one process on a shared machine",
        ),
        row(
            f"did_change over HTTP, {connections} connections, uvicorn access log off",
            "req/s",
            quiet["rps"],
            baseline_case="the ceiling app, access log off, same load",
            baseline=quiet_ceil["rps"],
            ratio=quiet["rps"] / quiet_ceil["rps"],
            ratio_def="earthmem rps / ceiling rps (one window each, unpaired)",
            target="(info: what the access log costs)",
            latency_ms=quiet["latency_ms"],
            data=f"{quiet['requests_ok']} requests in {quiet['seconds']:.1f} s",
            load_sensitive="yes (as above)",
        ),
    ]
    return rows, {
        "server_status_kib": rss,
        "loadgen": "bench.loadgen (asyncio+uvloop raw HTTP/1.1)",
    }
