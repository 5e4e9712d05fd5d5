"""Band reads at cells: read_cell and read_cells (the public protocol's recall / recall_many).

Values come from the context's cached block columns (:mod:`store.cube.read` through
:class:`api.context.ServiceContext`), the same path did_change and trajectory read,
so a value and its fact id here equal the ones those answers cite.
"""

from __future__ import annotations

import math
from typing import Any

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
    finish,
    make_fact,
    parse_cell_arg,
    slot_date,
    store_errors,
)
from api.queries.cell import read_cell
from api.registry import primitive
from store import tslot as tslots
from store.cube import CubeReader
from store.cube.bands import FLAG_BANDS, SCALAR_BANDS
from store.errors import InvalidDate
from store.tslot import nearest_slots

__all__ = ["canonical_bands", "read_band", "read_cell_values", "read_cells_values", "time_of"]


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
        out, facts = [], []
        for ref in refs.values():
            values = []
            for band in bands:
                v, f = read_band(ctx, reader, ref, band, t)
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
