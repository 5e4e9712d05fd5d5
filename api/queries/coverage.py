"""coverage: what the store holds at a cell or over an area, so an agent knows what it can ask.

Per scene family (the bands of a family share one clear flag, so their counts are
the family's): the overpasses in the window (a cell: its observations, from the
cell's flag series; an area: the snapshot's overpass index over the area's
bounding box), the clear observations per month (an area: clear cells summed over
each overpass, streamed by :func:`api.queries.area_cells.clear_counts`), and the
Tessera vintages holding a vector there. For an area a small PNG map shows each
cell's clear observations of one family (:func:`api.charts.render_count_map`, kept
like area_over_time's charts).
"""

from __future__ import annotations

import base64
from collections import OrderedDict
from typing import TYPE_CHECKING, Any, cast

import numpy as np
import numpy.typing as npt

from api.charts import render_count_map
from api.context import ServiceContext
from api.errors import InvalidArgument
from api.models.coverage import (
    MAX_LISTED_TSLOTS,
    CoverageAnswer,
    CoverageBody,
    CoverageIn,
)
from api.queries._common import (
    canonical_scalar_band,
    finish,
    parse_cell_arg,
    slot_date,
    store_errors,
)
from api.queries.area_cells import SCENE_BUFFER_BYTES, clear_counts, gather
from api.queries.area_geometry import Area, parse_area
from api.queries.cell import read_cell
from api.queries.similar import snapshot_vintages
from api.queries.similar_examples import within_mask
from api.registry import primitive
from store import tslot as tslots
from store.cube.bands import FAMILY_FLAGS, Family, family_scalars, registered
from store.errors import InvalidDate

if TYPE_CHECKING:
    from store.cube.read import CubeReader

__all__ = ["coverage"]


def _window(start: str | None, end: str | None) -> tuple[int | None, int | None]:
    try:
        t0 = tslots.day_slot(start.strip()) if start is not None else None
        t1 = tslots.day_slot(end.strip()) if end is not None else None
    except InvalidDate as exc:
        raise InvalidArgument(f"start_date/end_date: {exc}", code="invalid_date") from None
    if t0 is not None and t1 is not None and t0 > t1:
        raise InvalidArgument("start_date is after end_date", code="invalid_date")
    return t0, t1


def _family_entry(
    family: str, slots: list[int], clear: npt.NDArray[np.int64], n_cells: int
) -> dict[str, Any]:
    months: OrderedDict[str, list[int]] = OrderedDict()
    for t, c in zip(slots, clear.tolist(), strict=True):
        m = months.setdefault(slot_date(t)[:7], [0, 0])
        m[0] += 1
        m[1] += int(c)
    listed = slots[:MAX_LISTED_TSLOTS]
    return {
        "family": family,
        "bands": [b for _, b in family_scalars(cast("Family", family))],
        "flag_band": FAMILY_FLAGS[family][0],
        "has_data": bool(slots),
        "n_overpasses": len(slots),
        "n_clear": int(clear.sum()),
        "first_date": slot_date(slots[0]) if slots else None,
        "last_date": slot_date(slots[-1]) if slots else None,
        "tslots": listed,
        "dates": [slot_date(t) for t in listed],
        "listed_truncated": len(slots) > MAX_LISTED_TSLOTS,
        "months": [
            {"month": k, "overpasses": n, "clear": c, "clear_fraction": c / (n * n_cells)}
            for k, (n, c) in months.items()
        ],
    }


def _first_band(family: str) -> str:
    """A scalar band of the family (its series carries the family's flag)."""
    return family_scalars(cast("Family", family))[0][1]


def _in_window(t: int, t0: int | None, t1: int | None) -> bool:
    return (t0 is None or t >= t0) and (t1 is None or t <= t1)


