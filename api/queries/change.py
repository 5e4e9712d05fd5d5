"""did_change: did one band change at a cell between two tslots (the cell's series, its
neighbours, a robust significance test; the series and constants of :mod:`api.queries.cell`)."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import numpy as np

from api.context import ServiceContext
from api.models import DidChangeAnswer, DidChangeBody, DidChangeIn
from api.queries._common import (
    CellRef,
    canonical_scalar_band,
    check_window,
    clear_info,
    finish,
    finish_exact,
    make_fact,
    parse_cell_arg,
    slot_date,
    store_errors,
)
from api.queries.cell import (
    RULE,
    SIGMA_FLOOR,
    Z_THRESHOLD,
    cell_text,
    fast_median,
    no_observation,
    read_cell,
)
from api.registry import primitive
from store import address
from store.cube.bands import registered

if TYPE_CHECKING:
    from store.cube.read import CubeReader

__all__ = ["did_change", "did_change_signed", "neighbour_deltas_of"]


def did_change_signed(ctx: ServiceContext, args: DidChangeIn) -> dict[str, Any]:
    """:func:`did_change`'s signed answer dict (its ``model_dump(mode="json")``), no model built.

    The body is built field by field in :class:`DidChangeBody`'s order with the exact JSON
    types of its dump (floats by ``float``, ``bool``, ``int``, ``str``, None; fact records of
    plain values), so it is signed as it is (:func:`api.queries._common.finish_exact`).
    """
    answer, cells_read, snapshot_id = _did_change_body(ctx, args)
    return finish_exact(ctx, "did_change", args, DidChangeAnswer, answer, cells_read, snapshot_id)


@primitive(
    "did_change",
    DidChangeIn,
    DidChangeAnswer,
    "Did one band change at a cell between two tslots, and is the change significant?",
    "Values at both tslots, the delta, whether each end was clear, and a significance test "
    "against the cell's own variability (robust z). A tslot without a value is an error "
    "(no_observation) listing the nearest valid tslots; get valid tslots from trajectory.",
    signed=did_change_signed,
)
def did_change(ctx: ServiceContext, args: DidChangeIn) -> DidChangeAnswer:
    """did_change {cell, band, window: [t0, t1], as_of?}."""
    answer, cells_read, snapshot_id = _did_change_body(ctx, args)
    return finish(
        ctx,
        "did_change",
        args,
        DidChangeBody,
        DidChangeAnswer,
        answer,
        cells_read,
        snapshot_id,
    )


def _did_change_body(
    ctx: ServiceContext, args: DidChangeIn
) -> tuple[dict[str, Any], list[str], str]:
    """did_change's answer body, the cells it read and the snapshot id."""
    cell = parse_cell_arg(args.cell)
    band = canonical_scalar_band(args.band)
    t0, t1 = check_window(args.window)
    with store_errors():
        reader = ctx.reader_as_of(args.as_of)
        snapshot_id = reader.snapshot_id
        series = read_cell(ctx, reader, band, cell.lat_q, cell.lng_q)
        ends = []
        for t in (t0, t1):
            i = series.at(t)
            if i is None or not math.isfinite(series.values[i]):
                raise no_observation(series, cell, band, t)
            ends.append(i)
        i0, i1 = ends
        v0, v1 = float(series.values[i0]), float(series.values[i1])
        delta = v1 - v0
        floor = SIGMA_FLOOR.get(band, 0.02)
        sigma, n_obs = series.clear_sigma(floor)
        z = delta / sigma
        c0, c1 = bool(series.clear[i0]), bool(series.clear[i1])
        significant = c0 and c1 and abs(z) >= Z_THRESHOLD
        # context: the 8 surrounding cells' deltas over the same window
        neighbour_deltas, around = neighbour_deltas_of(ctx, reader, band, cell, t0, t1)
        cells_read = [cell.cell, *around]
        flag_band, _clear_value = clear_info(band)
        la, ln = cell.lat_q, cell.lng_q
        src0 = ctx.sources(reader, band, t0, la, ln)
        src1 = ctx.sources(reader, band, t1, la, ln)
        # the flag is its family's: the same inventory rows name the same scenes
        same = registered(flag_band).family == registered(band).family
        facts = [
            make_fact(ctx, reader, cell.cell, band, t0, v0, sources=src0),
            make_fact(ctx, reader, cell.cell, band, t1, v1, sources=src1),
            *(  # the flag at each end, with its end's sources when they are the band's
                make_fact(
                    ctx,
                    reader,
                    cell.cell,
                    flag_band,
                    t,
                    int(series.flag[i]),
                    lat_q=la,
                    lng_q=ln,
                    sources=src if same else None,
                )
                for t, i, src in ((t0, i0, src0), (t1, i1, src1))
            ),
        ]
    answer = {
        "cell": cell.cell,
        "lat": cell.lat,
        "lng": cell.lng,
        "band": band,
        "start": {"tslot": t0, "date": slot_date(t0), "value": v0, "clear": c0},
        "end": {"tslot": t1, "date": slot_date(t1), "value": v1, "clear": c1},
        "delta": delta,
        "changed": significant,
        "significant": significant,
        "significance": {
            "sigma": sigma,
            "sigma_floor": floor,
            "z": z,
            "n_observations": n_obs,
            "threshold": Z_THRESHOLD,
            "neighbour_delta_median": fast_median(np.array(neighbour_deltas))
            if neighbour_deltas
            else None,
            "neighbour_count": len(neighbour_deltas),
            "rule": _RULE_TEXT,
        },
        "snapshot_id": snapshot_id,
        "facts": facts,
    }
    return answer, cells_read, snapshot_id


