"""Cooperative commits with 1, 2, 4 and 8 forked writers, and the store's size from its layout.

Two parts, for docs/SCALING.md:

* **Fork / merge / commit cost** (measured). A coordinator opens one session
  (:class:`store.cube.cooperative.CooperativeCommit`), forks it N times; each fork
  writes one scene partition's worth of chunks (one block x one week of every
  day band: the five S2 indices, the S2 clear flag, S1 vv / vh / vh_vv and the
  S1 valid flag, with two overpass days of values) through the pipeline's own
  :class:`~store.cube.write.CubeTransaction`; the coordinator merges the forks and
  commits once. On a cluster the N fork writes run on N workers at once; here
  they run one after another (simulated), so the table reports each part
  separately: the writes (mean per fork), and the coordinator's serial part
  (merge + commit), which is what grows with N. Rounds write new weeks into the
  same store, so it grows as an ingest's does. Storage: local disk (the same
  repository code as object storage; object storage adds its request latency
  per chunk and per commit).
* **Sizing** (computed from the layout, with the bytes per chunk measured on the
  demo cube): cells, blocks, chunks and bytes per year per band family, tasks
  (scene partitions) per week, and commits per week for a district (1,000 km²),
  a state (100,000 km²) and India (3.3 M km²).

    python -m bench.bench_cooperative [--quick] [--rounds R] [--json PATH]
"""

from __future__ import annotations

import argparse
import asyncio
import math
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import Timing, demo_area, machine, write_json

__all__ = ["chunk_bytes", "main", "measure_forks", "sizing"]

DAY_BANDS = (
    "indices.ndvi",
    "indices.ndwi",
    "indices.ndmi",
    "indices.lswi",
    "indices.evi",
    "s2.clear",
    "s1.vv",
    "s1.vh",
    "indices.vh_vv",
    "s1.valid",
)
"""The day bands one scene partition writes (S2 and S1 of one week and block)."""
AREAS_KM2 = {"district": 1_000.0, "state": 100_000.0, "India": 3_287_000.0}
"""The sizes SCALING.md plans for."""
LATITUDE = 23.35
"""Latitude of the cell areas (Ranchi, the demo's): cells narrow with cos(latitude)."""
WEEKS_WITH_DATA = {"s2": 52, "s1": 30}
"""Weeks a year holding an overpass: S2 revisits every 5 days (2 satellites) and S1 every
12 days at this latitude (one satellite since 2022): every week, and ~30 of 52."""


def _block_write(lat_q0: int, lng_q0: int, t0: int, side: int, seed: int) -> Any:
    """One scene partition: every day band over one block and week, two overpass days."""
    from store.cube.bands import BANDS

    rng = np.random.default_rng(seed)
    days = np.array([t0 + 1, t0 + 4])

    def write(tx: Any) -> None:
        for band in DAY_BANDS:
            spec = BANDS[band]
            if spec.dtype == "uint8":
                vals = rng.integers(1, 3, size=(2, side, side), dtype=np.uint8)
            else:
                vals = rng.normal(0.3, 0.1, size=(2, side, side)).astype(np.float32)
            tx.write(band, days, lat_q0, lng_q0, vals)

    return write