def _clear_map(
    ctx: ServiceContext, reader: CubeReader, family: str, area: Area, slots: list[int]
) -> npt.NDArray[np.int64]:
    """Clear observations of each of the area's cells (a group of overpasses at a time)."""
    flag_band, clear_value = FAMILY_FLAGS[family]
    acc = np.zeros(area.n_cells, np.int64)
    group = max(1, SCENE_BUFFER_BYTES // max(1, area.n_cells * 2))
    for g in range(0, len(slots), group):
        part = slots[g : g + group]
        acc += (gather(ctx, reader, flag_band, area, part, False) == clear_value).sum(axis=0)
    return acc


@primitive(
    "coverage",
    CoverageIn,
    CoverageAnswer,
    "What does the store hold at a cell or over an area? Bands, dates, clear counts per month.",
    "One of cell, bbox, geometry (area_over_time's caps); optional band (its family only) and "
    "start_date/end_date. Per scene family (Sentinel-2, Sentinel-1; a family's bands share its "
    "clear flag): the overpasses (tslots and dates), the clear observations per month, the bands "
    "with data; the Tessera vintages with a vector there; for an area a small PNG map of each "
    "cell's clear observations. Ask it before asking for values.",
    cost="heavy",
)
def coverage(ctx: ServiceContext, args: CoverageIn) -> CoverageAnswer:
    """coverage {cell | bbox | geometry, band?, start_date?, end_date?, map?, as_of?}."""
    given = [n for n in ("cell", "bbox", "geometry") if getattr(args, n) is not None]
    if len(given) != 1:
        raise InvalidArgument(
            "coverage needs exactly one of cell, bbox or geometry", code="invalid_argument"
        )
    t0, t1 = _window(args.start_date, args.end_date)
    families = list(FAMILY_FLAGS)
    if args.band is not None:
        families = [registered(canonical_scalar_band(args.band, allow_flags=True)).family]
    cell = parse_cell_arg(args.cell) if args.cell is not None else None
    with store_errors():
        area = parse_area("area", args.geometry, args.bbox) if cell is None else None
        reader = ctx.reader_as_of(args.as_of)
        years = snapshot_vintages(reader) if args.as_of is not None else None
        vintages = [y for y in ctx.vintages() if years is None or y in years]
        entries, cells_read = [], []
        fam_slots: dict[str, list[int]] = {}
        png: bytes | None = None
        map_family = map_max = None
        if cell is not None:
            n_cells = 1
            cells_read.append(cell.cell)
            for fam in families:
                s = read_cell(ctx, reader, _first_band(fam), cell.lat_q, cell.lng_q)
                keep = [i for i, t in enumerate(s.tslots.tolist()) if _in_window(t, t0, t1)]
                slots = [int(s.tslots[i]) for i in keep]
                clear = np.asarray([int(s.clear[i]) for i in keep], np.int64)
                entries.append(_family_entry(fam, slots, clear, 1))
            tessera = [
                y for y in vintages if ctx.table(f"geotessera/{y}").row_of(cell.raw) is not None
            ]
            note = "a cell: its observations (flag series) in the window; clear = the family's flag"
        else:
            assert area is not None
            n_cells = area.n_cells
            for fam in families:
                slots = fam_slots[fam] = [
                    t for t, _ in ctx.overpasses(reader, fam, area.box, t0, t1)
                ]
                band = _first_band(fam)
                counts = clear_counts(ctx, reader, band, area, slots, False)
                entries.append(_family_entry(fam, slots, counts, max(1, n_cells)))
            where = args.geometry if args.geometry is not None else args.bbox
            tessera = [
                y
                for y in vintages
                if ctx.table(f"geotessera/{y}").n
                and within_mask(ctx.table(f"geotessera/{y}"), where)[1]["eligible"] > 0
            ]
            if args.map and n_cells:
                fam = next((e["family"] for e in entries if e["has_data"]), families[0])
                slots = fam_slots[fam]
                per_cell = _clear_map(ctx, reader, fam, area, slots)
                map_family, map_max = fam, int(per_cell.max()) if per_cell.size else 0
                grid = np.full(area.mask().shape, np.nan)
                grid[area.ys - area.box[0], area.xs - area.box[2]] = per_cell
                png = render_count_map(
                    grid, title=f"clear {fam} observations per cell ({len(slots)} overpasses)"
                )
            note = (
                "an area: overpasses of the snapshot's overpass index touching the area's bounding "
                "box; clear = cells inside whose family flag says clear, summed per month"
            )
    chart_id = ctx.charts.put(png) if png is not None else None
    answer = {
        "kind": "cell" if cell is not None else "area",
        "cell": cell.cell if cell is not None else None,
        "area_km2": area.km2 if area is not None else None,
        "n_cells": n_cells,
        "start_date": args.start_date,
        "end_date": args.end_date,
        "families": entries,
        "bands_with_data": [b for e in entries if e["has_data"] for b in e["bands"]],
        "tessera_vintages": tessera,
        "map_family": map_family,
        "map_max": map_max,
        "chart_id": chart_id,
        "map_png_base64": base64.b64encode(png).decode("ascii") if png is not None else None,
        "note": note,
        "snapshot_id": reader.snapshot_id,
        "facts": [],
    }
    return finish(
        ctx, "coverage", args, CoverageBody, CoverageAnswer, answer, cells_read, reader.snapshot_id
    )
