"""Per-block summaries of the scalar bands: what the writer stores, how they compose, what they answer.

A summary describes the clear values of one scalar band (an index or a
backscatter band of a family with an observation flag) in one summary block
(a level ``k - 2`` block of the hierarchy, :func:`summary_level`: 32 x 32
cells under the default 128 x 128 storage blocks, 16 per chunk, so areas of
a few km^2 hold whole ones) on one day slot, with every cell weighed
by ``cos(latitude of its centre)`` as area_over_time weighs it. It is one
float64 vector of :data:`N_FIELDS` numbers:

====================  =========================================================
``n_flag``            cells whose flag says clear (the clear-fraction numerator)
``n``                 cells clear *and* finite (the statistics' ``n_clear``)
``w``                 sum of their weights
``mean``              weighted mean (0 when ``n == 0``)
``m2``                ``sum(w (x - mean)^2)`` (weighted second central moment)
``min`` / ``max``     extremes (+inf / -inf when ``n == 0``)
``hist``              weight per bin of the band's fixed grid: an underflow bin
                      (``x < lo``), :data:`HIST_BINS` bins of width
                      ``(hi - lo) / HIST_BINS`` over ``[lo, hi)``, an overflow
                      bin (``x >= hi``); ``(lo, hi)`` is the band's
                      :attr:`~store.cube.bands.BandSpec.value_range`
====================  =========================================================

Counts, sums, means and standard deviations compose exactly (:func:`merge`:
Chan's parallel formula; only the order of floating additions differs from a
pass over the cells). Quantiles do not: the values are float32 results of
divisions, not codes of a small range, so no histogram over a code range is
exact. :func:`quantiles` gives, from a composed histogram, each quantile's
estimate and a *guaranteed* interval ``[lo, hi]`` holding the value the cell
path computes (weighted mid-point interpolation, see
:mod:`api.queries.area_stats`). The interval spans the bins holding the
cumulative weight from half a cell below the level to one and a half cells
above it: one or two bins (a bin width, ``(hi - lo) / HIST_BINS``) where the
area has many cells per bin, wider where values are sparse.

Stored as ``summaries/<band with _ for .>`` ``(tslot, summary block row,
summary block column, field)`` float64, one chunk ``(7, 4, 4, N_FIELDS)`` per
week and storage block (so a partition owns its summaries as it owns its
chunks), written by :class:`store.cube.write.CubeTransaction` in the commit of
the chunks it summarises (NaN, the fill, reads as "no summary": readers then
read the cells). :data:`N_FIELDS` float64 = 2,120 bytes per summary block
and day slot before compression (34 kB per storage block and day slot, half
the float32 chunk's 64 kB); days without an observation are zero vectors and
empty histogram bins zeros, which compress to almost nothing.

Pure: arrays in, arrays out.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import numpy as np
import numpy.typing as npt

from store import address
from store.cube.bands import BANDS, FAMILY_FLAGS, BandSpec, band_spec

__all__ = [
    "HIST_BINS",
    "N_FIELDS",
    "SUMMARY_GROUP",
    "Grid",
    "QuantileEstimate",
    "empty",
    "grids",
    "merge",
    "merge_axis",
    "merge_pair",
    "quantiles",
    "row_weights",
    "summarise_cells",
    "summarise_chunk",
    "summarised_bands",
    "summary_inputs",
    "summary_level",
    "summary_path",
    "weighted_moments",
]

HIST_BINS = 256
"""Regular bins of the histogram grid (plus one underflow and one overflow bin)."""
SUB_LEVELS = 2
"""Summary blocks are this many levels below the storage blocks (4 x 4 per chunk)."""
N_FLAG, N, W, MEAN, M2, MIN, MAX, HIST = 0, 1, 2, 3, 4, 5, 6, 7
N_FIELDS = HIST + HIST_BINS + 2
"""Numbers per summary."""
SUMMARY_GROUP = "summaries"
"""Group of the summary arrays."""
_WMAX = 1.0  # largest cell weight (cos of a latitude)


def summarised_bands() -> tuple[BandSpec, ...]:
    """The bands that have summaries: day-tempo scalars with a grid and a family flag."""
    return tuple(
        s
        for s in BANDS.values()
        if s.kind == "scalar"
        and s.tempo == "day"
        and s.value_range is not None
        and s.family in FAMILY_FLAGS
    )


def summary_inputs() -> dict[str, tuple[str, ...]]:
    """Array path -> the summarised bands whose summaries depend on it (the band, its flag)."""
    out: dict[str, list[str]] = {}
    for spec in summarised_bands():
        out.setdefault(spec.array_path, []).append(spec.name)
        flag = band_spec(FAMILY_FLAGS[spec.family][0]).array_path
        out.setdefault(flag, []).append(spec.name)
    return {k: tuple(v) for k, v in out.items()}


def summary_path(band: str) -> str:
    """Array path of a band's summaries (``summaries/indices_ndvi``)."""
    return f"{SUMMARY_GROUP}/{band.replace('.', '_')}"