def measure_forks(writers: list[int], rounds: int, side: int, work: Path) -> list[dict[str, Any]]:
    """Per N: fork write seconds (mean per fork), merge and commit seconds, over rounds."""
    from store.address import encode_q
    from store.cube import CubeWriter
    from store.cube.cooperative import CooperativeCommit, write_in_fork

    lat_q, lng_q = encode_q(LATITUDE, 85.3)
    lat_q0, lng_q0 = (lat_q // side) * side, (lng_q // side) * side
    data = work / "coop"
    shutil.rmtree(data, ignore_errors=True)
    writer = CubeWriter(data)
    t_week = 19_600 - 19_600 % 7  # a Thursday: chunk-aligned weeks
    out = []
    week = 0
    for n in writers:
        per: dict[str, list[float]] = {"write": [], "merge": [], "commit": [], "chunks": []}
        for r in range(rounds + 1):  # round 0 warms up (imports, the repository's caches)
            with CooperativeCommit(writer) as coop:
                forks = [coop.fork() for _ in range(n)]
                t0 = time.perf_counter()
                done = [
                    write_in_fork(
                        f,
                        f"w{week}b{i}",
                        _block_write(lat_q0, lng_q0 + i * side, t_week + 7 * week, side, i),
                    )
                    for i, f in enumerate(forks)
                ]
                t1 = time.perf_counter()
                coop.merge(done)
                t2 = time.perf_counter()
                coop.commit([], [d.partition_key for d in done], f"bench {n} forks")
                t3 = time.perf_counter()
            week += 1
            if r:
                per["write"].append((t1 - t0) / n)
                per["merge"].append(t2 - t1)
                per["commit"].append(t3 - t2)
                per["chunks"].append(sum(d.chunks_written for d in done))
        out.append(
            {
                "writers": n,
                "fork_write_s": Timing.of(per["write"]),
                "merge_s": Timing.of(per["merge"]),
                "commit_s": Timing.of(per["commit"]),
                "coordinator_s": Timing.of(
                    [m + c for m, c in zip(per["merge"], per["commit"], strict=True)]
                ),
                "chunks_per_commit": int(np.median(per["chunks"])),
                "rounds": rounds,
            }
        )
    shutil.rmtree(data, ignore_errors=True)
    return out


def chunk_bytes(data: Path) -> dict[str, dict[str, float]]:
    """Chunks and stored bytes per array of a cube (``{path: {chunks, bytes}}``)."""
    import zarr

    from store.cube import CubeReader

    store = CubeReader(data).session.store
    root = zarr.open_group(store, mode="r")
    arrays: list[str] = []

    def walk(group: Any, prefix: str) -> None:
        for k in group.group_keys():
            walk(group[k], f"{prefix}{k}/")
        arrays.extend(f"{prefix}{k}" for k in group.array_keys())

    walk(root, "")

    async def sizes(path: str) -> tuple[int, int]:
        total = n = 0
        async for key in store.list_prefix(path):
            if "/c/" in key:
                total += await store.getsize(key)
                n += 1
        return n, total

    out = {}
    for path in arrays:
        n, total = asyncio.run(sizes(path))
        if n:
            out[path] = {"chunks": n, "bytes": total}
    return out


def _family(path: str) -> str:
    if path.startswith("geotessera/"):
        return "geotessera"
    if path.startswith("summaries/"):
        return "summaries"
    if path.startswith("inventory/"):
        return "inventory"
    if path.startswith(("s1/", "indices/vh_vv")):
        return "s1"
    return "s2"


def _weeks(path: str) -> int:
    """Chunks a year per block of one array (weeks with an overpass; one Tessera vintage)."""
    if path.startswith("geotessera/"):
        return 1
    s1 = path.startswith(("s1/", "indices/vh_vv", "summaries/s1_", "summaries/indices_vh_vv"))
    return WEEKS_WITH_DATA["s1" if s1 else "s2"]


def sizing(measured: dict[str, dict[str, float]]) -> list[dict[str, Any]]:
    """Cells, blocks, chunks and bytes per year per family for each planned area.

    A block (``2**DEFAULT_BLOCK_LEVEL`` cells square) holds one chunk per week of each
    day band and of each band's per-block summaries, and one per year of each Tessera
    array; bytes per chunk are the demo cube's mean for that array.
    """
    from pipelines.run import RANGE_WEEKS
    from store.cube.layout import DEFAULT_BLOCK_LEVEL

    side = 2**DEFAULT_BLOCK_LEVEL
    lat_m = 180 / (2**21 - 1) * 111_320.0
    lng_m = 360 / (2**22 - 1) * 111_320.0 * math.cos(math.radians(LATITUDE))
    cell_km2 = lat_m * lng_m / 1e6
    rows = []
    for name, km2 in AREAS_KM2.items():
        cells = km2 / cell_km2
        blocks = math.ceil(cells / side**2)
        per_family: dict[str, dict[str, float]] = {}
        for path, m in measured.items():
            f = _family(path)
            if f == "inventory":
                continue
            chunks = blocks * _weeks(path)
            v = per_family.setdefault(f, {"chunks_per_year": 0, "bytes_per_year": 0.0})
            v["chunks_per_year"] += chunks
            v["bytes_per_year"] += chunks * m["bytes"] / m["chunks"]
        rows.append(
            {
                "area": name,
                "km2": km2,
                "cells": int(cells),
                "blocks": blocks,
                "tasks_per_week": blocks,  # one scene partition (week x block) each
                "commits_per_week": blocks,  # weekly runs: one commit per block and range
                "range_weeks": RANGE_WEEKS,
                "per_family": per_family,
                "bytes_per_year": sum(v["bytes_per_year"] for v in per_family.values()),
            }
        )
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--quick", action="store_true", help="1 and 2 writers, 1 round, 32-cell side")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    t_start = time.perf_counter()
    writers = [1, 2] if args.quick else [1, 2, 4, 8]
    rounds = 1 if args.quick else args.rounds
    from store.cube.layout import DEFAULT_BLOCK_LEVEL

    side = 32 if args.quick else 2**DEFAULT_BLOCK_LEVEL
    with tempfile.TemporaryDirectory(prefix="bench_coop_") as tmp:
        forks = measure_forks(writers, rounds, side, Path(tmp))
    area = demo_area("tiny" if args.quick else "demo")
    measured = chunk_bytes(area.data)
    sizes = sizing(measured)
    one = forks[0]["coordinator_s"].median
    print(f"{'writers':>7} {'write/fork s':>12} {'merge s':>8} {'commit s':>8} "
          f"{'coord s':>8} {'coord/1':>7} {'chunks':>6}")  # fmt: skip
    for f in forks:
        print(
            f"{f['writers']:7d} {f['fork_write_s'].median:12.3f} {f['merge_s'].median:8.3f} "
            f"{f['commit_s'].median:8.3f} {f['coordinator_s'].median:8.3f} "
            f"{f['coordinator_s'].median / one:7.2f} {f['chunks_per_commit']:6d}"
        )
    for s in sizes:
        fams = ", ".join(
            f"{k} {v['chunks_per_year']:,} chunks {v['bytes_per_year'] / 1e9:,.1f} GB"
            for k, v in s["per_family"].items()
        )
        print(
            f"{s['area']:>8}: {s['cells']:,} cells, {s['blocks']:,} blocks, "
            f"{s['bytes_per_year'] / 1e12:,.2f} TB/year ({fams})"
        )
    write_json(
        args.json,
        {
            "bench": "cooperative",
            "title": "Cooperative commits with forked writers; sizing from the layout",
            "machine": machine(),
            "forks": [
                {k: (v.as_dict() if isinstance(v, Timing) else v) for k, v in f.items()}
                for f in forks
            ],
            "measured_chunks": measured,
            "sizing": sizes,
            "seconds": time.perf_counter() - t_start,
        },
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
