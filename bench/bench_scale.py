"""Scaling benches: warm queries on local disk vs a loopback S3 server, ingest with 1 vs 2 Dask workers.

    python -m bench.bench_scale [--quick] [--json PATH] [--only storage,dask]

* ``storage``: the area ingested twice, each in a fresh child process — into a local data
  directory, and with its data root on an S3-compatible server on loopback (moto in server
  mode, ``EARTHMEM_OBJECT_STORE``): wall times and their ratio. Then two ``earthmem serve``
  processes, one on the local data directory and one on the S3 root from an empty data
  directory, answer did_change and area_over_time over HTTP, alternated request by request
  (paired rounds, after warm-up requests): ratio S3 / local of a warm server. moto is a
  Python server, slower per request than S3 and without network latency; the row is what a
  warm replica pays for its tip checks and chunk fetches, not a forecast of S3.
* ``dask``: the area's ingest with ``EARTHMEM_INGEST_EXECUTOR=dask`` on a LocalCluster of 1
  and of 2 worker processes (``EARTHMEM_DASK_WORKERS``), each in a fresh child process into a
  fresh data directory, paired in ``--rounds`` rounds (default 3; the order alternates):
  median of the per-round ratios t(1) / t(2) with p10–p90, target >= 1.6 on 2 cores (the
  coordinator shares the cores). The load average before and after each run is kept with the row, and the CPU
  seconds of the coordinator process (S) and of each worker process (P): a second row is the
  coordinator's share s = S / (S + P) of the 1-worker run, with the bound 2 / (1 + s) that it
  puts on the speed-up of 2 workers on 2 cores when S runs while the workers wait (Amdahl;
  1.6x needs s <= 25 %). CPU seconds are steadier than wall times on a shared machine.

Both ingests of the storage part also time every cube commit (``CubeWriter.commit_session``):
a row compares the median commit on moto with the one on local disk.

Not part of ``python -m bench.run``'s default set (each row is whole ingests of the area).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import REPO, demo_area, machine, steal_during, steal_seconds, write_json
from bench.paired import paired
from bench.queries.http_server import Server
from bench.queries.rows import ENV, row, scale

__all__ = ["main"]

OBJECT_STORE_ENV = "EARTHMEM_OBJECT_STORE"
BUCKET = "earthmem-bench"


def _log(msg: str) -> None:
    print(f"[bench_scale] {msg}", file=sys.stderr, flush=True)


def _ingest_child(data: str, sample: str) -> int:
    """In the child process: ingest the area into ``data``; print seconds and failures.

    The Dagster instance is the one ``earthmem ingest`` opens (``<data>/dagster_home`` with
    the repo's ``deploy/dagster.yaml``: its SQLite storage, ``pipelines.dagster_event_log``),
    so the coordinator's Dagster cost is the deployed one (before session 13: Dagster's
    in-memory instance).
    """
    from pipelines.instance import open_instance
    from pipelines.run import ingest_area

    commits = _time_commits()
    t0 = time.perf_counter()
    cpu0 = _cpu_self()
    home = Path(data) / "dagster_home"
    with open_instance(home, REPO / "deploy" / "dagster.yaml") as instance:
        report = ingest_area(
            Path(data),
            Path(sample) / "catalog.json",
            Path(sample) / "manifest.json",
            instance=instance,
        )
    doc = {
        "seconds": time.perf_counter() - t0,
        "failed": report.failed,
        "partitions": report.partitions,
        "cpu_coordinator": _cpu_self() - cpu0,
        "cpu_workers": _cpu_workers(),
        "commit_seconds": commits,
    }
    print(json.dumps(doc))
    return 0


def _time_commits() -> list[float]:
    """Record the wall time of every cube commit of this process (the list fills as it runs).

    Wraps :meth:`store.cube.write.CubeWriter.commit_session`, the one call both executors
    commit through (a week's transaction, a range's cooperative commit).
    """
    from store.cube.write import CubeWriter

    seconds: list[float] = []
    commit = CubeWriter.commit_session

    def timed(self: Any, *args: Any, **kwargs: Any) -> Any:
        t = time.perf_counter()
        try:
            return commit(self, *args, **kwargs)
        finally:
            seconds.append(time.perf_counter() - t)

    CubeWriter.commit_session = timed  # type: ignore[method-assign]
    return seconds


def _cpu_self() -> float:
    """User + system CPU seconds of this process (all its threads: Dagster, the scheduler)."""
    import resource

    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


def _cpu_workers() -> list[float]:
    """User + system CPU seconds of each worker process of this process's LocalCluster."""
    from distributed import Client

    from pipelines.cluster import local_clusters

    out: list[float] = []
    for local in local_clusters():
        with Client(local, set_as_default=False) as client:
            out += sorted(client.run(_cpu_self).values())
    return out