@dataclass(frozen=True)
class Grid:
    """The fixed histogram grid of one band."""

    lo: float
    """Lower edge of the first regular bin."""
    hi: float
    """Upper edge of the last regular bin."""

    @classmethod
    def of(cls, spec: BandSpec) -> Grid:
        """The grid of a summarised band."""
        assert spec.value_range is not None
        return cls(float(spec.value_range[0]), float(spec.value_range[1]))

    @property
    def width(self) -> float:
        """Width of a regular bin (the documented resolution of the quantile intervals)."""
        return (self.hi - self.lo) / HIST_BINS

    def bins(self, x: npt.NDArray[np.float64]) -> npt.NDArray[np.intp]:
        """Bin of each value: 0 underflow, 1..HIST_BINS regular, HIST_BINS + 1 overflow."""
        k = np.floor((x - self.lo) / self.width).astype(np.int64) + 1
        k = np.where(x < self.lo, 0, np.where(x >= self.hi, HIST_BINS + 1, k))
        return np.clip(k, 0, HIST_BINS + 1).astype(np.intp)

    def edges(self, k: int, vmin: float, vmax: float) -> tuple[float, float]:
        """Value interval of bin ``k`` clipped to ``[vmin, vmax]``."""
        if k == 0:
            a, b = vmin, self.lo
        elif k == HIST_BINS + 1:
            a, b = self.hi, vmax
        else:
            a, b = self.lo + (k - 1) * self.width, self.lo + k * self.width
        return max(a, vmin), min(b, vmax)


def row_weights(lat_q0: int, rows: int) -> npt.NDArray[np.float64]:
    """cos(latitude) of rows ``lat_q0 .. lat_q0 + rows`` (the expression area_over_time uses)."""
    ys = np.arange(lat_q0, lat_q0 + rows, dtype=np.int64)
    lat, _ = address.q_center(ys, np.zeros_like(ys))
    return np.cos(np.radians(np.asarray(lat, dtype=np.float64)))


@lru_cache(maxsize=1024)
def _chunk_row_weights(lat_q0: int, rows: int) -> npt.NDArray[np.float64]:
    """:func:`row_weights`, remembered (read-only): the writer summarises every band of a chunk
    with the same rows, one call per band and chunk (~40 kB for 1,024 chunk rows)."""
    out = row_weights(lat_q0, rows)
    out.flags.writeable = False
    return out


def empty() -> npt.NDArray[np.float64]:
    """The summary of no cells."""
    out = np.zeros(N_FIELDS, np.float64)
    out[MIN], out[MAX] = np.inf, -np.inf
    return out


def summarise_cells(
    values: npt.NDArray[Any],
    ok: npt.NDArray[np.bool_],
    weights: npt.NDArray[np.float64],
    grid: Grid,
) -> npt.NDArray[np.float64]:
    """The summary of a set of cells (flat arrays of one day slot).

    Args:
        values: The band's values (fill and non-finite values are not counted).
        ok: Whether each cell's flag says clear.
        weights: Each cell's weight.
        grid: The band's histogram grid.
    """
    out = empty()
    ok = np.asarray(ok, bool)
    out[N_FLAG] = np.count_nonzero(ok)
    x = np.asarray(values, dtype=np.float64)
    sel = ok & np.isfinite(x)
    n = int(np.count_nonzero(sel))
    if not n:
        return out
    xs, ws = x[sel], np.asarray(weights, np.float64)[sel]
    total = float(ws.sum())
    mean = float((xs * ws).sum() / total)
    out[N], out[W], out[MEAN] = n, total, mean
    out[M2] = float((ws * (xs - mean) ** 2).sum())
    out[MIN], out[MAX] = float(xs.min()), float(xs.max())
    out[HIST:] = np.bincount(grid.bins(xs), weights=ws, minlength=HIST_BINS + 2)
    return out


