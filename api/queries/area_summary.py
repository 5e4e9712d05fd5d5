"""area_over_time from block summaries: blocks wholly inside an area answered from their summaries.

A summary block (32 x 32 cells under 128 x 128 storage blocks) whose every
cell lies inside the area is answered from the summaries the pipeline stored
with its chunks (:mod:`store.cube.summaries`); only the other cells (edge
blocks, and blocks the snapshot has no summary of) are read from the chunks (:mod:`api.queries.area_cells`). Per overpass:

* clear fraction and ``n_clear``: exact (integer counts add);
* mean and std: exact composition (Chan's formula), equal to the cell path up
  to the order of floating additions;
* p10 .. p90: from the composed fixed-grid histogram: an estimate and an
  interval ``quantile_bounds`` guaranteed to hold the value the cell path
  computes (see :func:`store.cube.summaries.quantiles`).

When no block is wholly inside, when the snapshot has no summaries (written
before them), or when the caller asks (``use_summaries: false``), every cell
is read and the statistics are the exact cell-path ones; :class:`Usage` says
which happened.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from api.context import ServiceContext
from api.queries._common import clear_info
from api.queries.area_cells import Job, clear_counts_many, stream
from api.queries.area_geometry import Area
from api.queries.area_stats import scenes_stats
from store.cube import band_spec
from store.cube import summaries as sm

if TYPE_CHECKING:
    from store.cube.read import CubeReader

__all__ = [
    "CELLS",
    "SUMMARIES",
    "Usage",
    "clear_fractions",
    "clear_fractions_many",
    "scenes",
    "scenes_many",
]

CELLS = "cells"
"""Method: every cell of the area read from the chunks (exact quantiles)."""
SUMMARIES = "block_summaries+edge_cells"
"""Method: blocks inside from their summaries, the other cells read."""
_LEVELS = (0.10, 0.25, 0.50, 0.75, 0.90)
_NAMES = ("p10", "p25", "median", "p75", "p90")
_MERGE_BYTES = 16 << 20  # summaries of a group of blocks x slots held at once before merging


@dataclass(frozen=True)
class Usage:
    """How one pass over an area's overpasses was answered."""

    method: str
    """:data:`CELLS` or :data:`SUMMARIES`."""
    summary_blocks: int
    """Summary blocks (:func:`store.cube.summaries.summary_level`) answered from their summaries."""
    cells_read: int
    """Cells read from the chunks per overpass."""
    note: str | None
    """Why summaries were not used (None when they were, or nothing asked for them)."""


@dataclass(frozen=True)
class _Plan:
    rest: Area
    merged: npt.NDArray[np.float64] | None  # (slots, N_FIELDS) of the blocks answered
    usage: Usage


def _subset(area: Area, keep: npt.NDArray[np.bool_]) -> Area:
    """The area restricted to some of its cells (same id, geometry and order)."""
    n = int(np.count_nonzero(keep))
    return Area(
        area.id, area.geom, area.digest, area.km2, area.box,
        area.ys[keep], area.xs[keep], area.weights[keep], n,
    )  # fmt: skip


