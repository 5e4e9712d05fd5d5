"""area_over_time's first answer after the branch tip moved: the shared cache carried to the new
snapshot (:mod:`store.cube.carry`) vs the same server starting the new snapshot cold."""

from __future__ import annotations

import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from bench.common import DemoArea
from bench.paired import paired_samples
from bench.queries.area import area_args
from bench.queries.rows import row, scale
from store import address

__all__ = ["bench_area_after_commit"]

ROWS_AWAY = 4096
"""The commit's chunk lies this many lattice rows (~39 km) from the box: another partition."""


def bench_area_after_commit(
    area: DemoArea, km: float, year: int, rounds: int
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """``rounds`` paired rounds, on a copy of the demo data directory (the cached one is never
    written): per arm, one commit rewriting one NDVI chunk of another partition in ``year``,
    then the open server context's first ``area_over_time`` over the ~``km`` box (the tip
    checked on every call, as ``--refresh-seconds 0``). The arms alternate their order."""
    from api.context import ServiceContext
    from api.dispatch import run
    from store.cube import CubeWriter

    args = area_args(area, km, year)
    min_lat, min_lng, max_lat, max_lng = args["bbox"]
    lat_q, lng_q = address.encode_q((min_lat + max_lat) / 2, (min_lng + max_lng) / 2)
    t0 = (int(np.datetime64(f"{year}-06-01", "D").astype(np.int64)) // 7) * 7
    work = Path(tempfile.mkdtemp(prefix="earthmem-bench-refresh-"))
    try:
        data = work / "data"
        shutil.copytree(area.data, data, symlinks=True)
        ctx = ServiceContext(data, tip_check_seconds=0.0)
        writer = CubeWriter(data)
        for _ in range(2):
            run(ctx, "area_over_time", args)
        times: dict[bool, list[float]] = {True: [], False: []}
        n = 0

        def arm(carry: bool) -> None:
            nonlocal n
            n += 1
            with writer.transaction(f"bench refresh {n}") as tx:
                tx.write(
                    "indices.ndvi",
                    np.arange(t0, t0 + 7),
                    lat_q + ROWS_AWAY,
                    lng_q,
                    np.full((7, 4, 4), 0.25 + 0.001 * n),
                )
            ctx.carry_cache = carry
            start = time.perf_counter()
            run(ctx, "area_over_time", args)
            times[carry].append(time.perf_counter() - start)

        for r in range(rounds):
            for carry in (True, False) if r % 2 == 0 else (False, True):
                arm(carry)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    pair = paired_samples(times[True], times[False])
    ms = 1e3
    rows = [
        row(
            "area_over_time ~1 km^2 x 1 year, first answer after a commit to another partition",
            "ms",
            scale(pair.a, ms),
            baseline_case="the same server starting the new snapshot cold (no cache carried: "
            "before session 22)",
            baseline=scale(pair.b, ms),
            **pair.ratio_fields(),
            ratio_def="earthmem time / baseline time, per round",
            target="(info)",
            data=f"one NDVI chunk rewritten {ROWS_AWAY} rows away per arm, {year}",
            caches="the server context warm on the box before the commit (its chunk cache, "
            "inventory and chunk index of the old snapshot); the new snapshot's reader opened "
            "by the call itself, its inventory updated from the old one (changed partitions only; both arms)",
            load_sensitive="some: tens of ms, one call per arm and round",
        )
    ]
    return rows, {"rounds": rounds, "carried_ms": times[True], "cold_ms": times[False]}
