"""read_area: one band over an area at one overpass (the protocol's recall_polygon).

The cells are the area code's (:func:`api.queries.area_geometry.parse_area`, with
its caps), read through the tile cache (:func:`api.queries.area_cells.gather`), and
the statistics are the ones area_over_time gives each overpass
(:func:`api.queries.area_stats.scenes_stats`, cells weighted by cos(latitude)), so
the statistic's fact id equals area_over_time's for the same area and overpass.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from api.context import ServiceContext
from api.errors import InvalidArgument, NoObservation
from api.models.read import ReadAreaAnswer, ReadAreaBody, ReadAreaIn
from api.queries._common import (
    canonical_scalar_band,
    clear_info,
    finish,
    make_fact,
    slot_date,
    store_errors,
)
from api.queries.area_cells import gather as gather_cells
from api.queries.area_geometry import parse_area
from api.queries.area_stats import scenes_stats
from api.queries.read import time_of
from api.registry import primitive
from store import address
from store.cube import REGISTRY

__all__ = ["AREA_STATS_DERIVATION", "MAX_LISTED_CELLS", "SAMPLE_RULE", "read_area"]

MAX_LISTED_CELLS = 5000
"""Upper bound of ``max_cells`` (cell values listed in one answer)."""
AREA_STATS_DERIVATION = "earthmem.area_stats.coslat.v1"
"""Derivation of an area statistic (area_over_time's)."""
SAMPLE_RULE = (
    "{m} of the {n} cells, evenly spaced in the area's row-major order from the south-west "
    "(indices round(linspace(0, n - 1, m))), both ends kept; the statistics use every cell"
)


@primitive(
    "read_area",
    ReadAreaIn,
    ReadAreaAnswer,
    "One band over a bbox or polygon at one overpass (the protocol's recall_polygon).",
    "The cells' values at the overpass (date or tslot) and area_over_time's statistics for it "
    "(cos-latitude weighted mean, std, median, p10..p90 of the clear cells, clear fraction). "
    "Over max_cells the cell list is a deterministic even sample (sampled: true, sample_rule "
    "says how); the statistics always use every cell. No overpass that day: no_observation "
    "naming the nearest overpass dates. Areas are capped as area_over_time's are.",
    cost="heavy",
)
def read_area(ctx: ServiceContext, args: ReadAreaIn) -> ReadAreaAnswer:
    """read_area {geometry | bbox, band, date | tslot, max_cells?, as_of?}."""
    band = canonical_scalar_band(args.band)
    t = time_of(args.tslot, args.date)
    if t is None:
        raise InvalidArgument("read_area needs date or tslot", code="invalid_argument")
    if not 1 <= args.max_cells <= MAX_LISTED_CELLS:
        raise InvalidArgument(
            f"max_cells must be within 1..{MAX_LISTED_CELLS}", code="invalid_argument"
        )
    with store_errors():
        area = parse_area("area", args.geometry, args.bbox)
        reader = ctx.reader_as_of(args.as_of)
        family = REGISTRY[band].family
        hit = ctx.overpasses(reader, family, area.box, t, t)
        if not hit:
            slots = [s for s, _ in ctx.overpasses(reader, family, area.box)]
            before = max((s for s in slots if s < t), default=None)
            after = min((s for s in slots if s > t), default=None)
            raise NoObservation(
                f"no {family} overpass over the area on {slot_date(t)} (tslot {t}); nearest: "
                f"before {slot_date(before) if before is not None else None}, after "
                f"{slot_date(after) if after is not None else None}",
                details={
                    "tslot": t,
                    "date": slot_date(t),
                    "nearest_before": before,
                    "nearest_after": after,
                },
            )
        sources = hit[0][1]
        flag_band, clear_value = clear_info(band)
        keep = area.n_cells * 16 <= ctx.cache_bytes // 4
        oks = gather_cells(ctx, reader, flag_band, area, [t], keep)[0] == clear_value
        values = gather_cells(ctx, reader, band, area, [t], keep)[0].astype(np.float64)
        stats = scenes_stats(values[None, :], oks[None, :], area.weights, area.n_cells)[0]
    n = area.n_cells
    m = min(n, args.max_cells)
    sampled = n > m
    idx = np.linspace(0, n - 1, m).round().astype(np.int64) if sampled else np.arange(n)
    raw = address.q_to_raw_array(area.ys[idx], area.xs[idx])
    names = address.format_cells(raw).tolist()
    cells: list[dict[str, Any]] = []
    for name, v, ok in zip(names, values[idx].tolist(), oks[idx].tolist(), strict=True):
        clear = bool(ok) and math.isfinite(v)
        cells.append({"cell": str(name), "value": v if clear else None, "clear": clear})
    facts = []
    summary = None
    n_clear = 0
    if stats is not None:
        n_clear = int(stats["n_clear"])
        summary = {
            k: float(stats[k]) for k in ("mean", "std", "median", "p10", "p25", "p75", "p90")
        }
        facts.append(
            make_fact(
                ctx,
                reader,
                f"geom:{area.digest}",
                band,
                t,
                dict(stats),
                sources=sources,
                derivation=AREA_STATS_DERIVATION,
            )
        )
    answer = {
        "area_km2": area.km2,
        "band": band,
        "tslot": t,
        "date": slot_date(t),
        "n_cells": n,
        "n_clear": n_clear,
        "clear_fraction": n_clear / max(1, n),
        "stats": summary,
        "sampled": sampled,
        "sample_rule": SAMPLE_RULE.format(m=m, n=n) if sampled else None,
        "cells": cells,
        "sources": sources,
        "snapshot_id": reader.snapshot_id,
        "facts": facts,
    }
    return finish(
        ctx,
        "read_area",
        args,
        ReadAreaBody,
        ReadAreaAnswer,
        answer,
        [str(c["cell"]) for c in cells],
        reader.snapshot_id,
    )
