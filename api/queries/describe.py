"""what_is_here: what the store holds at a located cell.

* **what_is_here** ``{cell | place | description}``: locate (cell wins, then
  place, then description), then report what the store holds at the cell:
  the latest clear value of each scalar band, data availability per band, the
  recent significant changes (:func:`largest_step`), the land-cover character
  from the embeddings (:func:`land_cover`) and a short summary whose every
  sentence lists the fact ids of the numbers in it. A cell without data is
  answered honestly (``data_here`` false, the store's extent), not an error.

:func:`describe_cell` builds the answer body; ask reuses it through the
what_is_here primitive.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from api.context import ServiceContext
from api.errors import InvalidArgument, NotFound
from api.memory.auth import Caller
from api.models import WhatIsHereAnswer, WhatIsHereBody, WhatIsHereIn
from api.queries._common import (
    CellRef,
    finish,
    make_fact,
    parse_cell_arg,
    slot_date,
    store_errors,
)
from api.queries.cell import SIGMA_FLOOR, Z_THRESHOLD, read_cell, robust_sigma
from api.queries.locate import Located, geocode, manifest_features, pinned, where_text
from api.queries.similar import snapshot_vintages, vector_value
from api.recall.consult import consult_memory
from api.registry import primitive
from store import address, blocks
from store.cube.bands import SCALAR_BANDS
from store.errors import StoreError

if TYPE_CHECKING:
    from store.cube.read import CubeReader

__all__ = [
    "BAND_LABELS",
    "CHANGE_LOOKBACK_DAYS",
    "MIN_BASELINE",
    "MIN_PROTOTYPE_CELLS",
    "SEASON_DAYS",
    "STEP_SIDE",
    "describe_cell",
    "format_value",
    "land_cover",
    "largest_step",
    "what_is_here",
]

CHANGE_LOOKBACK_DAYS = 365
"""Recent changes: steps whose first later observation is within this many days of the last one."""
STEP_SIDE = 3
"""Clear observations (at most) on each side of a step whose medians are compared."""
MIN_BASELINE = 2
"""Clear observations needed before a step."""
SEASON_DAYS = 30
"""Tolerance (days) of the same-dates-a-year-earlier check."""
MIN_PROTOTYPE_CELLS = 16
"""Fewest cells with a vector a land-cover class prototype needs."""

BAND_LABELS = {
    "indices.ndvi": "NDVI",
    "indices.ndwi": "NDWI",
    "indices.ndmi": "NDMI",
    "indices.lswi": "LSWI",
    "indices.evi": "EVI",
    "s1.vv": "VV",
    "s1.vh": "VH",
    "indices.vh_vv": "VH/VV",
}


def format_value(v: float) -> str:
    """A value as a short string for sentences (two decimals, or three significant digits)."""
    return f"{v:.2f}" if abs(v) >= 0.1 else f"{v:.3g}"


def largest_step(
    tslots: npt.NDArray[np.int64], values: npt.NDArray[np.float64], band: str
) -> dict[str, Any] | None:
    """The largest step in the last :data:`CHANGE_LOOKBACK_DAYS` of a clear series.

    For every clear observation ``i`` (with at least :data:`MIN_BASELINE` before
    it) whose date is within the look-back of the series' last clear date, the
    median of up to :data:`STEP_SIDE` clear values from ``i`` on is compared with
    the median of up to :data:`STEP_SIDE` clear values before ``i``. The step
    with the largest ``|z|`` wins (weighted by the share of the compared values
    lying on their own side of the two medians' midpoint, which dates the step
    where it happened), where ``z = delta / sigma`` and ``sigma`` is
    did_change's noise scale of the cell (robust MAD of consecutive differences,
    floored per band; :func:`api.queries.cell._sigma`) and significance is
    did_change's ``|z| >= 3``. The same comparison a year earlier (+-30 days)
    flags seasonal cycles.

    Args:
        tslots: Clear day slots, ascending.
        values: Their values.
        band: Band name (for the sigma floor).

    Returns:
        ``{before, after, delta, sigma, z, significant, previous_year_delta,
        seasonal, before_idx, after_idx}`` or None (too few observations).
    """
    n = int(values.size)
    if n < MIN_BASELINE + 1:
        return None
    sigma, _ = robust_sigma(values, SIGMA_FLOOR.get(band, 0.02))
    start = int(tslots[-1]) - CHANGE_LOOKBACK_DAYS
    best: tuple[float, int] | None = None
    for i in range(MIN_BASELINE, n):
        if tslots[i] < start:
            continue
        b = values[max(0, i - STEP_SIDE) : i]
        a = values[i : i + STEP_SIDE]
        mb, ma = float(np.median(b)), float(np.median(a))
        # Rank by |z| times the share of the values on their own side of the midpoint, so
        # the step is dated where it happened, not one observation early or late.
        mid = (ma + mb) / 2
        own = np.count_nonzero((b - mid) * (mb - mid) > 0) + np.count_nonzero(
            (a - mid) * (ma - mid) > 0
        )
        score = abs(ma - mb) / sigma * own / (a.size + b.size)
        if best is None or score >= best[0]:
            best = (score, i)
    if best is None:
        return None
    i = best[1]
    bi = np.arange(max(0, i - STEP_SIDE), i)
    ai = np.arange(i, min(n, i + STEP_SIDE))
    delta = float(np.median(values[ai])) - float(np.median(values[bi]))

    def side(idx: npt.NDArray[np.int64]) -> dict[str, Any]:
        return {
            "first_date": slot_date(int(tslots[idx[0]])),
            "last_date": slot_date(int(tslots[idx[-1]])),
            "median": float(np.median(values[idx])),
            "n": int(idx.size),
        }

    def year_earlier(idx: npt.NDArray[np.int64]) -> npt.NDArray[np.float64]:
        lo = int(tslots[idx[0]]) - 365 - SEASON_DAYS
        hi = int(tslots[idx[-1]]) - 365 + SEASON_DAYS
        return values[(tslots >= lo) & (tslots <= hi)]

    pb, pa = year_earlier(bi), year_earlier(ai)
    prev = float(np.median(pa)) - float(np.median(pb)) if pb.size and pa.size else None
    seasonal = None
    if prev is not None:
        seasonal = bool(np.sign(prev) == np.sign(delta) and abs(prev) >= 0.5 * abs(delta))
    return {
        "before": side(bi),
        "after": side(ai),
        "delta": delta,
        "sigma": sigma,
        "z": delta / sigma,
        "significant": abs(delta / sigma) >= Z_THRESHOLD,
        "previous_year_delta": prev,
        "seasonal": seasonal,
        "before_idx": bi.tolist(),
        "after_idx": ai.tolist(),
    }


_PROTOTYPES: dict[tuple[str, str, str], dict[str, tuple[npt.NDArray[np.float64], int]]] = {}


def _class_names(ctx: ServiceContext) -> dict[int, str]:
    classes = (ctx.manifest().get("landcover") or {}).get("classes") or []
    return {int(c["code"]): str(c["name"]) for c in classes if "code" in c and "name" in c}


def _prototypes(ctx: ServiceContext, table: Any) -> dict[str, tuple[npt.NDArray[np.float64], int]]:
    """Unit mean vector per land-cover class over the manifest's labelled features (cached)."""
    from shapely import contains_xy
    from shapely.geometry import shape

    key = (str(table.path), str(table.meta.get("digest")), str(ctx.manifest_path))
    cached = _PROTOTYPES.get(key)
    if cached is not None:
        return cached
    names = _class_names(ctx)
    groups: dict[str, list[Any]] = {}
    for f in manifest_features(ctx):
        code = f.get("landcover_code")
        label = names.get(int(code)) if isinstance(code, int) else None
        label = label or (str(f["kind"]) if f.get("kind") else None)
        if label and isinstance(f.get("geometry"), dict):
            try:
                groups.setdefault(label, []).append(shape(f["geometry"]))
            except (ValueError, TypeError, AttributeError, KeyError):
                continue
    protos: dict[str, tuple[npt.NDArray[np.float64], int]] = {}
    if groups and table.n:
        lat, lng = address.decode_array(np.asarray(table.cells))
        norms = np.asarray(table.norms, np.float64)
        for label, geoms in sorted(groups.items()):
            mask = np.zeros(table.n, bool)
            for g in geoms:
                mask |= contains_xy(g, lng, lat)
            mask &= norms > 0
            n = int(mask.sum())
            if n < MIN_PROTOTYPE_CELLS:
                continue
            unit = np.asarray(table.vectors[mask], np.float64) / norms[mask, None]
            mean = unit.mean(axis=0)
            size = float(np.linalg.norm(mean))
            if size > 0:
                protos[label] = (mean / size, n)
    if len(_PROTOTYPES) > 16:
        _PROTOTYPES.clear()
    _PROTOTYPES[key] = protos
    return protos


