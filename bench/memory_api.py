"""memory_create through the API: the dispatch room in process, and over loopback HTTP.

The same write as the store-level rows (:mod:`bench.bench_memory`) but as an agent
makes it: ``call_primitive(ctx, "memory_create", args, token=...)`` (token check,
validation, place resolution, content digest, the write, a signed receipt) in this
process, and ``POST /v1/memory_create`` with ``Authorization: Bearer ...`` to the
real ``earthmem serve`` (access log off; one worker, and its default of one per
core, each worker process with its own interpreter lock) from :mod:`bench.loadgen` in its
own process (one keep-alive connection per writer, connected before the clock starts,
requests pre-encoded: a light client on the shared cores), and the server's
start-up warm-up finished (:func:`settle`: its CPU idle for half a second). Each row
carries the CPU milliseconds per write of what served it (``cpu_ms_per_write``: this
process's ``process_time`` in process, the server's process tree from ``/proc`` over
HTTP): on a shared machine wall time also measures the neighbours. Each call
carries a fresh ``operation_id``. The item is a decision-free observation at a
lat/lng with no claim and no cube evidence, so the data directory needs no cube. :func:`claim_rows` measures
apart the write that confirms a claim against the cube (the tiny sample area's
flood, ``indices.ndwi gt 0`` on its date: corroborated), in process, on the
area's ingested data directory (built once and cached by
:func:`bench.common.demo_area`). The per-token write rate limit is lifted for
the run (``EARTHMEM_WRITE_RATE``), since it would otherwise be what is measured.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.common import CACHE_DIR, REPO, Timing
from bench.queries.rows import ENV
from bench.server_cpu import settle, tree_cpu_s

__all__ = ["api_rows", "claim_rows"]

_WRITERS = (1, 8)
"""Concurrent writers of each case."""
_MAX_WRITERS = max(_WRITERS)

_UNLIMITED = {"EARTHMEM_WRITE_RATE": "1000000000", "EARTHMEM_WRITE_BURST": "1000000000"}


def _args(k: int) -> dict[str, Any]:
    return {
        "type": "observation",
        "title": f"fields under water #{k}",
        "statement": "the paddy fields beside the Jumar river were under water on 2024-08-10",
        "tags": ["flood", "river", "paddy"],
        "details": "seen from the embankment road; water up to the field bunds",
        "where": {"lat": 24.0 + (k % 100) * 1e-3, "lng": 89.0 + (k // 100 % 100) * 1e-3},
        "metadata": {"source": "bench"},
        "operation_id": f"bench-api-{k}",
    }


def _counter() -> Callable[[], int]:
    n = [0]
    lock = threading.Lock()

    def nxt() -> int:
        with lock:
            n[0] += 1
            return n[0]

    return nxt


def _p95(samples: list[float]) -> float:
    return statistics.quantiles(samples, n=20)[-1] if len(samples) > 1 else samples[0]


def api_rows(
    backend: str,
    memory_url: str | None,
    run_writers: Callable[..., tuple[list[float], float]],
    bare: Callable[[int, int], None],
    n: int,
    durability: str,
) -> list[dict[str, Any]]:
    """p50/p95 and writes/s with 1 and 8 writers, in process and over HTTP, vs the bare insert."""
    from api.context import ServiceContext
    from api.dispatch import call_primitive
    from api.memory.auth import issue_token
    from bench.queries.http_server import Server

    out: list[dict[str, Any]] = []
    saved = {k: os.environ.get(k) for k in _UNLIMITED}
    os.environ.update(_UNLIMITED)
    try:
        with tempfile.TemporaryDirectory(prefix="bench-memory-api-") as tmp:
            data = Path(tmp) / "data"
            data.mkdir()
            ctx = ServiceContext(data, memory_url=memory_url)
            token = issue_token(ctx.memory(), "bench", ("read", "write"))[0]
            _as_a_server_starts(ctx)
            nxt = _counter()

            def in_process(w: int, i: int) -> None:
                answer = call_primitive(ctx, "memory_create", _args(nxt()), token=token)
                if "error" in answer:
                    raise RuntimeError(answer["error"])

            out += _measure(
                f"in process, {backend}",
                _threads(run_writers, in_process),
                _threads(run_writers, bare),
                n,
                durability,
                time.process_time,
            )
            ctx.memory().close()

            env = {**_UNLIMITED, **({"EARTHMEM_MEMORY_URL": memory_url} if memory_url else {})}
            log = CACHE_DIR / "logs" / f"serve_memory_{backend.split()[0]}.log"
            log.parent.mkdir(parents=True, exist_ok=True)
            for workers in dict.fromkeys((1, os.cpu_count() or 1)):
                with Server(data, log, quiet=True, workers=workers, env=env) as srv:
                    # The server answers /healthz while its start-up warm-up (the cube reader,
                    # the k-NN tables' imports, numba's among them, then gc.freeze) still runs
                    # on a background thread: ~1.3 s of CPU after the first answer, which
                    # otherwise lands in the 1-writer row's window (and competes for its GIL).
                    settle(lambda: tree_cpu_s(srv.proc.pid))
                    out += _measure(
                        f"over HTTP ({workers} worker{'s' if workers > 1 else ''}), {backend}",
                        _loadgen(srv.url, token, nxt),
                        _threads(run_writers, bare),
                        n,
                        durability,
                        lambda: tree_cpu_s(srv.proc.pid),
                    )
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    return out


def _as_a_server_starts(ctx: Any) -> None:
    """The in-process rows' context as ``earthmem serve`` has its own once started: warmed,
    then what the process holds frozen (:func:`api.rest.freeze_start_up`: in this process that
    is also the bench's own imports, Dagster's among them, which a server does not load)."""
    from api.rest import freeze_start_up

    ctx.warm()
    freeze_start_up()


def claim_rows(
    memory_url: str,
    run_writers: Callable[..., tuple[list[float], float]],
    bare: Callable[[int, int], None],
    n: int,
    durability: str,
) -> list[dict[str, Any]]:
    """memory_create with a claim the cube confirms, in process, 1 and 8 writers (SQLite)."""
    from api.context import ServiceContext
    from api.dispatch import call_primitive
    from api.memory.auth import issue_token
    from bench.common import demo_area

    area = demo_area("tiny")
    flood = next(e for e in area.manifest()["events"] if e["kind"] == "flood")
    saved = {k: os.environ.get(k) for k in _UNLIMITED}
    os.environ.update(_UNLIMITED)
    try:
        ctx = ServiceContext(area.data, manifest_path=area.manifest_path, memory_url=memory_url)
        token = issue_token(ctx.memory(), "bench", ("read", "write"))[0]
        _as_a_server_starts(ctx)
        nxt = _counter()

        def with_claim(w: int, i: int) -> None:
            k = nxt()
            args = {
                **_args(k),
                "where": {"lat": flood["centre"]["lat"], "lng": flood["centre"]["lng"]},
                "valid_at": "2024-08-10",
                "claim": {"band": "indices.ndwi", "op": "gt", "value": 0, "date": "2024-08-10"},
            }
            answer = call_primitive(ctx, "memory_create", args, token=token)
            if "error" in answer:
                raise RuntimeError(answer["error"])
            if answer["result"]["claim_check"]["verdict"] != "corroborated":
                raise RuntimeError(f"the flood claim was not corroborated: {answer['result']}")

        try:
            return _measure(
                "with a claim the cube confirms, in process, sqlite (FULL)",
                _threads(run_writers, with_claim),
                _threads(run_writers, bare),
                n,
                durability,
                time.process_time,
            )
        finally:
            ctx.memory().close()
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


Drive = Callable[[int, int], tuple[list[float], float]]
"""``drive(writers, per_writer)``: that many writers at once, each making ``per_writer``
writes one after the other; every write's latency (seconds) and the wall seconds."""


