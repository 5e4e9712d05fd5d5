"""Band reads at cells: read_cell and read_cells (the public protocol's recall / recall_many).

Values come from the context's cached block columns (:mod:`store.cube.read` through
:class:`api.context.ServiceContext`), the same path did_change and trajectory read,
so a value and its fact id here equal the ones those answers cite.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import numpy as np

from api.context import ServiceContext
from api.errors import InvalidArgument
from api.models.read import (
    MAX_READ_CELLS,
    ReadCellAnswer,
    ReadCellBody,
    ReadCellIn,
    ReadCellsAnswer,
    ReadCellsBody,
    ReadCellsIn,
)
from api.queries._common import (
    CellRef,
    canonical_scalar_band,
    clear_info,
    finish,
    make_fact,
    parse_cell_arg,
    slot_date,
    store_errors,
)
from api.queries.cell import read_cell
from api.registry import primitive
from store import tslot as tslots
from store.cube.bands import FLAG_BANDS, SCALAR_BANDS, registered
from store.errors import InvalidDate
from store.facts import fact_ids
from store.tslot import nearest_slots

if TYPE_CHECKING:
    from store.cube.read import CubeReader

__all__ = [
    "canonical_bands",
    "read_band",
    "read_band_many",
    "read_cell_values",
    "read_cells_values",
    "time_of",
]


def canonical_bands(bands: list[str] | None) -> list[str]:
    """Canonical scalar/flag band names, de-duplicated in order (default: every scalar band).

    Raises:
        InvalidArgument: ``unknown_band`` (vector bands included: read them with find_similar).
    """
    if bands is None:
        return list(SCALAR_BANDS)
    out: list[str] = []
    for b in bands:
        name = canonical_scalar_band(b, allow_flags=True)
        if name not in out:
            out.append(name)
    if not out:
        raise InvalidArgument("bands must name at least one band", code="unknown_band")
    return out


def time_of(tslot: int | None, date: str | None) -> int | None:
    """The day slot asked for: ``tslot``, the day of ``date``, or None (latest clear).

    Raises:
        InvalidArgument: both given, or a malformed date (``invalid_date``).
    """
    if tslot is not None and date is not None:
        raise InvalidArgument("give tslot or date, not both", code="invalid_argument")
    if date is None:
        return tslot
    try:
        return tslots.day_slot(date.strip())
    except InvalidDate as exc:
        raise InvalidArgument(f"date: {exc}", code="invalid_date") from None


def read_band(
    ctx: ServiceContext, reader: CubeReader, cell: CellRef, band: str, t: int | None
) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """One band's value at a cell (at ``t``, or its latest clear value) and its fact."""
    s = read_cell(ctx, reader, band, cell.lat_q, cell.lng_q)
    flag = band in FLAG_BANDS
    out: dict[str, Any] = {"band": band, "sources": [], "fact_id": None}
    if t is None:
        idx = np.flatnonzero(s.clear)
        if not idx.size:
            out.update(status="no_observation", tslot=None, date=None, value=None, clear=False)
            return out, None
        i: int | None = int(idx[-1])
    else:
        i = s.at(t)
    if i is None or not math.isfinite(s.values[i]):
        before, after = nearest_slots(s.valid_slots(), t if t is not None else 0)
        masked = i is not None and s.flag[i] > 0
        out.update(
            status="masked" if masked else "no_observation",
            tslot=t,
            date=slot_date(t) if t is not None else None,
            value=None,
            clear=False,
            nearest_before=before,
            nearest_after=after,
        )
        return out, None
    slot = int(s.tslots[i])
    v = float(s.values[i])
    value: float | int = int(v) if flag else v
    fact = make_fact(ctx, reader, cell.cell, band, slot, value, lat_q=cell.lat_q, lng_q=cell.lng_q)
    out.update(
        status="ok",
        tslot=slot,
        date=fact["date"],
        value=value,
        clear=bool(s.clear[i]),
        sources=fact["sources"],
        fact_id=fact["fact_id"],
    )
    return out, fact