_RULE_TEXT = RULE.format(thr=Z_THRESHOLD)
"""did_change's decision rule in words (the answer's ``significance.rule``)."""

_AROUND = tuple((dy, dx) for dy in (-1, 0, 1) for dx in (-1, 0, 1) if dy or dx)
"""The 8 neighbours of a cell, row by row."""


def neighbour_deltas_of(
    ctx: ServiceContext, reader: CubeReader, band: str, cell: CellRef, t0: int, t1: int
) -> tuple[list[float], list[str]]:
    """The deltas ``value(t1) - value(t0)`` of the cell's 8 neighbours that have both values,
    and those neighbours' cell64 texts, in :data:`_AROUND` order.

    A cell inside its block (all 8 neighbours in the same block column, the usual case)
    reads the 3 x 3 patch at both slots in one step; any other cell takes
    :func:`_neighbour_deltas_loop`, one neighbour at a time. Both give the same lists.
    """
    lat_q, lng_q = cell.lat_q, cell.lng_q
    col = ctx.column(reader, band, lat_q, lng_q)
    y, x = lat_q - col.lat_q0, lng_q - col.lng_q0
    if not (
        col.values.dtype.kind == "f"  # float32/64: tolist() gives what float() gives
        and 1 <= y < col.values.shape[1] - 1
        and 1 <= x < col.values.shape[2] - 1
        and 1 < lat_q < address.LAT_MAX_Q - 1
        and 1 <= lng_q < address.LNG_MAX_Q - 1
    ):
        return _neighbour_deltas_loop(ctx, reader, band, cell, t0, t1)
    nt = col.tslots
    j0, j1 = np.searchsorted(nt, np.array([t0, t1], np.int64)).tolist()
    if not (j0 < nt.size and j1 < nt.size and nt[j0] == t0 and nt[j1] == t1):
        return [], []
    before = col.values[j0, y - 1 : y + 2, x - 1 : x + 2].tolist()
    after = col.values[j1, y - 1 : y + 2, x - 1 : x + 2].tolist()
    deltas: list[float] = []
    cells: list[str] = []
    for dy, dx in _AROUND:
        a, b = before[dy + 1][dx + 1], after[dy + 1][dx + 1]
        if math.isfinite(a) and math.isfinite(b):
            deltas.append(b - a)
            cells.append(cell_text(lat_q + dy, lng_q + dx))
    return deltas, cells


def _neighbour_deltas_loop(
    ctx: ServiceContext, reader: CubeReader, band: str, cell: CellRef, t0: int, t1: int
) -> tuple[list[float], list[str]]:
    """:func:`neighbour_deltas_of`, one neighbour at a time (any cell: block edges, the
    lattice's edges)."""
    neighbour_deltas: list[float] = []
    cells_read: list[str] = []
    window = np.array([t0, t1], np.int64)
    col = None  # the block column of the last neighbour (most share the cell's block)
    hit: tuple[int, int] | None = None  # where t0 and t1 sit in its tslots
    for dy, dx in _AROUND:
        la, ln = cell.lat_q + dy, cell.lng_q + dx
        if not (0 < la < address.LAT_MAX_Q and 0 <= ln < address.LNG_MAX_Q):
            continue
        if col is None or not (
            0 <= la - col.lat_q0 < col.values.shape[1]
            and 0 <= ln - col.lng_q0 < col.values.shape[2]
        ):
            col = ctx.column(reader, band, la, ln)
            nt = col.tslots
            j0, j1 = np.searchsorted(nt, window).tolist()
            found = j0 < nt.size and j1 < nt.size and nt[j0] == t0 and nt[j1] == t1
            hit = (j0, j1) if found else None
        if hit is not None:
            y, x = la - col.lat_q0, ln - col.lng_q0
            a, b = float(col.values[hit[0], y, x]), float(col.values[hit[1], y, x])
            if math.isfinite(a) and math.isfinite(b):
                neighbour_deltas.append(b - a)
                cells_read.append(cell_text(la, ln))
    return neighbour_deltas, cells_read