def _threads(
    run_writers: Callable[..., tuple[list[float], float]], one: Callable[[int, int], None]
) -> Drive:
    """Writers as threads of this process, each calling ``one(writer, i)``."""
    return lambda writers, per: run_writers(writers, per, one)


def _loadgen(url: str, token: str, nxt: Callable[[], int]) -> Drive:
    """Writers as keep-alive connections of :mod:`bench.loadgen` in its own process: raw
    HTTP/1.1 on asyncio, every request pre-encoded with its own ``operation_id`` and sent once,
    connected before its clock starts. The bench's own client costs the shared cores far less
    than a client library would (``httpx`` clients on threads of this process cost ~1 ms of
    CPU a write until session 17: on 2 cores, a third of what the 8-writer row measured)."""

    def drive(writers: int, per: int) -> tuple[list[float], float]:
        bodies = [_args(nxt()) for _ in range(writers * per)]
        with tempfile.TemporaryDirectory(prefix="bench-loadgen-") as tmp:
            path, out = Path(tmp) / "bodies.json", Path(tmp) / "out.json"
            path.write_text(json.dumps(bodies))
            cmd = [sys.executable, "-m", "bench.loadgen", "--url", url + "/v1/memory_create"]
            cmd += ["--bodies", str(path), "--connections", str(writers), "--once", "--raw"]
            cmd += ["--seconds", "600", "--header", f"Authorization: Bearer {token}"]
            subprocess.run([*cmd, "--json", str(out)], cwd=REPO, env=ENV, check=True)
            res = json.loads(out.read_text())
        if res["non_200"] or res["errors"] or res["requests_ok"] != len(bodies):
            raise RuntimeError(
                f"memory_create over HTTP: {res['requests_ok']} of {len(bodies)} answered 200"
                f" ({res['non_200']} other statuses, {res['errors']} transport errors)"
            )
        return res["latencies_s"], res["seconds"]

    return drive


