"""did_change in process (warm and cold context) vs a direct CubeReader.cell_series read."""

from __future__ import annotations

import datetime as dt
from typing import Any

from bench.common import DemoArea, time_calls
from bench.paired import paired
from bench.queries.rows import row, scale
from store import address

__all__ = ["ROTATE_SIDE", "bench_did_change", "rotating_args"]

ROTATE_SIDE = 64
"""The warm rows rotate over a ROTATE_SIDE x ROTATE_SIDE square of lattice cells around the
clearing (4,096 cells: more than the server's per-cell series memo holds), so a warm call
is a warm *context*, not one memoised cell answered again."""


def rotating_args(args: dict[str, Any], side: int = ROTATE_SIDE) -> list[dict[str, Any]]:
    """``args`` at the ``side`` x ``side`` lattice cells centred on its cell, row by row."""
    g = address.decode(args["cell"])
    half = side // 2
    return [
        {**args, "cell": address.format_cell(address.q_to_raw(g.lat_q + dy, g.lng_q + dx))}
        for dy in range(-half, side - half)
        for dx in range(-half, side - half)
    ]


def _change_args(area: DemoArea) -> dict[str, Any]:
    """did_change arguments at the planted clearing: the window spans the cut."""
    from api.context import ServiceContext
    from api.dispatch import run

    ev = next(e for e in area.manifest()["events"] if e["kind"] == "forest_clearing")
    cell = address.encode(ev["centre"]["lat"], ev["centre"]["lng"])
    ctx = ServiceContext(area.data)
    tr = run(ctx, "trajectory", {"cell": cell, "band": "indices.ndvi"}).model_dump(mode="json")
    clear = [p["tslot"] for p in tr["points"] if p["clear"] and p["value"] is not None]
    cut = (dt.date.fromisoformat(ev["end"]) - dt.date(1970, 1, 1)).days
    before = [t for t in clear if t < cut]
    after = [t for t in clear if t >= cut]
    t0 = before[-4] if len(before) >= 4 else before[0]
    t1 = after[min(3, len(after) - 1)]
    return {"cell": cell, "band": "indices.ndvi", "window": [t0, t1]}


def bench_did_change(area: DemoArea, repeats: int) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """did_change p50 in process (warm) vs a direct CubeReader.cell_series read."""
    from api.context import ServiceContext
    from api.dispatch import run
    from api.errors import ApiError
    from store.cube import CubeReader

    args = _change_args(area)
    ctx = ServiceContext(area.data)
    rot = []  # the cells of the square that have the window's overpasses (all, on the demo)
    for a in rotating_args(args):
        try:
            run(ctx, "did_change", a)
        except ApiError:
            continue
        rot.append(a)
    ctx = ServiceContext(area.data)  # the probe's memo entries do not carry into the rounds
    qs = [(address.decode(a["cell"]).lat_q, address.decode(a["cell"]).lng_q) for a in rot]
    ans = run(ctx, "did_change", args).model_dump(mode="json")
    lat_q, lng_q = address.decode(args["cell"]).lat_q, address.decode(args["cell"]).lng_q
    reader = CubeReader(area.data)
    t0, t1 = args["window"]
    # the target row: a new cell each round (both sides), the context and reader warm
    pair = paired(
        lambda i: run(ctx, "did_change", rot[(7 * i) % len(rot)]),
        lambda i: reader.cell_series("indices.ndvi", *qs[(7 * i) % len(rot)], t0, t1 + 1),
        repeats,
        warmup=5,
    )
    t_q, t_b = pair.a, pair.b
    same = paired(
        lambda _: run(ctx, "did_change", args),
        lambda _: reader.cell_series("indices.ndvi", lat_q, lng_q, t0, t1 + 1),
        max(50, repeats // 4),
        warmup=5,
    )
    # cold: a fresh context per call (opens the repository, fills the column cache)
    t_cold = time_calls(
        lambda _: run(ServiceContext(area.data), "did_change", args), max(3, repeats // 20)
    )
    ms = 1e3
    rows = [
        row(
            "did_change p50, in process, warm context",
            "ms",
            scale(t_q, ms),
            baseline_case="CubeReader.cell_series(cell, window), reader open",
            baseline=scale(t_b, ms),
            **pair.ratio_fields(),
            ratio_def="earthmem time / baseline time, per round",
            target="p50 <= 2 ms",
            met=t_q.median * ms <= 2.0,
            data=f"a new cell each round of {len(rot)} (those of the {ROTATE_SIDE} x {ROTATE_SIDE} "
            f"lattice cells around the clearing with the window's overpasses), window {t0}..{t1}",
            caches="warm: context open, column cache filled; reader open; files in page cache; "
            "the per-cell series memo misses (cells rotate)",
            load_sensitive="mildly: single-threaded, sub-ms; a preempted call shows in p90, "
            "rarely in the median",
        ),
        row(
            "did_change p50, in process, one cell repeated (memo hits)",
            "ms",
            scale(same.a, ms),
            baseline_case="CubeReader.cell_series(cell, window), reader open",
            baseline=scale(same.b, ms),
            **same.ratio_fields(),
            ratio_def="earthmem time / baseline time, per round",
            target="(info: what the per-cell series memo saves)",
            data=f"1 cell, window {t0}..{t1}",
            caches="warm, and the cell's series memoised after the first call",
        ),
        row(
            "did_change, in process, cold context (first call)",
            "ms",
            scale(t_cold, ms),
            baseline_case="CubeReader.cell_series(cell, window), reader open",
            baseline=scale(t_b, ms),
            ratio=t_cold.median / t_b.median,
            ratio_def="earthmem time / baseline time (unpaired)",
            target="(info)",
            data=f"1 cell, window {t0}..{t1}",
            caches="cold context (fresh ServiceContext per call); files in page cache",
            load_sensitive="yes: repository open and imports' first use, single-threaded",
        ),
    ]
    return rows, {
        "args": args,
        "rotating_args": rot,
        "significant": ans.get("significant"),
        "delta": ans.get("delta"),
    }