def _plan(
    ctx: ServiceContext,
    reader: CubeReader,
    band: str,
    area: Area,
    slots: list[int],
    keep: bool,
    use: bool,
    stats: bool,
) -> _Plan:
    def cells(note: str | None) -> _Plan:
        return _Plan(area, None, Usage(CELLS, 0, area.n_cells, note))

    if not use:
        return cells("use_summaries is false: every cell read (exact quantiles)")
    if not slots or not area.n_cells:
        return cells(None)
    side = 1 << reader.block_level
    sub = 1 << sm.summary_level(reader.block_level)
    per = side // sub  # summary blocks per chunk side
    full = [b for b in area.blocks(sub) if b.pos.size == sub * sub]
    if full:
        # A chunk holding edge cells is read anyway, and once decoded its cells cost little:
        # summaries stand in only for chunks with no edge cell, which are then not read at all.
        inside_per: dict[tuple[int, int], int] = {}
        for b in full:
            c = (b.cy // per, b.cx // per)
            inside_per[c] = inside_per.get(c, 0) + b.pos.size
        whole = {
            (b.cy, b.cx) for b in area.blocks(side) if inside_per.get((b.cy, b.cx)) == b.pos.size
        }
        full = [b for b in full if (b.cy // per, b.cx // per) in whole]
        if not full:
            return cells("every storage chunk the area touches holds edge cells: every cell read")
    if not full:
        return cells("no summary block lies wholly inside the area: every cell read")
    step = band_spec(band).time_chunk
    tcs = sorted({t // step for t in slots})
    at = {tc: k for k, tc in enumerate(tcs)}
    chunks = sorted({(b.cy // per, b.cx // per) for b in full})
    where = {c: k for k, c in enumerate(chunks)}
    rows = ctx.summary_tiles(reader, band, [(cy, cx, tc) for cy, cx in chunks for tc in tcs], keep)
    if rows is None:
        return cells("this snapshot has no block summaries (written before them): every cell read")
    if any(r is not None and r.shape[1:3] != (per, per) for r in rows):
        return cells("this snapshot's summaries have another block layout: every cell read")
    tpos = np.array([at[t // step] for t in slots], np.intp)
    dpos = np.array([t % step for t in slots], np.intp)
    picked: list[npt.NDArray[np.float64]] = []
    merged = np.broadcast_to(sm.empty(), (len(slots), sm.N_FIELDS)).copy()
    group = max(1, _MERGE_BYTES // max(1, len(slots) * sm.N_FIELDS * 8))
    inside = np.zeros(area.n_cells, bool)
    used = 0

    def flush() -> None:
        nonlocal merged
        if not picked:
            return
        part = np.stack(picked)
        if stats:
            merged = sm.merge_pair(merged, sm.merge_axis(part))
        else:  # the clear-fraction pass needs the counts only
            merged[:, sm.N_FLAG] += part[..., sm.N_FLAG].sum(axis=0)
        picked.clear()

    by_chunk: dict[tuple[int, int], list[Any]] = {}
    for blk in full:
        by_chunk.setdefault((blk.cy // per, blk.cx // per), []).append(blk)
    for c, blks in by_chunk.items():
        k = where[c]
        mine = rows[k * len(tcs) : (k + 1) * len(tcs)]
        if any(m is None for m in mine):
            continue  # not summarised in this snapshot: read these cells
        stacked = np.stack(mine)  # type: ignore[arg-type]  # (time chunks, 7, per, per, F)
        for blk in blks:
            got = stacked[tpos, dpos, blk.cy % per, blk.cx % per]  # (slots, F)
            if np.isnan(got).any():
                continue
            picked.append(got)
            inside[blk.pos] = True
            used += 1
            if len(picked) >= group:
                flush()
    flush()
    if not used:
        return cells(
            "the blocks inside the area have no summaries in this snapshot: every cell read"
        )
    rest = _subset(area, ~inside)
    return _Plan(rest, merged, Usage(SUMMARIES, used, rest.n_cells, None))


def clear_fractions_many(
    ctx: ServiceContext,
    reader: CubeReader,
    band: str,
    jobs: Sequence[Job],
    keep: bool,
    use: bool,
) -> list[tuple[npt.NDArray[np.float64], Usage]]:
    """Per job, the clear fraction of each slot over its area (exact either way) and how it
    was answered; the cells read are read for every job together (:func:`clear_counts_many`)."""
    plans = [_plan(ctx, reader, band, j.area, list(j.slots), keep, use, stats=False) for j in jobs]
    rests = [Job(p.rest, j.slots) for p, j in zip(plans, jobs, strict=True)]
    counts = clear_counts_many(ctx, reader, band, rests, keep)
    out = []
    for p, j, c in zip(plans, jobs, counts, strict=True):
        got = c.astype(np.float64)
        if p.merged is not None:
            got += p.merged[:, sm.N_FLAG]
        out.append((got / max(1, j.area.n_cells), p.usage))
    return out


def clear_fractions(
    ctx: ServiceContext,
    reader: CubeReader,
    band: str,
    area: Area,
    slots: list[int],
    keep: bool,
    use: bool,
) -> tuple[npt.NDArray[np.float64], Usage]:
    """Clear fraction of each slot over the area (:func:`clear_fractions_many` of one area)."""
    return clear_fractions_many(ctx, reader, band, [Job(area, slots)], keep, use)[0]


def _stats(s: npt.NDArray[np.float64], grid: sm.Grid, n_total: int) -> dict[str, Any] | None:
    n, mean, std = sm.weighted_moments(s)
    if n == 0:
        return None
    qs = sm.quantiles(s, grid, _LEVELS)
    out: dict[str, Any] = {"mean": mean, "std": std}
    out.update({name: q.value for name, q in zip(_NAMES, qs, strict=True)})
    out.update({"n_clear": n, "n_total": n_total, "clear_fraction": n / max(1, n_total)})
    out["quantile_bounds"] = {name: [q.lo, q.hi] for name, q in zip(_NAMES, qs, strict=True)}
    return out


def scenes_many(
    ctx: ServiceContext,
    reader: CubeReader,
    band: str,
    jobs: Sequence[Job],
    keep: bool,
    use: bool,
) -> list[tuple[list[dict[str, Any] | None], Usage]]:
    """Per job, the statistics of each slot (None: no clear value) and how they were answered.

    With summaries a job's edge cells are read (with every other job's cells,
    a group of time chunks at a time), summarised per scene and merged with the
    blocks' summaries; each scene then carries ``quantile_bounds``. Without,
    the exact cell path. Each scene's numbers depend on its own cells only
    (and on its job's slots through the plan), so reading jobs together
    changes none of them.
    """
    plans = [_plan(ctx, reader, band, j.area, list(j.slots), keep, use, stats=True) for j in jobs]
    flag_band, clear_value = clear_info(band)
    grid = sm.Grid.of(band_spec(band)) if any(p.merged is not None for p in plans) else None
    out: list[list[dict[str, Any] | None]] = [[None] * len(j.slots) for j in jobs]
    reads: list[Job] = []
    owner: list[int] = []
    for k, (p, j) in enumerate(zip(plans, jobs, strict=True)):
        if p.merged is None:
            reads.append(j)
            owner.append(k)
        elif p.rest.n_cells:
            reads.append(Job(p.rest, j.slots))
            owner.append(k)
        else:  # every cell from the summaries
            assert grid is not None
            out[k] = [_stats(p.merged[i], grid, j.area.n_cells) for i in range(len(j.slots))]

    def one(r: int, rows: npt.NDArray[np.intp], arrays: list[npt.NDArray[Any]]) -> None:
        k = owner[r]
        p, area = plans[k], jobs[k].area
        oks, values = arrays[0] == clear_value, arrays[1]
        if p.merged is None:
            got = scenes_stats(values, oks, area.weights, area.n_cells)
        else:
            assert grid is not None
            got = [
                _stats(
                    sm.merge_pair(
                        p.merged[i], sm.summarise_cells(values[m], oks[m], p.rest.weights, grid)
                    ),
                    grid,
                    area.n_cells,
                )
                for m, i in enumerate(rows.tolist())
            ]
        for i, st in zip(rows.tolist(), got, strict=True):
            out[k][i] = st

    if reads:
        stream(ctx, reader, [flag_band, band], reads, keep, one)
    return [(o, p.usage) for o, p in zip(out, plans, strict=True)]


def scenes(
    ctx: ServiceContext,
    reader: CubeReader,
    band: str,
    area: Area,
    slots: list[int],
    keep: bool,
    use: bool,
) -> tuple[list[dict[str, Any] | None], Usage]:
    """Statistics of each slot and how they were answered (:func:`scenes_many` of one area)."""
    return scenes_many(ctx, reader, band, [Job(area, slots)], keep, use)[0]