def _measure(
    where: str,
    drive: Drive,
    bare: Drive,
    n: int,
    durability: str,
    cpu: Callable[[], float],
) -> list[dict[str, Any]]:
    """``cpu()``: the CPU seconds so far of what serves the calls."""
    rows: list[dict[str, Any]] = []
    drive(1, min(10, n))  # warm-up: schema caches, the server's first calls
    # ... and as many writers at once as the widest case, so its first calls do not open the
    # store's pooled connections (and the server's worker threads) inside the timed window
    drive(_MAX_WRITERS, 1)
    for writers in _WRITERS:
        per = max(1, n // writers)
        cpu0 = cpu()
        lat, wall = drive(writers, per)
        cpu_ms = (cpu() - cpu0) * 1e3 / len(lat)
        blat, bwall = bare(writers, per)
        ms = [x * 1e3 for x in lat]
        t, b = Timing.of(ms), Timing.of([x * 1e3 for x in blat])
        rate, brate = len(lat) / wall, len(blat) / bwall
        sqlite_target = "sqlite" in where
        rows.append(
            {
                "case": f"memory_create {where}, {writers} writer(s)",
                "data": f"{len(lat)} creates, {writers} writer(s), {durability}",
                **t.as_dict(),
                "p95": _p95(ms),
                "unit": "ms",
                "writes_per_s": rate,
                "cpu_ms_per_write": cpu_ms,
                "baseline_case": "bare insert of the same row, same writers and durability",
                "baseline": {**b.as_dict(), "writes_per_s": brate},
                "ratio": t.median / b.median,
                "ratio_def": "memory_create p50 / bare insert p50",
                "target": (
                    ("<= 5 ms" if writers == 1 else ">= 500 writes/s")
                    if sqlite_target
                    else "(info)"
                ),
                "met": (
                    (t.median <= 5.0 if writers == 1 else rate >= 500) if sqlite_target else None
                ),
            }
        )
    return rows