def _ingest(sample: Path, data: Path, env: dict[str, str], log: Path) -> dict[str, Any]:
    """One ingest of the area in a fresh child process with ``env`` added.

    Besides the load average it keeps the CPU time stolen by the hypervisor during the run
    (``steal_s``): on a shared VM a run's wall time grows with it while its CPU time does not.
    """
    base = {k: v for k, v in ENV.items() if k != OBJECT_STORE_ENV}
    before = os.getloadavg()
    steal0 = steal_seconds()
    cmd = [sys.executable, "-m", "bench.bench_scale", "--ingest-child", str(data), str(sample)]
    out = subprocess.run(
        cmd, cwd=REPO, env={**base, **env}, capture_output=True, text=True, timeout=3600
    )
    log.write_text(out.stderr)
    if out.returncode != 0:
        raise RuntimeError(f"ingest into {data} failed (see {log}): {out.stderr[-500:]}")
    doc: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    if doc["failed"]:
        raise RuntimeError(f"ingest into {data} failed partitions: {doc['failed']}")
    doc["load_before"] = [round(x, 2) for x in before]
    doc["load_after"] = [round(x, 2) for x in os.getloadavg()]
    doc["steal_s"] = steal_during(steal0)
    return doc


def _query_args(area: Any, http: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    """did_change at the planted clearing (its clear span) and area_over_time over the flood."""
    from store import address

    events = {e["kind"]: e for e in area.manifest()["events"]}
    centre = events["forest_clearing"]["centre"]
    cell = address.encode(centre["lat"], centre["lng"])
    tr = http.post("/v1/trajectory", json={"cell": cell, "band": "indices.ndvi"}).json()
    clear = [p["tslot"] for p in tr["points"] if p["clear"]]
    change = {"cell": cell, "band": "indices.ndvi", "window": [clear[0], clear[-1]]}
    flood = events["flood"]
    area_args = {
        "geometry": flood["geometry"],
        "start_date": "2024-07-01",
        "end_date": flood["end"],
        "index": "ndwi",
    }
    return change, area_args


def bench_storage(area: Any, rounds: int, tmp: Path) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Ingest and warm queries: local data directory vs the data root on moto."""
    import httpx

    from tests import s3_server

    moto = s3_server.start(tmp / "moto.log")
    try:
        moto.create_bucket(BUCKET)
        s3_env = {**moto.env(), OBJECT_STORE_ENV: f"s3://{BUCKET}/area"}
        local = _ingest(area.sample, tmp / "local", {}, tmp / "ingest-local.log")
        _log(f"local ingest {local['seconds']:.0f} s")
        remote = _ingest(area.sample, tmp / "s3", s3_env, tmp / "ingest-s3.log")
        _log(f"S3 ingest {remote['seconds']:.0f} s")
        replica = tmp / "replica"
        replica.mkdir()
        rows = [
            row(
                "ingest of the area, data root on S3 (moto, loopback)",
                "s",
                remote["seconds"],
                baseline_case="the same ingest into a local data directory",
                baseline=local["seconds"],
                ratio=remote["seconds"] / local["seconds"],
                ratio_def="S3 / local (one run each)",
                target="(info)",
                load=[local["load_before"], remote["load_after"]],
            ),
            _commit_row(local, remote),
        ]
        with (
            Server(tmp / "local", tmp / "serve-local.log", quiet=True) as srv_local,
            Server(replica, tmp / "serve-s3.log", quiet=True, env=s3_env) as srv_s3,
            httpx.Client(base_url=srv_local.url, timeout=120) as a_local,
            httpx.Client(base_url=srv_s3.url, timeout=120) as a_s3,
        ):
            change, area_args = _query_args(area, a_local)
            for name, args in (("did_change", change), ("area_over_time", area_args)):

                def call(client: Any, name: str = name, args: dict[str, Any] = args) -> None:
                    resp = client.post(f"/v1/{name}", json=args)
                    if resp.status_code != 200:
                        raise RuntimeError(f"{name}: {resp.status_code} {resp.text[:300]}")

                pair = paired(lambda _: call(a_s3), lambda _: call(a_local), rounds, warmup=5)
                rows.append(
                    row(
                        f"{name} over HTTP, warm server, cube on S3 (moto, loopback)",
                        "ms",
                        scale(pair.a, 1e3),
                        baseline_case=f"{name} over HTTP, warm server, local data directory",
                        baseline=scale(pair.b, 1e3),
                        ratio_def="S3 / local per round",
                        target="(info)",
                        **pair.ratio_fields(),
                    )
                )
                _log(f"{name}: S3/local {pair.ratio.median:.2f}")
        return rows, {"ingest_local": local, "ingest_s3": remote}
    finally:
        moto.stop()


def _commit_row(local: dict[str, Any], remote: dict[str, Any]) -> dict[str, Any]:
    """The cube commits of the two ingests: median seconds a commit, S3 vs local disk."""
    import statistics

    a, b = remote["commit_seconds"], local["commit_seconds"]
    ms_a, ms_b = 1e3 * statistics.median(a), 1e3 * statistics.median(b)
    return row(
        "cube commit during the ingest, data root on S3 (moto, loopback), median",
        "ms",
        ms_a,
        baseline_case="the same commits into a local data directory, median",
        baseline=ms_b,
        ratio=ms_a / ms_b,
        ratio_def="S3 / local, medians over the ingest's commits",
        target="(info)",
        commits=len(a),
        total_s={"s3": round(sum(a), 2), "local": round(sum(b), 2)},
        p90_ms={
            "s3": round(1e3 * statistics.quantiles(a, n=10)[-1], 1) if len(a) > 1 else ms_a,
            "local": round(1e3 * statistics.quantiles(b, n=10)[-1], 1) if len(b) > 1 else ms_b,
        },
    )


def bench_dask(
    area: Any, tmp: Path, rounds: int = 3
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The area's ingest on a LocalCluster of 1 and of 2 worker processes, paired in rounds, and
    in process (the default executor) beside them.

    Each round ingests the area once with 1 worker, once with 2 and once in process, each in a fresh child
    process into a fresh data directory (deleted after the run; nothing is shared between
    runs but the OS page cache of the sample's files and numba's on-disk cache, both warm
    after the first run). The order rotates (1, 2, in process / 2, in process, 1 / ...), so a
    drift in the machine's speed over the rounds does not favour one arm. The row is the median
    of the per-round ratios t(1) / t(2) with its p10–p90; a second row pairs in process with 2
    workers (is the default, in process, the faster on this machine?).
    """
    import shutil

    from bench.paired import paired_samples

    if rounds < 1:
        raise ValueError(f"rounds must be >= 1, got {rounds}")
    runs: dict[int, list[dict[str, Any]]] = {1: [], 2: []}
    local: list[dict[str, Any]] = []  # the default executor: in the run's own process
    for i in range(rounds):
        arms: list[int] = [1, 2, 0]  # 0: in process
        for workers in arms[i % 3 :] + arms[: i % 3]:  # each arm first, middle and last in turn
            env = (
                {"EARTHMEM_INGEST_EXECUTOR": "dask", "EARTHMEM_DASK_WORKERS": str(workers)}
                if workers
                else {"EARTHMEM_INGEST_EXECUTOR": "local"}
            )
            data = tmp / f"dask{workers}_r{i}"
            run = _ingest(area.sample, data, env, tmp / f"dask{workers}_r{i}.log")
            shutil.rmtree(data, ignore_errors=True)
            run["round"] = i
            if not workers:
                local.append(run)
                _log(f"round {i}, in process: {run['seconds']:.1f} s")
                continue
            run["share"] = _serial_share(run)
            runs[workers].append(run)
            _log(
                f"dask round {i}, {workers} worker(s): {run['seconds']:.1f} s,"
                f" coordinator {run['share']['coordinator_cpu_s']:.1f} s CPU,"
                f" workers {run['share']['workers_cpu_s']} s CPU,"
                f" load {run['load_before'][0]:.2f} -> {run['load_after'][0]:.2f},"
                f" stolen {run['steal_s']} s"
            )
    p = paired_samples([r["seconds"] for r in runs[1]], [r["seconds"] for r in runs[2]])
    speedup = p.ratio  # t(1) / t(2) per round (A = 1 worker, B = 2 workers)
    per_round = [round(a / b, 3) for a, b in zip(p.a_samples, p.b_samples, strict=True)]
    _log(
        f"dask: t(1)/t(2) per round {per_round}"
        f" median {speedup.median:.2f} [{speedup.p10:.2f}-{speedup.p90:.2f}]"
    )
    p_local = paired_samples([r["seconds"] for r in runs[2]], [r["seconds"] for r in local])
    serial = [r["share"]["serial_share"] for r in runs[1]]
    s_med = statistics.median(serial)
    rows = [
        row(
            "ingest of the area, Dask LocalCluster of 2 worker processes",
            "s",
            p.b,
            baseline_case="the same ingest with 1 worker process",
            baseline=p.a,
            ratio=speedup.median,
            ratio_p10=speedup.p10,
            ratio_p90=speedup.p90,
            rounds=p.rounds,
            ratio_def=(
                "median over rounds of t(1 worker) / t(2 workers); each round runs both,"
                " the order alternating"
            ),
            target=">= 1.6",
            met=speedup.median >= 1.6,
            load={
                str(w): [[r["load_before"][0], r["load_after"][0]] for r in rs]
                for w, rs in runs.items()
            },
            cpu={str(w): [r["share"] for r in rs] for w, rs in runs.items()},
            steal={str(w): [_steal_share(r) for r in rs] for w, rs in runs.items()},
        ),
        row(
            "ingest of the area, Dask, 1 worker: coordinator's share of the CPU (serial part)",
            "%",
            100 * s_med,
            ratio_def=(
                "s = coordinator CPU / (coordinator + workers) CPU, median over rounds;"
                " 2 workers at most 2/(1+s)"
            ),
            target="<= 25 (for >= 1.6x)",
            met=s_med <= 0.25,
            per_round=[round(100 * x, 1) for x in serial],
            bound_2_cores=2 / (1 + s_med),
        ),
    ]
    rows.append(
        row(
            "ingest of the area in process (the default executor) vs Dask LocalCluster of 2",
            "s",
            p_local.b,
            baseline_case="the same ingest on a LocalCluster of 2 worker processes",
            baseline=p_local.a,
            ratio=p_local.ratio.median,
            ratio_p10=p_local.ratio.p10,
            ratio_p90=p_local.ratio.p90,
            rounds=p_local.rounds,
            ratio_def=(
                "median over rounds of t(2 workers) / t(in process): above 1, in process is"
                " the faster on this machine (pipelines/cluster.py chooses it by default)"
            ),
            target="(info: which executor the sample should default to here)",
            met=None,
            load=[[r["load_before"][0], r["load_after"][0]] for r in local],
            steal=[_steal_share(r) for r in local],
        )
    )
    return rows, {"runs": {**{str(w): rs for w, rs in runs.items()}, "in_process": local}}


def _steal_share(run: dict[str, Any]) -> dict[str, Any] | None:
    """The CPU seconds the hypervisor stole during a run and their share of its CPU-seconds.

    On this VM steal grows with the load: a run keeping both CPUs busy (2 workers) loses more
    of its wall time to it than one keeping one busy, which lowers t(1) / t(2) by a cause
    outside the code; the row keeps it beside each run.
    """
    if run.get("steal_s") is None:
        return None
    capacity = (os.cpu_count() or 1) * run["seconds"]
    return {"steal_s": run["steal_s"], "share_pct": round(100 * run["steal_s"] / capacity, 1)}


def _serial_share(run: dict[str, Any]) -> dict[str, Any]:
    """CPU seconds of the coordinator (S) and the workers (P), s = S / (S + P), and 2 / (1 + s).

    The coordinator is the ingest's own process: Dagster, the scheduler of the LocalCluster,
    the merges and commits. When S runs while the workers wait and P splits evenly over 2
    workers on 2 cores, t(1) / t(2) = (S + P) / (S + P / 2) = 2 / (1 + s) (Amdahl's law).
    """
    s, p = run["cpu_coordinator"], sum(run["cpu_workers"])
    return {
        "coordinator_cpu_s": round(s, 1),
        "workers_cpu_s": [round(x, 1) for x in run["cpu_workers"]],
        "serial_share": s / (s + p),
        "bound_2_cores": 2 * (s + p) / (2 * s + p),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--quick", action="store_true", help="tiny sample, few rounds")
    ap.add_argument("--json", help="write results as JSON here")
    ap.add_argument("--only", default="storage,dask")
    ap.add_argument(
        "--rounds", type=int, default=3, help="paired rounds of the Dask row (1 and 2 workers)"
    )
    ap.add_argument("--ingest-child", nargs=2, metavar=("DATA", "SAMPLE"), help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.ingest_child:
        return _ingest_child(*args.ingest_child)
    only = set(args.only.split(","))
    size = "tiny" if args.quick else "demo"
    t_start = time.perf_counter()
    area = demo_area(size)
    rows: list[dict[str, Any]] = []
    info: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="earthmem-bench-scale-") as tmp_dir:
        tmp = Path(tmp_dir)
        if "storage" in only:
            r, info["storage"] = bench_storage(area, 10 if args.quick else 200, tmp)
            rows += r
        if "dask" in only:
            r, info["dask"] = bench_dask(area, tmp, 1 if args.quick else args.rounds)
            rows += r
    doc = {
        "bench": "scale",
        "title": "Scaling: local disk vs loopback S3, 1 vs 2 Dask workers",
        "machine": machine(),
        "data": {"area": size},
        "rows": rows,
        "info": info,
        "notes": [
            "S3 is moto in server mode on loopback (a Python server; no network latency).",
            "The storage ingest rows are one run each; the Dask row is paired rounds (1 and 2"
            " workers, order alternating). The load average is kept per run.",
        ],
        "seconds": time.perf_counter() - t_start,
    }
    write_json(args.json, doc)
    for one in rows:
        base = one["baseline"]["median"] if one.get("baseline") else None
        print(
            f"{one['case'][:70]:70} {one['median']:10.4g} {one['unit']:3} base {base}"
            f" ratio {one['ratio']}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
