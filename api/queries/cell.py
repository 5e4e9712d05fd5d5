"""Per-cell queries: trajectory, confirm, and the per-cell series and significance rule that
:mod:`api.queries.change` (did_change) shares (fast path: the context's column cache)."""

from __future__ import annotations

import functools
import math
from collections.abc import Hashable
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from api.context import ServiceContext
from api.errors import NoObservation
from api.models import (
    ConfirmAnswer,
    ConfirmBody,
    ConfirmIn,
    TrajectoryAnswer,
    TrajectoryBody,
    TrajectoryIn,
)
from api.queries._common import (
    CellRef,
    canonical_scalar_band,
    check_window,
    clear_info,
    finish,
    make_fact,
    parse_cell_arg,
    slot_date,
    store_errors,
)
from api.registry import primitive
from store import address
from store.claims import evaluate, parse_claim
from store.memo import BoundedMemo
from store.tslot import nearest_slots

if TYPE_CHECKING:
    from store.cube.read import CubeReader

__all__ = [
    "RULE",
    "SIGMA_FLOOR",
    "Z_THRESHOLD",
    "CellSeries",
    "cell_text",
    "confirm",
    "fast_median",
    "no_observation",
    "read_cell",
    "robust_sigma",
    "trajectory",
]

Z_THRESHOLD = 3.0
"""|z| at or above which did_change calls a change significant."""

SIGMA_FLOOR: dict[str, float] = {
    "indices.ndvi": 0.02,
    "indices.ndwi": 0.02,
    "indices.ndmi": 0.02,
    "indices.lswi": 0.02,
    "indices.evi": 0.03,
    "indices.vh_vv": 0.02,
    "s1.vv": 0.005,
    "s1.vh": 0.002,
}
"""Smallest noise scale per band (sensor / processing noise the series cannot show)."""

_MAD_TO_SIGMA = 1.4826

RULE = (
    "significant when both ends are clear and |delta| >= {thr} * sigma; sigma = max(floor, "
    "1.4826 * MAD(consecutive differences of the cell's clear series) / sqrt(2)), a robust noise "
    "scale of the cell's own observations that one abrupt step does not inflate"
)


class CellSeries:
    """One cell's values and observation flags along the band's stored tslots."""

    __slots__ = ("_sigma", "clear", "flag", "observed", "tslots", "values")

    def __init__(
        self,
        tslots: npt.NDArray[np.int64],
        values: npt.NDArray[np.float64],
        flag: npt.NDArray[np.int64],
        clear_value: int,
    ) -> None:
        self.tslots = tslots
        """Union of slots with a value or an observation flag, ascending."""
        self.values = values
        """Value per slot (NaN = none)."""
        self.flag = flag
        """Observation flag per slot (0 = no observation)."""
        self.clear = (flag == clear_value) & np.isfinite(values)
        """Clear value per slot."""
        self.observed = (flag > 0) | np.isfinite(values)
        """Any observation (masked included)."""
        self._sigma: dict[float, tuple[float, int]] = {}

    def clear_sigma(self, floor: float) -> tuple[float, int]:
        """:func:`robust_sigma` of the clear values with ``floor`` (computed once per floor)."""
        got = self._sigma.get(floor)
        if got is None:
            got = self._sigma[floor] = robust_sigma(self.values[self.clear], floor)
        return got

    def valid_slots(self) -> npt.NDArray[np.int64]:
        """Slots holding a finite value."""
        return self.tslots[np.isfinite(self.values)]

    def at(self, t: int) -> int | None:
        """Index of slot ``t`` or None."""
        i = int(np.searchsorted(self.tslots, t))
        return i if i < self.tslots.size and self.tslots[i] == t else None


