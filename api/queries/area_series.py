"""area_over_time's series: clear fractions, kept overpasses, their statistics, anomaly and trend.

:func:`series` answers every area of a call in four passes, each reading
the areas' cells together (:mod:`api.queries.area_summary`, which answers
chunks wholly inside an area from their block summaries, and
:mod:`api.queries.area_cells` for the rest): the candidates' clear
fractions; the kept overpasses' statistics; the clear fractions of the
baseline overpasses not measured yet (a clear fraction depends on its
overpass and area only, so one measured in the first pass is reused); the
statistics of the baseline overpasses used. A chunk several areas share is
read once per pass, and each area's numbers are those of a pass over it
alone. The definitions are in :mod:`api.queries.area`.
"""

from __future__ import annotations

import datetime as dt
import functools
from typing import TYPE_CHECKING, Any

import numpy as np

from api.charts import ChartSeries
from api.context import ServiceContext
from api.queries import area_summary
from api.queries._common import make_fact, slot_date
from api.queries.area_cells import Job
from api.queries.area_geometry import Area
from api.queries.area_stats import mann_kendall, pick_even, theil_sen
from store import tslot
from store.cube import REGISTRY

if TYPE_CHECKING:
    from store.cube.read import CubeReader

__all__ = [
    "BASELINE_DAYS",
    "GOOD_CLEAR_FRACTION",
    "MAX_BASELINE",
    "MAX_CANDIDATES",
    "MIN_TREND_SCENES",
    "candidate_slots",
    "series",
]

MAX_CANDIDATES = 400
"""Most overpasses whose clear fraction is measured per area (evenly thinned beyond)."""
MAX_BASELINE = 48
"""Most baseline overpasses read for the anomaly."""
BASELINE_DAYS = 30
"""Same-season window: +- this many days of year."""
MIN_TREND_SCENES = 6
"""Overpasses needed for the trend."""
GOOD_CLEAR_FRACTION = 0.8
"""Clear fraction from which an overpass is of quality 'good' (else 'fair')."""


def candidate_slots(cand: list[tuple[int, list[str]]]) -> list[int]:
    """The overpasses whose clear fraction is measured (evenly thinned to MAX_CANDIDATES)."""
    slots = [t for t, _ in cand]
    return pick_even(slots, MAX_CANDIDATES) if len(slots) > MAX_CANDIDATES else slots


def _doy_distance(a: int, b: int) -> int:
    d = abs(_day_of_year(a) - _day_of_year(b))
    return min(d, 365 - d)


@functools.lru_cache(maxsize=8192)
def _day_of_year(t: int) -> int:
    """:func:`store.tslot.day_of_year`, remembered (every call filters an area's whole
    history of overpasses by it)."""
    return tslot.day_of_year(t)


def _select(
    slots: list[int], fractions: list[float], threshold: float, max_scenes: int
) -> tuple[list[dict[str, Any]], list[int], list[int]]:
    """The overpasses under the threshold (excluded), those kept and those thinned out."""
    excluded = []
    above: list[int] = []
    for t, f in zip(slots, fractions, strict=True):
        if f < threshold:
            excluded.append(
                {
                    "date": slot_date(t),
                    "tslot": t,
                    "clear_fraction": f,
                    "reason": f"clear fraction {f:.2f} below the threshold {threshold:.2f}",
                }
            )
        else:
            above.append(t)
    kept = pick_even(above, max_scenes)
    chosen = set(kept)
    return excluded, kept, [t for t in above if t not in chosen]