def read_band_many(
    ctx: ServiceContext, reader: CubeReader, cells: list[CellRef], band: str, t: int | None
) -> list[tuple[dict[str, Any], dict[str, Any] | None]]:
    """:func:`read_band` of many cells: the same entries and facts, per cell in order.

    Vectorised per storage block: each block's cached band and flag columns are read
    once for all its cells, the latest clear (or the asked) slot is found for all of
    them in one pass, and the facts' sources and ids are computed in batches
    (:meth:`store.inventory.OverpassIndex.sources_many`, :func:`store.facts.fact_ids`).
    """
    flag_band, clear_value = clear_info(band)
    is_flag = band in FLAG_BANDS
    side_bits = reader.block_level
    groups: dict[tuple[int, int], list[int]] = {}
    for j, c in enumerate(cells):
        groups.setdefault((c.lat_q >> side_bits, c.lng_q >> side_bits), []).append(j)
    entries: list[dict[str, Any]] = [{} for _ in cells]
    found: list[tuple[int, int, float | int]] = []  # (cell index, slot, value)
    for members in groups.values():
        first = cells[members[0]]
        fcol = ctx.column(reader, flag_band, first.lat_q, first.lng_q)
        ys = np.fromiter((cells[j].lat_q for j in members), np.int64, len(members)) - fcol.lat_q0
        xs = np.fromiter((cells[j].lng_q for j in members), np.int64, len(members)) - fcol.lng_q0
        fv = fcol.values[:, ys, xs].astype(np.int64)
        if band == flag_band:
            slots = fcol.tslots
            flag = fv
            values = np.where(fv > 0, fv.astype(np.float64), np.nan)
        else:
            vcol = ctx.column(reader, band, first.lat_q, first.lng_q)
            vv = vcol.values[:, ys, xs].astype(np.float64)
            same = np.array_equal(vcol.tslots, fcol.tslots)
            slots = fcol.tslots if same else np.union1d(vcol.tslots, fcol.tslots)
            values = np.full((slots.size, len(members)), np.nan)
            flag = np.zeros((slots.size, len(members)), np.int64)
            values[np.searchsorted(slots, vcol.tslots)] = vv
            flag[np.searchsorted(slots, fcol.tslots)] = fv
        finite = np.isfinite(values)
        clear = (flag == clear_value) & finite
        if t is None:
            has = clear.any(axis=0)
            last = slots.size - 1 - np.argmax(clear[::-1], axis=0) if slots.size else has
            for m, j in enumerate(members):
                if has[m]:
                    i = int(last[m])
                    found.append((j, int(slots[i]), float(values[i, m])))
                    entries[j] = {"clear": bool(clear[i, m])}
                else:
                    entries[j] = {
                        "band": band,
                        "sources": [],
                        "fact_id": None,
                        "status": "no_observation",
                        "tslot": None,
                        "date": None,
                        "value": None,
                        "clear": False,
                    }
            continue
        k = int(np.searchsorted(slots, t))
        present = k < slots.size and int(slots[k]) == t
        for m, j in enumerate(members):
            observed = present and (flag[k, m] > 0 or finite[k, m])
            if observed and finite[k, m]:
                found.append((j, t, float(values[k, m])))
                entries[j] = {"clear": bool(clear[k, m])}
                continue
            before, after = nearest_slots(slots[finite[:, m]], t)
            entries[j] = {
                "band": band,
                "sources": [],
                "fact_id": None,
                "status": "masked" if observed else "no_observation",
                "tslot": t,
                "date": slot_date(t),
                "value": None,
                "clear": False,
                "nearest_before": before,
                "nearest_after": after,
            }
    facts: list[dict[str, Any] | None] = [None] * len(cells)
    if found:
        spec = registered(band)
        index = ctx.overpass_index(reader)
        by_slot: dict[int, list[int]] = {}
        for n, (_, slot, _) in enumerate(found):
            by_slot.setdefault(slot, []).append(n)
        sources: list[list[str]] = [[] for _ in found]
        for slot, ns in by_slot.items():
            got = index.sources_many(
                spec.family,
                slot,
                [cells[found[n][0]].lat_q for n in ns],
                [cells[found[n][0]].lng_q for n in ns],
            )
            for n, srcs in zip(ns, got, strict=True):
                sources[n] = srcs
        vals = [int(v) if is_flag else v for _, _, v in found]
        ids = fact_ids(
            [cells[j].cell for j, _, _ in found],
            band,
            [slot for _, slot, _ in found],
            vals,
            sources,
            spec.derivation,
        )
        for (j, slot, _), value, srcs, fid in zip(found, vals, sources, ids, strict=True):
            date = slot_date(slot)
            facts[j] = {
                "fact_id": fid,
                "cell": cells[j].cell,
                "band": band,
                "tslot": slot,
                "date": date,
                "value": value,
                "sources": srcs,
                "derivation": spec.derivation,
            }
            entries[j] = {
                "band": band,
                "sources": srcs,
                "fact_id": fid,
                "status": "ok",
                "tslot": slot,
                "date": date,
                "value": value,
                "clear": entries[j]["clear"],
            }
    return list(zip(entries, facts, strict=True))