def land_cover(
    ctx: ServiceContext, reader: CubeReader, cell: CellRef, years: set[int] | None = None
) -> tuple[dict[str, Any] | None, str | None, list[dict[str, Any]]]:
    """Nearest land-cover class prototype of the cell's Tessera vector, per vintage.

    ``years``: only these vintages (those of an as-of snapshot); default every table's.

    Prototypes: for each land-cover class of the manifest's labelled features
    (``landcover_code`` named by the manifest's class table, else the feature
    kind), the normalised mean of the unit vectors of the vintage's cells whose
    centre lies in those features (classes with fewer than
    :data:`MIN_PROTOTYPE_CELLS` such cells are left out: water has no
    embeddings). Score: cosine of the cell's vector to each prototype.

    Returns:
        ``(land_cover dict or None, note when None, facts)``.
    """
    history: list[dict[str, Any]] = []
    facts: list[dict[str, Any]] = []
    latest: dict[str, Any] | None = None
    any_proto = False
    vintages = [y for y in ctx.vintages() if years is None or y in years]
    for year in vintages:
        table = ctx.table(f"geotessera/{year}")
        tslot_y = int(table.meta.get("tslot", year - 1970))
        row = table.row_of(cell.raw)
        protos = _prototypes(ctx, table)
        any_proto = any_proto or bool(protos)
        norm = table.norm(row) if row is not None else 0.0
        if row is None or not protos or norm <= 0:
            history.append({"vintage": year, "label": None, "score": None, "fact_id": None})
            continue
        fact = make_fact(
            ctx,
            reader,
            cell.cell,
            "geotessera",
            tslot_y,
            vector_value(table, row),
            lat_q=cell.lat_q,
            lng_q=cell.lng_q,
            tempo="year",
        )
        facts.append(fact)
        vec = table.vector(row).astype(np.float64) / norm
        scores = {label: float(vec @ p) for label, (p, _) in protos.items()}
        ranked = sorted(scores.items(), key=lambda kv: (-kv[1], kv[0]))
        history.append(
            {
                "vintage": year,
                "label": ranked[0][0],
                "score": ranked[0][1],
                "fact_id": fact["fact_id"],
            }
        )
        latest = {
            "vintage": year,
            "label": ranked[0][0],
            "score": ranked[0][1],
            "runner_up": ranked[1][0] if len(ranked) > 1 else None,
            "runner_up_score": ranked[1][1] if len(ranked) > 1 else None,
            "scores": scores,
            "prototype_cells": {label: n for label, (_, n) in protos.items()},
        }
    if latest is None:
        if not vintages:
            note = "the store holds no Tessera vintage" + (" in this snapshot" if years else "")
        elif not any_proto:
            note = "no labelled features (manifest) with enough embedded cells to build prototypes"
        else:
            note = "no Tessera vector at this cell (water, nodata or outside the tiles)"
        return None, note, facts
    method = (
        "nearest class prototype: per land-cover class of the manifest's labelled features, the "
        "normalised mean unit Tessera vector of the vintage's cells inside them (at least "
        f"{MIN_PROTOTYPE_CELLS} cells); score = cosine to this cell's vector"
    )
    out = {
        "method": method,
        **latest,
        "history": history,
        "fact_ids": [f["fact_id"] for f in facts],
    }
    return out, None, facts