def summary_level(block_level: int) -> int:
    """Level of the summary blocks for a cube of storage ``block_level``: 16 per chunk (4 x 4)."""
    return max(0, block_level - SUB_LEVELS)


def summarise_chunk(
    values: npt.NDArray[Any] | None,
    flags: npt.NDArray[Any] | None,
    clear_value: int,
    lat_q0: int,
    grid: Grid,
    sub: int,
) -> npt.NDArray[np.float64]:
    """Summaries ``(t, side/sub, side/sub, N_FIELDS)`` of one chunk ``(t, side, side)``: per day slot
    and summary block of ``sub x sub`` cells.

    Args:
        values: The band's chunk (None: not stored, all fill).
        flags: The family flag's chunk of the same block and weeks (None: all 0).
        clear_value: The flag value meaning clear.
        lat_q0: Row of the chunk's first row (weights by row).
        grid: The band's histogram grid.
        sub: Side of a summary block in cells (divides the chunk's side).

    One fused pass over the cells (:mod:`store.cube._summary_kernel`, numba), whose
    numbers are bit for bit those of the numpy form of :func:`summarise_cells` per
    block with numpy's pairwise sums (a test keeps that numpy form as the reference), but for
    the sign of a zero MIN/MAX in a block holding both -0.0 and +0.0 (equal values).
    """
    ref = values if values is not None else flags
    if ref is None:
        raise ValueError("summarise_chunk needs the values or the flags")
    from store.cube._summary_kernel import fused_summaries  # numba: loaded by writers only

    t, h, w = ref.shape[:3]
    # empty() in every row, written field by field: zeros, then the two extremes (a copy of
    # the broadcast vector is a strided copy of every element, twice as slow)
    out = np.zeros((t, h // sub, w // sub, N_FIELDS))
    out[..., MIN] = np.inf
    out[..., MAX] = -np.inf
    fused_summaries(
        values,
        flags,
        clear_value,
        _chunk_row_weights(lat_q0, h),
        sub,
        grid.lo,
        grid.hi,
        grid.width,
        HIST_BINS,
        out,
    )
    return out


def merge_pair(a: npt.NDArray[np.float64], b: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    """:func:`merge` of two summaries, element-wise over leading axes (``(..., N_FIELDS)``)."""
    out = a + b
    wa, wb = a[..., W], b[..., W]
    tot = wa + wb
    safe = np.where(tot > 0, tot, 1.0)
    delta = b[..., MEAN] - a[..., MEAN]
    out[..., MEAN] = np.where(tot > 0, a[..., MEAN] + delta * (wb / safe), 0.0)
    out[..., M2] = (
        a[..., M2] + b[..., M2] + np.where(tot > 0, delta * delta * (wa * wb / safe), 0.0)
    )
    out[..., MIN] = np.minimum(a[..., MIN], b[..., MIN])
    out[..., MAX] = np.maximum(a[..., MAX], b[..., MAX])
    return out


def merge_axis(rows: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    """:func:`merge` along the first axis of ``(k, ..., N_FIELDS)``, element-wise over the others."""
    rows = np.asarray(rows, np.float64)
    out = np.broadcast_to(empty(), rows.shape[1:]).copy()
    if rows.shape[0] == 0:
        return out
    out[..., N_FLAG] = rows[..., N_FLAG].sum(axis=0)
    out[..., N] = rows[..., N].sum(axis=0)
    out[..., HIST:] = rows[..., HIST:].sum(axis=0)
    w = rows[..., W]
    total = w.sum(axis=0)
    safe = np.where(total > 0, total, 1.0)
    mean = np.where(total > 0, (w * rows[..., MEAN]).sum(axis=0) / safe, 0.0)
    out[..., W], out[..., MEAN] = total, mean
    out[..., M2] = rows[..., M2].sum(axis=0) + (w * (rows[..., MEAN] - mean) ** 2).sum(axis=0)
    out[..., MIN] = rows[..., MIN].min(axis=0)
    out[..., MAX] = rows[..., MAX].max(axis=0)
    return out


def merge(rows: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    """One summary of the union of disjoint cell sets, from their summaries ``(k, N_FIELDS)``.

    Counts, weights and histograms add; the mean and the second moment
    combine by Chan's formula (``M2 = sum M2_i + sum w_i (mean_i - mean)^2``),
    exact up to the order of the floating additions.
    """
    rows = np.atleast_2d(np.asarray(rows, np.float64))
    out = empty()
    if rows.shape[0] == 0:
        return out
    out[N_FLAG] = rows[:, N_FLAG].sum()
    out[N] = rows[:, N].sum()
    out[HIST:] = rows[:, HIST:].sum(axis=0)
    has = rows[:, N] > 0
    if not has.any():
        return out
    r = rows[has]
    total = float(r[:, W].sum())
    mean = float((r[:, W] * r[:, MEAN]).sum() / total)
    out[W], out[MEAN] = total, mean
    out[M2] = float(r[:, M2].sum() + (r[:, W] * (r[:, MEAN] - mean) ** 2).sum())
    out[MIN], out[MAX] = float(r[:, MIN].min()), float(r[:, MAX].max())
    return out


@dataclass(frozen=True)
class QuantileEstimate:
    """A quantile from a histogram: an estimate and an interval that holds the exact value."""

    q: float
    """The quantile's level (0.5 = median)."""
    value: float
    """Estimate: linear interpolation of the weight inside the bin holding the level."""
    lo: float
    """The exact (cell path) value is at least this."""
    hi: float
    """... and at most this."""


def quantiles(
    summary: npt.NDArray[np.float64], grid: Grid, levels: tuple[float, ...]
) -> list[QuantileEstimate]:
    """Quantile estimates and guaranteed intervals from a summary's histogram.

    With ``W`` the total weight and ``p = q W``, the cell path interpolates
    between two adjacent sorted values whose cumulative weights lie within
    ``(p - wmax / 2, p + 1.5 wmax]`` (``wmax`` = 1, the largest weight; the
    mid-point rule puts a value at ``cumsum - w / 2``). The interval is
    therefore from the lower edge of the bin where the cumulative weight first
    exceeds ``p - wmax/2`` to the upper edge of the bin where it reaches
    ``p + 1.5 wmax``, clipped to ``[min, max]``.

    Raises:
        ValueError: the summary holds no value.
    """
    if summary[N] <= 0:
        raise ValueError("no value to take a quantile of")
    hist = summary[HIST:]
    cum = np.cumsum(hist)
    total = float(cum[-1])
    vmin, vmax = float(summary[MIN]), float(summary[MAX])
    slack = 1e-9 * max(1.0, total)  # rounding of the composed sums
    last = hist.size - 1
    out = []
    for q in levels:
        p = q * total
        k_lo = min(last, int(np.searchsorted(cum, p - _WMAX / 2 - slack, side="right")))
        k_hi = min(last, int(np.searchsorted(cum, p + 1.5 * _WMAX + slack, side="left")))
        lo = grid.edges(k_lo, vmin, vmax)[0]
        hi = grid.edges(k_hi, vmin, vmax)[1]
        k = min(last, int(np.searchsorted(cum, p, side="left")))
        while k < last and hist[k] <= 0:
            k += 1
        a, b = grid.edges(k, vmin, vmax)
        before = float(cum[k - 1]) if k else 0.0
        frac = (p - before) / hist[k] if hist[k] > 0 else 0.0
        est = a + min(1.0, max(0.0, frac)) * (b - a)
        out.append(QuantileEstimate(q, float(min(hi, max(lo, est))), float(lo), float(hi)))
    return out


def weighted_moments(summary: npt.NDArray[np.float64]) -> tuple[int, float, float]:
    """``(n, mean, std)`` of a summary (population std, as the cell path)."""
    n = int(summary[N])
    if n == 0:
        return 0, float("nan"), float("nan")
    var = float(summary[M2]) / float(summary[W])
    return n, float(summary[MEAN]), float(np.sqrt(max(0.0, var)))


def grids() -> Mapping[str, Grid]:
    """The grid of every summarised band."""
    return {s.name: Grid.of(s) for s in summarised_bands()}