def _union_sorted(a: npt.NDArray[np.int64], b: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
    """``np.union1d`` of two int64 slot vectors, with less overhead for short ones."""
    t = np.concatenate((a, b))
    t.sort()
    if t.size > 1:
        t = t[np.concatenate(([True], t[1:] != t[:-1]))]
    return t


def _align(
    a_t: npt.NDArray[np.int64],
    a_v: npt.NDArray[Any],
    b_t: npt.NDArray[np.int64],
    b_v: npt.NDArray[Any],
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.float64], npt.NDArray[np.int64]]:
    # usually the band and its flag share their slots: no union to compute
    same = a_t.size == b_t.size and np.array_equal(a_t, b_t)
    t = a_t if same else _union_sorted(a_t, b_t)
    values = np.full(t.size, np.nan)
    flag = np.zeros(t.size, np.int64)
    if a_t.size:
        values[np.searchsorted(t, a_t)] = a_v
    if b_t.size:
        flag[np.searchsorted(t, b_t)] = b_v
    return t, values, flag


class SlotAlignment:
    """Where a band's and its flag's block slots sit in their union (what :func:`_align` does
    per cell, done once per pair of block columns: both are the same for every cell of a block).
    """

    __slots__ = ("a_at", "a_t", "b_at", "b_t", "same", "t")

    def __init__(self, a_t: npt.NDArray[np.int64], b_t: npt.NDArray[np.int64]) -> None:
        self.a_t = a_t
        """The band's slots (the column's own array: the memo checks it is the same object)."""
        self.b_t = b_t
        """The flag's slots."""
        self.same = a_t.size == b_t.size and bool(np.array_equal(a_t, b_t))
        """Both have the same slots (no union needed)."""
        self.t = a_t if self.same else _union_sorted(a_t, b_t)
        """The union of both, ascending."""
        self.a_at: npt.NDArray[np.intp] | None = None
        """Index in ``t`` of each band slot (None when both have the same slots)."""
        self.b_at: npt.NDArray[np.intp] | None = None
        """Index in ``t`` of each flag slot (None when both have the same slots)."""
        if not self.same:
            self.t.flags.writeable = False
            self.a_at = np.searchsorted(self.t, a_t)
            self.b_at = np.searchsorted(self.t, b_t)
            self.a_at.flags.writeable = False
            self.b_at.flags.writeable = False

    def place(
        self, a_v: npt.NDArray[np.float64], b_v: npt.NDArray[np.int64]
    ) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.float64], npt.NDArray[np.int64]]:
        """``_align(a_t, a_v, b_t, b_v)`` with the slot work already done."""
        if self.a_at is None or self.b_at is None:  # the same slots: the columns as they are
            return self.t, np.array(a_v, dtype=np.float64), np.array(b_v, dtype=np.int64)
        values = np.full(self.t.size, np.nan)
        flag = np.zeros(self.t.size, np.int64)
        if self.a_t.size:
            values[self.a_at] = a_v
        if self.b_t.size:
            flag[self.b_at] = b_v
        return self.t, values, flag


def slot_alignment(
    memo: BoundedMemo, key: Hashable, a_t: npt.NDArray[np.int64], b_t: npt.NDArray[np.int64]
) -> SlotAlignment:
    """The :class:`SlotAlignment` of two block columns' slots, remembered under ``key``.

    ``key`` names the snapshot, the bands and the blocks; a remembered entry is used only
    when it was made from these very arrays (a column dropped from the cache and read
    again is a new array: its alignment is made again).
    """
    got: SlotAlignment = memo.get(key, lambda: SlotAlignment(a_t, b_t))
    if got.a_t is a_t and got.b_t is b_t:
        return got
    got = SlotAlignment(a_t, b_t)
    memo.put(key, got)
    return got


def read_cell(
    ctx: ServiceContext, reader: CubeReader, band: str, lat_q: int, lng_q: int
) -> CellSeries:
    """A cell's series and flags from the column cache (microseconds when warm).

    Flag bands (``s2.clear``, ``s1.valid``) read as their own value (0 -> NaN).
    Remembered per snapshot, band and cell in ``ctx.cells`` (a snapshot never changes);
    the series' arrays are read-only.
    """
    key = (reader.snapshot_id, band, lat_q, lng_q)
    series: CellSeries = ctx.cells.get(
        key, lambda: _frozen(_read_cell(ctx, reader, band, lat_q, lng_q))
    )
    return series


def _frozen(series: CellSeries) -> CellSeries:
    for arr in (series.tslots, series.values, series.flag, series.clear, series.observed):
        arr.flags.writeable = False
    return series