def _store_area(ctx: ServiceContext, reader: CubeReader) -> dict[str, float] | None:
    table = ctx.inventory_table(reader)
    boxes = []
    for block in set(table["block"].to_pylist()) if table.num_rows else ():
        try:
            boxes.append(blocks.block_bounds(blocks.Block.parse(block)))
        except StoreError:
            continue
    if not boxes:
        return None
    arr = np.asarray(boxes)
    return {
        "min_lat": float(arr[:, 0].min()),
        "min_lng": float(arr[:, 1].min()),
        "max_lat": float(arr[:, 2].max()),
        "max_lng": float(arr[:, 3].max()),
    }


def describe_cell(ctx: ServiceContext, loc: Located, as_of: str | None = None) -> dict[str, Any]:
    """The what_is_here body (without receipt) at a located cell, from the snapshot ``as_of``
    names (default: the tip)."""
    cell = loc.cell
    with store_errors():
        reader = ctx.reader_as_of(as_of)
        facts: list[dict[str, Any]] = []
        latest: list[dict[str, Any]] = []
        availability: list[dict[str, Any]] = []
        changes: list[dict[str, Any]] = []
        tested: list[str] = []
        for band in SCALAR_BANDS:
            s = read_cell(ctx, reader, band, cell.lat_q, cell.lng_q)
            ct, cv = s.tslots[s.clear], s.values[s.clear]
            obs = s.tslots
            availability.append(
                {
                    "band": band,
                    "n_observations": int(obs.size),
                    "n_clear": int(ct.size),
                    "first_date": slot_date(int(obs[0])) if obs.size else None,
                    "last_date": slot_date(int(obs[-1])) if obs.size else None,
                    "last_clear_date": slot_date(int(ct[-1])) if ct.size else None,
                }
            )
            if not ct.size:
                latest.append(
                    {"band": band, "tslot": None, "date": None, "value": None, "fact_id": None}
                )
                continue
            fact = _fact(ctx, reader, cell, band, int(ct[-1]), float(cv[-1]))
            facts.append(fact)
            latest.append(
                {
                    "band": band,
                    "tslot": int(ct[-1]),
                    "date": fact["date"],
                    "value": float(cv[-1]),
                    "fact_id": fact["fact_id"],
                }
            )
            step = largest_step(ct, cv, band)
            if step is None:
                continue
            tested.append(band)
            if not step["significant"]:
                continue
            ids = []
            for i in [*step.pop("before_idx"), *step.pop("after_idx")]:
                f = _fact(ctx, reader, cell, band, int(ct[i]), float(cv[i]))
                facts.append(f)
                ids.append(f["fact_id"])
            changes.append({"band": band, **step, "fact_ids": ids})
        years = snapshot_vintages(reader) if as_of is not None else None
        lc, lc_note, lc_facts = land_cover(ctx, reader, cell, years)
        facts.extend(lc_facts)
        data_here = any(a["n_observations"] for a in availability)
        store_area = _store_area(ctx, reader)
    changes.sort(key=lambda c: -abs(c["z"]))
    sentences = _summary(loc.out, data_here, latest, changes, lc, lc_note)
    unique = {f["fact_id"]: f for f in facts}
    return {
        "location": loc.out,
        "data_here": data_here,
        "store_area": store_area,
        "latest": latest,
        "availability": availability,
        "recent_changes": changes,
        "change_check": {
            "method": "largest step per band: median of up to 3 clear values after vs up to 3 "
            "before, within the last year of the band's clear series; significant when "
            "|delta| >= 3 sigma (did_change's noise scale of the cell)",
            "lookback_days": CHANGE_LOOKBACK_DAYS,
            "threshold": Z_THRESHOLD,
            "bands_tested": tested,
        },
        "land_cover": lc,
        "land_cover_note": lc_note,
        "summary": " ".join(s["text"] for s in sentences),
        "summary_sentences": sentences,
        "snapshot_id": reader.snapshot_id,
        "facts": list(unique.values()),
    }


