"""The agent's loop: read_cell, read_cells, fact and verify_receipt, each paired with a baseline.

* read_cell in process (warm context) vs reading the same two arrays (the band and its
  clear flag) at the cell straight from the Zarr chunks (``CubeReader.array``, reader open);
  target p50 <= 1 ms. Each round times a burst of read_cell calls back to back (a warm
  server's stream; the round's figure is their median) and then one Zarr read. The first
  call after the Zarr read, which runs with the CPU caches the baseline's ~100 ms of
  decoding left behind, is reported beside it (``first_after_baseline``).
* read_cells of 256 cells vs ``CubeReader.column_series`` of the same cells (reader open).
* fact resolution vs the read_cell that produced the id (the value it re-reads).
* verify_receipt through the dispatch vs :func:`api.receipts.verify_answer` of the same
  answer in process (the check ``earthmem verify`` runs offline, without its process start).
"""

from __future__ import annotations

import statistics
import time
from typing import Any

from bench.common import DemoArea, Timing
from bench.paired import paired, paired_calls
from bench.queries.rows import row, scale
from store import address

__all__ = ["BURST", "bench_loop"]

BURST = 10
"""read_cell calls timed back to back per round."""


def bench_loop(area: DemoArea, repeats: int) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The loop rows (p50 in ms)."""
    from api.context import ServiceContext
    from api.dispatch import run
    from api.receipts import verify_answer
    from store.cube import CubeReader

    ev = next(e for e in area.manifest()["events"] if e["kind"] == "forest_clearing")
    cell = address.encode(ev["centre"]["lat"], ev["centre"]["lng"])
    geo = address.decode(cell)
    ctx = ServiceContext(area.data)
    reader = CubeReader(area.data)
    ndvi, flag = reader.array("indices.ndvi"), reader.array("s2.clear")
    args = {"cell": cell, "bands": ["ndvi"]}
    first = run(ctx, "read_cell", args)
    # the baseline reads the time range holding values (a whole-axis read of the sparse
    # array would mostly look up chunks that do not exist)
    ts = ctx.column(reader, "indices.ndvi", geo.lat_q, geo.lng_q).tslots
    span = slice(int(ts.min()), int(ts.max()) + 1)
    ms = 1e3
    rows = []
    first_after: list[float] = []

    def burst(i: int) -> float:
        times = []
        for _ in range(BURST):
            t0 = time.perf_counter()
            run(ctx, "read_cell", args)
            times.append(time.perf_counter() - t0)
        if i >= 0:
            first_after.append(times[0])
        return statistics.median(times)

    def zarr_read(_: int) -> float:
        t0 = time.perf_counter()
        _ = (ndvi[span, geo.lat_q, geo.lng_q], flag[span, geo.lat_q, geo.lng_q])
        return time.perf_counter() - t0

    pair = paired_calls(burst, zarr_read, repeats, warmup=5)
    after = Timing.of(first_after)
    rows.append(
        row(
            "read_cell p50 (1 band, latest clear), in process, warm context",
            "ms",
            scale(pair.a, ms),
            baseline_case="zarr reads of the band and its flag at the cell over the tslots "
            "holding values, reader open",
            baseline=scale(pair.b, ms),
            **pair.ratio_fields(),
            ratio_def="earthmem time / baseline time, per round",
            target="p50 <= 1 ms",
            met=pair.a.median * ms <= 1.0,
            data=f"cell {cell}",
            caches="warm: context open, column cache filled; zarr chunks in page cache",
            load_sensitive="mildly: single-threaded, sub-ms",
            burst=f"{BURST} read_cell calls back to back per round, the round's median",
            first_after_baseline=scale(after, ms).as_dict(),
        )
    )
    cells = [
        address.format_cell(address.q_to_raw(geo.lat_q + dy, geo.lng_q + dx))
        for dy in range(-8, 8)
        for dx in range(-8, 8)
    ]
    many = {"cells": cells, "bands": ["ndvi"]}
    qs = [address.decode(c) for c in cells]
    pair = paired(
        lambda _: run(ctx, "read_cells", many),
        lambda _: [reader.column_series("indices.ndvi", g.lat_q, g.lng_q) for g in qs],
        max(3, repeats // 10),
        warmup=2,
    )
    rows.append(
        row(
            "read_cells p50, 256 cells x 1 band, in process, warm context",
            "ms",
            scale(pair.a, ms),
            baseline_case="CubeReader.column_series of the same 256 cells, reader open",
            baseline=scale(pair.b, ms),
            **pair.ratio_fields(),
            ratio_def="earthmem time / baseline time, per round",
            target="(info)",
            data="16 x 16 cells around the clearing",
            caches="warm",
            load_sensitive="mildly",
        )
    )
    fid = first.values[0].fact_id
    pair = paired(
        lambda _: run(ctx, "fact", {"fact_id": fid}),
        lambda _: run(ctx, "read_cell", args),
        repeats,
        warmup=3,
    )
    rows.append(
        row(
            "fact resolution p50 (a read_cell fact id), in process, warm context",
            "ms",
            scale(pair.a, ms),
            baseline_case="the read_cell that served the id",
            baseline=scale(pair.b, ms),
            **pair.ratio_fields(),
            ratio_def="earthmem time / baseline time, per round",
            target="(info)",
            data=f"fact {fid}",
            caches="warm",
            load_sensitive="mildly",
        )
    )
    saved = first.model_dump(mode="json")
    pair = paired(
        lambda _: run(ctx, "verify_receipt", {"answer": saved}),
        lambda _: verify_answer(saved),
        repeats,
        warmup=3,
    )
    rows.append(
        row(
            "verify_receipt p50 (a read_cell answer), in process",
            "ms",
            scale(pair.a, ms),
            baseline_case="api.receipts.verify_answer of the same answer (earthmem verify's check)",
            baseline=scale(pair.b, ms),
            **pair.ratio_fields(),
            ratio_def="earthmem time / baseline time, per round",
            target="(info)",
            data="one signed read_cell answer",
            caches="warm",
            load_sensitive="mildly",
        )
    )
    return rows, {"cell": cell, "fact_id": fid}