def _scenes(
    ctx: ServiceContext,
    reader: CubeReader,
    band: str,
    area: Area,
    kept: list[int],
    stats: list[dict[str, Any] | None],
    sources: dict[int, list[str]],
    excluded: list[dict[str, Any]],
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The kept overpasses' scenes and facts (those without a clear value go to ``excluded``)."""
    scenes: list[dict[str, Any]] = []
    facts: list[dict[str, Any]] = []
    for t, st in zip(kept, stats, strict=True):
        if st is None:
            excluded.append(
                {
                    "date": slot_date(t),
                    "tslot": t,
                    "clear_fraction": 0.0,
                    "reason": "no clear value inside the area",
                }
            )
            continue
        quality = "good" if st["clear_fraction"] >= GOOD_CLEAR_FRACTION else "fair"
        bounds = st.pop("quantile_bounds", None)
        scenes.append(
            {"date": slot_date(t), "tslot": t, **st, "quality": quality, "quantile_bounds": bounds}
        )
        facts.append(
            make_fact(
                ctx,
                reader,
                f"geom:{area.digest}",
                band,
                t,
                dict(st) if bounds is None else {**st, "quantile_bounds": bounds},
                sources=sources.get(t, []),
                derivation="earthmem.area_stats.coslat.v1"
                if bounds is None
                else "earthmem.area_stats.coslat.block_summaries.v1",
            )
        )
    return scenes, facts


def series(
    ctx: ServiceContext,
    reader: CubeReader,
    band: str,
    areas: list[Area],
    cands: list[list[tuple[int, list[str]]]],
    max_scenes: int,
    threshold: float,
    keep: bool,
    use_summaries: bool = True,
) -> list[tuple[dict[str, Any], list[dict[str, Any]], ChartSeries]]:
    """Every area's series, anomaly and trend; each pass reads the areas' cells together.

    Passes: clear fractions of the candidates, statistics of the kept
    overpasses, clear fractions of the baseline overpasses not measured yet,
    statistics of the baseline overpasses used. A chunk several areas share is
    read once per pass; each area's numbers are those of a pass over it alone.
    """
    n = len(areas)
    slots = [candidate_slots(c) for c in cands]
    usage: list[list[area_summary.Usage]] = [[] for _ in areas]
    measured: list[dict[int, float]] = [{} for _ in areas]
    live = [k for k in range(n) if areas[k].n_cells and slots[k]]
    jobs = [Job(areas[k], slots[k]) for k in live]
    measured_at = set(live)
    got_fr = area_summary.clear_fractions_many(ctx, reader, band, jobs, keep, use_summaries)
    for k, (fr, how) in zip(live, got_fr, strict=True):
        usage[k].append(how)
        measured[k] = dict(zip(slots[k], fr.tolist(), strict=True))
    picked = [
        _select(
            slots[k] if k in measured_at else [],
            [measured[k][t] for t in slots[k]] if k in measured_at else [],
            threshold,
            max_scenes,
        )
        for k in range(n)
    ]
    kept = [p[1] for p in picked]
    with_kept = [k for k in range(n) if kept[k]]
    stats: list[list[dict[str, Any] | None]] = [[] for _ in areas]
    got = area_summary.scenes_many(
        ctx, reader, band, [Job(areas[k], kept[k]) for k in with_kept], keep, use_summaries
    )
    for k, (st, how) in zip(with_kept, got, strict=True):
        usage[k].append(how)
        stats[k] = st
    results = []
    for k in range(n):
        excluded = picked[k][0]
        scenes, facts = _scenes(
            ctx, reader, band, areas[k], kept[k], stats[k], dict(cands[k]), excluded
        )
        excluded.sort(key=lambda e: e["tslot"])
        results.append((scenes, facts, excluded))
    anomalies = _anomalies(
        ctx, reader, band, areas, [r[0] for r in results], measured, threshold, keep, use_summaries
    )
    out = []
    for k, area in enumerate(areas):
        scenes, facts, excluded = results[k]
        body = {
            "id": area.id,
            "geometry_digest": area.digest,
            "area_km2": area.km2,
            "n_cells": area.n_cells,
            "scenes": scenes,
            "excluded": excluded,
            "thinned": picked[k][2],
            "anomaly": anomalies[k],
            "trend": _trend(scenes),
            **_method(usage[k]),
        }
        chart = ChartSeries(
            area.id,
            [s["date"] for s in scenes],
            [s["median"] for s in scenes],
            [s["p25"] for s in scenes],
            [s["p75"] for s in scenes],
        )
        out.append((body, facts, chart))
    return out


def _method(usage: list[area_summary.Usage]) -> dict[str, Any]:
    """The answer's account of how an area's statistics were computed.

    The statistics pass (the kept overpasses) when there was one, else the clear-fraction pass.
    """
    if not usage:
        return {
            "method": area_summary.CELLS,
            "summary_blocks": 0,
            "cells_read": 0,
            "method_note": None,
        }
    u = usage[-1]
    return {
        "method": u.method,
        "summary_blocks": u.summary_blocks,
        "cells_read": u.cells_read,
        "method_note": u.note,
    }


_EMPTY_ANOMALY: dict[str, Any] = {
    "latest_tslot": None,
    "latest_median": None,
    "baseline_median": None,
    "baseline_tslots": [],
    "difference": None,
    "z": None,
    "z_basis": None,
}


def _anomalies(
    ctx: ServiceContext,
    reader: CubeReader,
    band: str,
    areas: list[Area],
    scenes: list[list[dict[str, Any]]],
    measured: list[dict[int, float]],
    threshold: float,
    keep: bool,
    use_summaries: bool,
) -> list[dict[str, Any]]:
    """Each area's anomaly; clear fractions already measured (``measured``) are not read again."""
    n = len(areas)
    out: list[dict[str, Any] | None] = [None] * n
    base: list[dict[str, Any]] = [{} for _ in areas]
    cand: list[list[int]] = [[] for _ in areas]
    for k in range(n):
        if not scenes[k]:
            out[k] = {**_EMPTY_ANOMALY, "reason": "no overpass kept"}
            continue
        latest = scenes[k][-1]
        t_latest = int(latest["tslot"])
        year_start = tslot.day_slot(dt.date(tslot.slot_to_date(t_latest).year, 1, 1))
        base[k] = {**_EMPTY_ANOMALY, "latest_tslot": t_latest, "latest_median": latest["median"]}
        family = REGISTRY[band].family
        cand[k] = [
            t
            for t, _ in ctx.overpasses(reader, family, areas[k].box, None, year_start - 1)
            if _doy_distance(t, t_latest) <= BASELINE_DAYS
        ][-MAX_BASELINE:]
        if not cand[k]:
            out[k] = {
                **base[k],
                "reason": f"no overpass in earlier years within +-{BASELINE_DAYS} days of year",
            }
    todo = [k for k in range(n) if out[k] is None]
    missing = {k: [t for t in cand[k] if t not in measured[k]] for k in todo}
    ask = [k for k in todo if missing[k]]
    got = area_summary.clear_fractions_many(
        ctx, reader, band, [Job(areas[k], missing[k]) for k in ask], keep, use_summaries
    )
    for k, (fr, _) in zip(ask, got, strict=True):
        measured[k].update(zip(missing[k], fr.tolist(), strict=True))
    use: dict[int, list[int]] = {}
    for k in todo:
        use[k] = [t for t in cand[k] if measured[k][t] >= threshold]
        if not use[k]:
            out[k] = {
                **base[k],
                "reason": "earlier years' same-season overpasses are all under the clear-fraction threshold",
            }
    ask = [k for k in todo if out[k] is None]
    got_stats = area_summary.scenes_many(
        ctx, reader, band, [Job(areas[k], use[k]) for k in ask], keep, use_summaries
    )
    for k, (used, _) in zip(ask, got_stats, strict=True):
        out[k] = _anomaly(base[k], use[k], used, scenes[k][-1])
    return [o if o is not None else {} for o in out]


def _anomaly(
    base: dict[str, Any],
    slots: list[int],
    used: list[dict[str, Any] | None],
    latest: dict[str, Any],
) -> dict[str, Any]:
    """The anomaly of the latest scene against the baseline overpasses' statistics."""
    stats = []
    tslots = []
    for t, st in zip(slots, used, strict=True):
        if st is not None:
            stats.append(st)
            tslots.append(t)
    if not stats:
        return {**base, "reason": "no clear baseline value inside the area"}
    medians = np.array([s["median"] for s in stats])
    baseline = float(np.median(medians))
    diff = float(latest["median"]) - baseline
    z = None
    basis = None
    reason = None
    # A std of two or three baseline medians can be ~0 by chance (z in the
    # hundreds of thousands); the within-area spread of the baseline overpasses
    # is a floor, so z is never sharper than the area's own heterogeneity.
    between = float(np.std(medians, ddof=1)) if medians.size >= 2 else 0.0
    spatial = float(np.mean([(s["p75"] - s["p25"]) / 1.349 for s in stats]))
    sd = max(between, spatial)
    if sd > 0:
        if between >= spatial:
            basis = f"std of the {medians.size} baseline medians"
        else:
            basis = (
                f"robust spatial spread (IQR/1.349) of the {medians.size} baseline overpass(es), "
                f"larger than the std of their medians ({between:.4g})"
            )
        z = diff / sd
    if z is None:
        reason = "baseline spread is zero: z undefined"
    return {
        **base,
        "baseline_median": baseline,
        "baseline_tslots": tslots,
        "difference": diff,
        "z": z,
        "z_basis": basis,
        "reason": reason,
    }


def _trend(scenes: list[dict[str, Any]]) -> dict[str, Any]:
    n = len(scenes)
    if n < MIN_TREND_SCENES:
        return {
            "slope_per_year": None,
            "intercept": None,
            "mann_kendall_p": None,
            "mann_kendall_s": None,
            "n": n,
            "reason": f"{n} overpasses kept; the trend needs at least {MIN_TREND_SCENES}",
        }
    x = np.array([s["tslot"] for s in scenes], dtype=np.float64) / 365.25
    y = np.array([s["median"] for s in scenes], dtype=np.float64)
    slope, intercept = theil_sen(y, x)
    s, p = mann_kendall(y)
    return {
        "slope_per_year": slope,
        "intercept": intercept,
        "mann_kendall_p": p,
        "mann_kendall_s": s,
        "n": n,
        "reason": None,
    }