def _fact(
    ctx: ServiceContext, reader: CubeReader, cell: CellRef, band: str, t: int, v: float
) -> dict[str, Any]:
    return make_fact(ctx, reader, cell.cell, band, t, v, lat_q=cell.lat_q, lng_q=cell.lng_q)


def _summary(
    loc: dict[str, Any],
    data_here: bool,
    latest: list[dict[str, Any]],
    changes: list[dict[str, Any]],
    lc: dict[str, Any] | None,
    lc_note: str | None,
) -> list[dict[str, Any]]:
    out = [{"text": f"{where_text(loc)[0].upper()}{where_text(loc)[1:]}.", "fact_ids": []}]
    if not data_here:
        out.append(
            {
                "text": "The store holds no observations at this cell: it lies outside the "
                "ingested area (see store_area).",
                "fact_ids": [],
            }
        )
        return out
    have = [x for x in latest if x["value"] is not None]
    if have:
        parts = [f"{BAND_LABELS[x['band']]} {format_value(x['value'])} ({x['date']})" for x in have]
        out.append(
            {
                "text": "Latest clear values: " + ", ".join(parts) + ".",
                "fact_ids": [x["fact_id"] for x in have],
            }
        )
    if changes:
        for c in changes[:3]:
            verb = "fell" if c["delta"] < 0 else "rose"
            tail = " (a similar step a year earlier: likely seasonal)" if c["seasonal"] else ""
            out.append(
                {
                    "text": f"Significant change: {BAND_LABELS[c['band']]} {verb} by "
                    f"{format_value(abs(c['delta']))} from a median of {format_value(c['before']['median'])} "
                    f"({c['before']['first_date']} to {c['before']['last_date']}) to "
                    f"{format_value(c['after']['median'])} ({c['after']['first_date']} to "
                    f"{c['after']['last_date']}), z {c['z']:.1f}{tail}.",
                    "fact_ids": c["fact_ids"],
                }
            )
    else:
        out.append({"text": "No significant change in the last year of data.", "fact_ids": []})
    if lc is not None:
        past = [h for h in lc["history"] if h["label"] and h["vintage"] != lc["vintage"]]
        tail = "".join(f"; {h['label']} ({h['score']:.2f}) in {h['vintage']}" for h in past[-1:])
        out.append(
            {
                "text": f"Land cover from the embeddings: closest to {lc['label']} in "
                f"{lc['vintage']} (cosine {lc['score']:.2f}){tail}.",
                "fact_ids": lc["fact_ids"],
            }
        )
    elif lc_note:
        out.append({"text": f"Land cover unknown: {lc_note}.", "fact_ids": []})
    return out