def _time_label(t: int | None) -> str:
    return "latest_clear" if t is None else f"tslot {t}"


@primitive(
    "read_cell",
    ReadCellIn,
    ReadCellAnswer,
    "Values of bands at one cell (the protocol's recall): latest clear value, or at a tslot/date.",
    "Each band's value with its fact id, date, clear flag and source scenes. Without tslot or "
    "date: each band's latest clear value. With one: the value on that day, or status masked / "
    "no_observation with the nearest tslots holding a value. as_of reads an older snapshot. "
    "Many cells at once: read_cells.",
)
def read_cell_values(ctx: ServiceContext, args: ReadCellIn) -> ReadCellAnswer:
    """read_cell {cell, bands?, tslot? | date?, as_of?}."""
    cell = parse_cell_arg(args.cell)
    bands = canonical_bands(args.bands)
    t = time_of(args.tslot, args.date)
    with store_errors():
        reader = ctx.reader_as_of(args.as_of)
        values, facts = [], []
        for band in bands:
            v, f = read_band(ctx, reader, cell, band, t)
            values.append(v)
            if f is not None:
                facts.append(f)
    answer = {
        "cell": cell.cell,
        "lat": cell.lat,
        "lng": cell.lng,
        "time": _time_label(t),
        "values": values,
        "snapshot_id": reader.snapshot_id,
        "facts": facts,
    }
    return finish(
        ctx,
        "read_cell",
        args,
        ReadCellBody,
        ReadCellAnswer,
        answer,
        [cell.cell],
        reader.snapshot_id,
    )


@primitive(
    "read_cells",
    ReadCellsIn,
    ReadCellsAnswer,
    f"Values of bands at up to {MAX_READ_CELLS} cells in one call (the protocol's recall_many).",
    "read_cell for many cells: per cell and band the value (latest clear, or at tslot) with its "
    f"fact id, date, clear flag and source scenes. More than {MAX_READ_CELLS} cells: "
    "too_many_cells.",
)
def read_cells_values(ctx: ServiceContext, args: ReadCellsIn) -> ReadCellsAnswer:
    """read_cells {cells, bands, tslot?, as_of?}."""
    if not args.cells:
        raise InvalidArgument("cells must list at least one cell64", code="invalid_argument")
    if len(args.cells) > MAX_READ_CELLS:
        raise InvalidArgument(
            f"{len(args.cells)} cells asked; read_cells reads at most {MAX_READ_CELLS}",
            code="too_many_cells",
            details={"max_cells": MAX_READ_CELLS, "cells": len(args.cells)},
        )
    refs: dict[str, CellRef] = {}
    for i, c in enumerate(args.cells):
        ref = parse_cell_arg(c, f"cells[{i}]")
        refs.setdefault(ref.cell, ref)
    bands = canonical_bands(args.bands)
    t = args.tslot
    with store_errors():
        reader = ctx.reader_as_of(args.as_of)
        cells = list(refs.values())
        per_band = [read_band_many(ctx, reader, cells, band, t) for band in bands]
        out, facts = [], []
        for j, ref in enumerate(cells):
            values = []
            for got in per_band:
                v, f = got[j]
                values.append(v)
                if f is not None:
                    facts.append(f)
            out.append({"cell": ref.cell, "lat": ref.lat, "lng": ref.lng, "values": values})
    answer = {
        "time": _time_label(t),
        "cells": out,
        "n_values": len(facts),
        "snapshot_id": reader.snapshot_id,
        "facts": facts,
    }
    return finish(
        ctx,
        "read_cells",
        args,
        ReadCellsBody,
        ReadCellsAnswer,
        answer,
        list(refs),
        reader.snapshot_id,
    )