def _read_cell(
    ctx: ServiceContext, reader: CubeReader, band: str, lat_q: int, lng_q: int
) -> CellSeries:
    flag_band, clear_value = clear_info(band)
    fcol = ctx.column(reader, flag_band, lat_q, lng_q)
    ft, fv = fcol.tslots, fcol.cell(lat_q, lng_q)
    if band == flag_band:
        fv64 = fv.astype(np.int64)
        vals = np.where(fv64 > 0, fv64.astype(np.float64), np.nan)
        keep = fv64 > 0
        return CellSeries(ft[keep], vals[keep], fv64[keep], clear_value)
    vcol = ctx.column(reader, band, lat_q, lng_q)
    vt, vv = vcol.tslots, vcol.cell(lat_q, lng_q)
    key = (reader.snapshot_id, band, flag_band, vcol.lat_q0, vcol.lng_q0, fcol.lat_q0, fcol.lng_q0)
    slots = slot_alignment(ctx.alignments, key, vt, ft)
    if slots.same:  # usual on most stores: the band and its flag share slots
        t, values, flag = vt, vv.astype(np.float64), fv.astype(np.int64)
    else:
        t, values, flag = slots.place(vv.astype(np.float64), fv.astype(np.int64))
    keep = (flag > 0) | np.isfinite(values)
    if not keep.all():
        t, values, flag = t[keep], values[keep], flag[keep]
    return CellSeries(t, values, flag, clear_value)


@functools.lru_cache(maxsize=65536)
def cell_text(lat_q: int, lng_q: int) -> str:
    """cell64 text of a lattice cell (a neighbour named in ``cells_read``), remembered."""
    return address.format_cell(address.q_to_raw(lat_q, lng_q))


def no_observation(series: CellSeries, cell: CellRef, band: str, t: int) -> NoObservation:
    """The typed error for a cell without a clear value at ``t``: why, and the nearest valid
    tslots before and after it (did_change and read_cell answer it alike)."""
    valid = series.valid_slots()
    before, after = nearest_slots(valid, t)
    i = series.at(t)
    if i is not None and series.flag[i] > 0:
        reason = "observed but masked (cloud, shadow or invalid)"
    else:
        reason = "no overpass of the cell at this tslot"
    details: dict[str, Any] = {
        "cell": cell.cell,
        "band": band,
        "tslot": t,
        "date": slot_date(t),
        "reason": reason,
        "nearest_before": before,
        "nearest_before_date": slot_date(before) if before is not None else None,
        "nearest_after": after,
        "nearest_after_date": slot_date(after) if after is not None else None,
    }
    return NoObservation(
        f"{band} has no value at cell {cell.cell} on tslot {t} ({slot_date(t)}): {reason}; "
        f"nearest valid tslots: before {before}, after {after}",
        details=details,
    )


def fast_median(values: npt.NDArray[np.float64]) -> float:
    """``float(np.median(values))`` of a non-empty finite 1-D array, bit for bit, minus its overhead.

    The same partition (same kth, so equal values such as 0.0 and -0.0 land in
    the same places) and the same mean of the middle element(s): numpy sums
    from +0.0, so ``(0.0 + a + b) / 2`` (and a lone -0.0 comes back as 0.0).
    """
    n = values.size
    h = n // 2
    if n % 2:
        return 0.0 + float(np.partition(values, [h, -1])[h])
    part = np.partition(values, [h - 1, h, -1])
    return (0.0 + float(part[h - 1]) + float(part[h])) / 2.0


def robust_sigma(values: npt.NDArray[np.float64], floor: float) -> tuple[float, int]:
    """The robust spread of a cell's values and how many it rests on (floored)."""
    v = values[np.isfinite(values)]
    if v.size >= 4:
        d = np.diff(v)
        mad = fast_median(np.abs(d - fast_median(d)))
        return max(floor, _MAD_TO_SIGMA * mad / math.sqrt(2.0)), int(v.size)
    return floor, int(v.size)