def _locate_what(ctx: ServiceContext, args: WhatIsHereIn) -> Located:
    if args.cell is not None:
        return pinned(parse_cell_arg(args.cell), "cell")
    text, role = (
        (args.place, "place") if args.place is not None else (args.description, "description")
    )
    if text is None:
        raise InvalidArgument(
            "what_is_here needs cell, place or description", code="missing_fields"
        )
    found = geocode(ctx, text, "place" if role == "place" else "description")
    if isinstance(found, str):
        raise NotFound(
            f"no place found for {text[:80]!r}: {found}",
            code="place_not_found",
            details={"reason": found},
        )
    return found


@primitive(
    "what_is_here",
    WhatIsHereIn,
    WhatIsHereAnswer,
    "What does the store hold at a location? Latest values, recent changes, land cover, data.",
    "Locate (cell wins; else place; else description, geocoded offline), then: the latest clear "
    "value and date of each index band, observations per band, significant steps in the last "
    "year of each band's series (did_change's significance rule), the nearest land-cover class "
    "prototype of the cell's embedding per vintage, and a summary whose sentences list the fact "
    "ids of their numbers. A location outside the ingested area answers data_here false. With a "
    "bearer token that may read, memory lists what the token's project recorded near the place "
    "(up to five active items within 1 km or linked to the named feature, with their verdicts "
    "and fact ids); without one, memory says it was not consulted.",
    consults_memory=True,
)
def what_is_here(
    ctx: ServiceContext, args: WhatIsHereIn, caller: Caller | None = None
) -> WhatIsHereAnswer:
    """what_is_here {cell | place | description, as_of?} (memory consulted for a caller)."""
    loc = _locate_what(ctx, args)
    body = describe_cell(ctx, loc, args.as_of)
    label = loc.place.name if loc.place is not None else f"cell {loc.cell.cell}"
    with store_errors():
        body["memory"] = consult_memory(ctx, caller, loc.cell.lat, loc.cell.lng, loc.place, label)
    return finish(
        ctx,
        "what_is_here",
        args,
        WhatIsHereBody,
        WhatIsHereAnswer,
        body,
        [loc.cell.cell],
        body["snapshot_id"],
    )
