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
* ``dask``: the area's ingest with ``EARTHMEM_INGEST_EXECUTOR=dask`` on a LocalCluster of 1,
  then 2 worker processes (``EARTHMEM_DASK_WORKERS``), each in a fresh child process into a
  fresh data directory; ratio t(1) / t(2), target >= 1.6 on 2 cores (the coordinator shares
  the cores). The load average before and after each run is kept with the row.

Not part of ``python -m bench.run``'s default set (each row is whole ingests of the area).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import REPO, demo_area, machine, write_json
from bench.paired import paired
from bench.queries.http_server import Server
from bench.queries.rows import ENV, row, scale

__all__ = ["main"]

OBJECT_STORE_ENV = "EARTHMEM_OBJECT_STORE"
BUCKET = "earthmem-bench"


def _log(msg: str) -> None:
    print(f"[bench_scale] {msg}", file=sys.stderr, flush=True)


def _ingest_child(data: str, sample: str) -> int:
    """In the child process: ingest the area into ``data``; print seconds and failures."""
    from dagster import DagsterInstance

    from pipelines.run import ingest_area

    t0 = time.perf_counter()
    with DagsterInstance.ephemeral() as instance:
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
    }
    print(json.dumps(doc))
    return 0


def _ingest(sample: Path, data: Path, env: dict[str, str], log: Path) -> dict[str, Any]:
    """One ingest of the area in a fresh child process with ``env`` added."""
    base = {k: v for k, v in ENV.items() if k != OBJECT_STORE_ENV}
    before = os.getloadavg()
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
            )
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


def bench_dask(area: Any, tmp: Path) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The area's ingest on a LocalCluster of 1 and of 2 worker processes."""
    runs = {}
    for workers in (1, 2):
        env = {"EARTHMEM_INGEST_EXECUTOR": "dask", "EARTHMEM_DASK_WORKERS": str(workers)}
        runs[workers] = _ingest(
            area.sample, tmp / f"dask{workers}", env, tmp / f"dask{workers}.log"
        )
        _log(f"dask, {workers} worker(s): {runs[workers]['seconds']:.0f} s")
    t1, t2 = runs[1]["seconds"], runs[2]["seconds"]
    speedup = t1 / t2
    rows = [
        row(
            "ingest of the area, Dask LocalCluster of 2 worker processes",
            "s",
            t2,
            baseline_case="the same ingest with 1 worker process",
            baseline=t1,
            ratio=speedup,
            ratio_def="t(1 worker) / t(2 workers) (one run each)",
            target=">= 1.6",
            met=speedup >= 1.6,
            load={str(w): [r["load_before"], r["load_after"]] for w, r in runs.items()},
        )
    ]
    return rows, {"runs": runs}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--quick", action="store_true", help="tiny sample, few rounds")
    ap.add_argument("--json", help="write results as JSON here")
    ap.add_argument("--only", default="storage,dask")
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
            r, info["dask"] = bench_dask(area, tmp)
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
            "Ingest rows are one run each (whole ingests); the load average is kept per row.",
        ],
        "seconds": time.perf_counter() - t_start,
    }
    write_json(args.json, doc)
    for r in rows:
        base = r["baseline"]["median"] if r.get("baseline") else None
        print(
            f"{r['case'][:70]:70} {r['median']:10.4g} {r['unit']:3} base {base} ratio {r['ratio']}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