@primitive(
    "trajectory",
    TrajectoryIn,
    TrajectoryAnswer,
    "A cell's time series of one band (tslot, date, value, clear).",
    "Every observation of the cell (masked ones with value null), oldest first, so callers can "
    "pick valid tslots for did_change. Optional window [t0, t1] (inclusive).",
)
def trajectory(ctx: ServiceContext, args: TrajectoryIn) -> TrajectoryAnswer:
    """trajectory {cell, band, window?, as_of?}."""
    cell = parse_cell_arg(args.cell)
    band = canonical_scalar_band(args.band)
    window = check_window(args.window) if args.window is not None else None
    with store_errors():
        reader = ctx.reader_as_of(args.as_of)
        s = read_cell(ctx, reader, band, cell.lat_q, cell.lng_q)
        keep = np.ones(s.tslots.size, bool)
        if window is not None:
            keep = (s.tslots >= window[0]) & (s.tslots <= window[1])
        points = []
        facts = []
        for t, v, c in zip(
            s.tslots[keep].tolist(), s.values[keep].tolist(), s.clear[keep].tolist(), strict=True
        ):
            finite = math.isfinite(v)
            points.append(
                {"tslot": t, "date": slot_date(t), "value": v if finite else None, "clear": bool(c)}
            )
            if finite:
                facts.append(
                    make_fact(
                        ctx, reader, cell.cell, band, t, v, lat_q=cell.lat_q, lng_q=cell.lng_q
                    )
                )
    answer = {
        "cell": cell.cell,
        "lat": cell.lat,
        "lng": cell.lng,
        "band": band,
        "window": list(window) if window else None,
        "points": points,
        "n_clear": sum(1 for p in points if p["clear"]),
        "valid_tslots": [p["tslot"] for p in points if p["value"] is not None],
        "snapshot_id": reader.snapshot_id,
        "facts": facts,
    }
    return finish(
        ctx,
        "trajectory",
        args,
        TrajectoryBody,
        TrajectoryAnswer,
        answer,
        [cell.cell],
        reader.snapshot_id,
    )


@primitive(
    "confirm",
    ConfirmIn,
    ConfirmAnswer,
    "Is a claim about one band true at a cell? Verdict true/false/unknown with the facts behind it.",
    "Claim {band, op, value, tslot? | window?, agg?}; ops eq ne lt le gt ge in ni exists absent; "
    "agg any all mean min max. Without tslot/window the cell's latest fact is used. unknown when "
    "the cell has no fact the claim can rest on.",
)
def confirm(ctx: ServiceContext, args: ConfirmIn) -> ConfirmAnswer:
    """confirm {claim, cell, as_of?}."""
    cell = parse_cell_arg(args.cell)
    raw = args.claim.model_dump()
    band = canonical_scalar_band(raw.get("band"), allow_flags=True)
    claim = parse_claim(raw, band)
    with store_errors():
        reader = ctx.reader_as_of(args.as_of)
        s = read_cell(ctx, reader, band, cell.lat_q, cell.lng_q)
        result = evaluate(claim, s.tslots, s.values)
        used = np.flatnonzero(result.used[:, 0])
        facts = []
        for i in used.tolist():
            v = float(s.values[i])
            value: Any = int(v) if band in ("s2.clear", "s1.valid") else v
            facts.append(
                make_fact(
                    ctx,
                    reader,
                    cell.cell,
                    band,
                    int(s.tslots[i]),
                    value,
                    lat_q=cell.lat_q,
                    lng_q=cell.lng_q,
                )
            )
    verdict_code = int(result.verdict[0])
    verdict = {1: "true", 0: "false", -1: "unknown"}[verdict_code]
    agg = float(result.aggregate[0])
    if verdict == "unknown":
        reason = f"no {band} fact at cell {cell.cell} for the claim's time selection"
    else:
        n = len(facts)
        reason = f"{claim.op} evaluated over {n} fact{'s' if n != 1 else ''} (agg {claim.agg})"
    answer = {
        "cell": cell.cell,
        "claim": claim.as_dict(),
        "verdict": verdict,
        "reason": reason,
        "aggregate": agg if math.isfinite(agg) else None,
        "snapshot_id": reader.snapshot_id,
        "facts": facts,
    }
    return finish(
        ctx, "confirm", args, ConfirmBody, ConfirmAnswer, answer, [cell.cell], reader.snapshot_id
    )
