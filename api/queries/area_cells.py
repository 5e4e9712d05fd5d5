"""The cell path of area_over_time: reading areas' cells from the cube's chunks.

Work is given as jobs (an area and the slots wanted there); :func:`stream`
walks the time chunks the jobs need in ascending order, a bounded group at a
time (:data:`TILE_GROUP_BYTES` of decoded chunks and :data:`SCENE_BUFFER_BYTES`
of gathered values), fetches the union of the jobs' chunks of that group once
through the context's tile cache, and takes each job's cells out of them with
one numpy step per (block, time chunk), not per slot. Several areas of one
call therefore read a chunk they share once per pass, and the memory follows
the areas' cells, not their bounding boxes or the number of scenes.
:mod:`api.queries.area_summary` answers the chunks wholly inside an area
from their summaries and calls these for the rest.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from api.context import ServiceContext
from api.queries._common import clear_info
from api.queries.area_geometry import Area, BlockCells
from api.queries.area_stats import scenes_stats

if TYPE_CHECKING:
    from store.cube.read import CubeReader

__all__ = [
    "SCENE_BUFFER_BYTES",
    "TILE_GROUP_BYTES",
    "Job",
    "cell_scenes",
    "cell_scenes_many",
    "clear_counts",
    "clear_counts_many",
    "gather",
    "stream",
    "tile_bytes",
]

TILE_GROUP_BYTES = 48 << 20
"""Decoded chunks one read step holds at once."""
SCENE_BUFFER_BYTES = 32 << 20
"""Values and clear flags of one group of scenes (at the areas' cells) held at once."""


def tile_bytes(band: str, side: int) -> int:
    from store.cube import band_spec

    spec = band_spec(band)
    return spec.time_chunk * side * side * np.dtype(spec.dtype).itemsize


@dataclass(frozen=True, eq=False)
class Job:
    """Slots wanted at an area's cells."""

    area: Area
    slots: Sequence[int]


Consume = Callable[[int, npt.NDArray[np.intp], list[npt.NDArray[Any]]], None]
"""``consume(job, rows, arrays)``: the values of ``job.slots[rows]``, one ``(rows, cells)`` per band."""


Days = npt.NDArray[np.intp] | slice
"""Days within a time chunk: a slice when they step evenly (numpy's basic indexing, no
index array to process), else an index array."""


def _take(b: BlockCells, tile: npt.NDArray[Any], days: Days, n: int) -> npt.NDArray[Any]:
    """``(n, cells)``: a block's cells on ``n`` days of one decoded chunk."""
    if b.rect is not None:
        y0, y1, x0, x1 = b.rect
        return tile[days, y0:y1, x0:x1].reshape(n, -1)
    planes = tile[days]
    return planes[:, b.ly, b.lx]


def _as_index(days: list[int]) -> Days:
    """``days`` as a slice when they form an arithmetic progression (one or two days always do)."""
    if len(days) == 1:
        return slice(days[0], days[0] + 1)
    d0 = days[1] - days[0]
    if d0 > 0 and all(b - a == d0 for a, b in itertools.pairwise(days)):
        return slice(days[0], days[-1] + 1, d0)
    return np.array(days, np.intp)


def _days_key(days: Days) -> tuple[int, ...] | bytes:
    """A hashable form of ``days`` (slices and index arrays are not hashable)."""
    if isinstance(days, slice):
        return (days.start, days.stop, days.step or 1)
    return days.tobytes()


def _by_chunk(slots: Sequence[int], step: int) -> dict[int, tuple[npt.NDArray[np.intp], Days, int]]:
    """Time chunk -> (positions in ``slots``, days within the chunk, how many), chunks ascending.

    Positions keep their order within a chunk. Plain Python: a call's slots are a few
    hundred at most, where numpy's per-call costs (a sort, a split, a diff per chunk)
    outweighed the work.
    """
    vals = [int(t) for t in slots]
    groups: dict[int, list[int]] = {}
    for i, t in enumerate(vals):
        groups.setdefault(t // step, []).append(i)
    out = {}
    for tc in sorted(groups):
        pos = groups[tc]
        days = [vals[i] % step for i in pos]
        out[tc] = (np.array(pos, np.intp), _as_index(days), len(pos))
    return out


def stream(
    ctx: ServiceContext,
    reader: CubeReader,
    bands: Sequence[str],
    jobs: Sequence[Job],
    keep: bool,
    consume: Consume | None,
    count: int | None = None,
) -> list[npt.NDArray[np.int64]] | None:
    """Walk the jobs' time chunks in groups, each chunk fetched once per group for every job.

    With ``consume``: for each group and each job with slots in it, the job's
    values of those slots (fill where absent), one array per band, are handed
    to ``consume`` (in buffers reused afterwards: copy what must outlive the call). With ``count`` (one band, a flag): nothing is gathered;
    the result is, per job, the cells of each slot whose flag equals ``count``.
    ``keep``: put the fetched chunks in the cache.
    """
    from store.cube import band_spec

    specs = [band_spec(b) for b in bands]
    step = specs[0].time_chunk
    if any(s.time_chunk != step for s in specs):
        raise ValueError("the bands of one stream share their time chunks")
    side = 1 << reader.block_level
    counts = [np.zeros(len(j.slots), np.int64) for j in jobs]
    wanted = [_by_chunk(j.slots, step) if len(j.slots) and j.area.n_cells else {} for j in jobs]
    blocks = [j.area.blocks(side) for j in jobs]
    per_tile = sum(tile_bytes(b, side) for b in bands)
    per_cell = 0 if consume is None else sum(np.dtype(s.dtype).itemsize for s in specs)
    cost: dict[int, int] = {}
    union: dict[int, set[tuple[int, int]]] = {}
    for j, w in enumerate(wanted):
        for tc, (rows, _, _) in w.items():
            union.setdefault(tc, set()).update((b.cy, b.cx) for b in blocks[j])
            cost[tc] = cost.get(tc, 0) + rows.size * jobs[j].area.n_cells * per_cell
    budget = TILE_GROUP_BYTES + (SCENE_BUFFER_BYTES if consume is not None else 0)
    groups: list[list[int]] = []
    size = 0
    for tc in sorted(union):
        c = len(union[tc]) * per_tile + cost[tc]
        if not groups or size + c > budget:
            groups.append([])
            size = 0
        groups[-1].append(tc)
        size += c
    bufs: dict[str, npt.NDArray[Any]] = {}  # one buffer per band, reused by every job and group
    for group in groups:
        keys = sorted((cy, cx, tc) for tc in group for cy, cx in union[tc])
        at = {k: i for i, k in enumerate(keys)}
        tiles = [ctx.tiles(reader, b, keys, keep=keep) for b in bands]
        shared: dict[tuple[Any, ...], npt.NDArray[np.int64]] = {}
        for j, w in enumerate(wanted):
            mine = [tc for tc in group if tc in w]
            if not mine:
                continue
            if consume is None:
                assert count is not None
                _count(blocks[j], mine, w, tiles[0], at, count, counts[j], shared)
                continue
            rows = np.concatenate([w[tc][0] for tc in mine])
            arrays = [
                _gather(
                    blocks[j],
                    mine,
                    w,
                    band_tiles,
                    at,
                    spec,
                    jobs[j].area.n_cells,
                    jobs[j].area.box,
                    side,
                    bufs,
                )
                for spec, band_tiles in zip(specs, tiles, strict=True)
            ]
            consume(j, rows, arrays)
            del arrays
        del tiles  # before the next group's chunks are fetched
    return counts if consume is None else None


def _count(
    blocks: Sequence[BlockCells],
    mine: list[int],
    w: dict[int, tuple[npt.NDArray[np.intp], Days, int]],
    tiles: list[npt.NDArray[Any] | None],
    at: dict[tuple[int, int, int], int],
    value: int,
    counts: npt.NDArray[np.int64],
    shared: dict[tuple[Any, ...], npt.NDArray[np.int64]],
) -> None:
    """Add to ``counts`` the cells equal to ``value`` of each slot, block by block.

    A block's flags are counted by a compiled loop
    (:func:`api.queries._area_kernels.count_equal`): a rectangle in place in each chunk,
    other cells from the group's planes stacked. A block's count on given days is
    reused by the other jobs of the group wanting the same (areas sharing whole
    blocks, or the same area twice).
    """
    from api.queries._area_kernels import count_equal

    days_key = tuple((tc, _days_key(w[tc][1])) for tc in mine)
    for b in blocks:
        present = [tc for tc in mine if tiles[at[(b.cy, b.cx, tc)]] is not None]
        if not present:
            continue
        rows = (
            w[present[0]][0] if len(present) == 1 else np.concatenate([w[tc][0] for tc in present])
        )
        key = (b.cy, b.cx, b.rect, days_key) if b.rect is not None else None
        got = shared.get(key) if key is not None else None
        if got is None and b.rect is not None:
            # each chunk's rectangle counted where it lies (no stacked copy of the planes)
            y0, y1, x0, x1 = b.rect
            got = np.empty(rows.size, np.int64)
            r = 0
            for tc in present:
                tile = tiles[at[(b.cy, b.cx, tc)]]
                assert tile is not None
                _, days, n = w[tc]
                count_equal(tile[days, y0:y1, x0:x1], tile.dtype.type(value), got[r : r + n])
                r += n
            if key is not None:
                shared[key] = got
        elif got is None:
            parts = []
            for tc in present:
                tile = tiles[at[(b.cy, b.cx, tc)]]
                assert tile is not None
                parts.append(tile[w[tc][1]])
            planes = parts[0] if len(parts) == 1 else np.concatenate(parts)
            planes = planes[:, b.ly, b.lx][:, None, :]
            got = np.empty(planes.shape[0], np.int64)
            count_equal(planes, planes.dtype.type(value), got)
        counts[rows] += got


def _gather(
    blocks: Sequence[BlockCells],
    mine: list[int],
    w: dict[int, tuple[npt.NDArray[np.intp], Days, int]],
    tiles: list[npt.NDArray[Any] | None],
    at: dict[tuple[int, int, int], int],
    spec: Any,
    n_cells: int,
    box: tuple[int, int, int, int],
    tiles_side: int,
    bufs: dict[str, npt.NDArray[Any]],
) -> npt.NDArray[Any]:
    """``(rows, n_cells)`` values of one band on the slots of ``mine`` (fill where no chunk),
    in a buffer reused across calls (valid until the next call for the band)."""
    n_rows = sum(w[tc][2] for tc in mine)
    buf = bufs.get(spec.name)
    if buf is None or buf.size < n_rows * n_cells:
        buf = bufs[spec.name] = np.empty(n_rows * n_cells, spec.dtype)
    out = buf[: n_rows * n_cells].reshape(n_rows, n_cells)
    # an area filling its box (a bbox): its cells are the box row-major, so a block's
    # rectangle is a rectangle of the box too and is copied by slices, not scattered
    y0, y1, x0, x1 = box
    grid = out.reshape(n_rows, y1 - y0, x1 - x0) if (y1 - y0) * (x1 - x0) == n_cells else None
    side = tiles_side
    # per block, once: where its rectangle goes in the box and where it is in the chunk
    plan: list[tuple[BlockCells, int, int, tuple[slice, slice] | None, tuple[slice, slice]]] = []
    for b in blocks:
        if grid is not None and b.rect is not None:
            by0, by1, bx0, bx1 = b.rect
            oy, ox = b.cy * side - y0, b.cx * side - x0
            into = (slice(oy + by0, oy + by1), slice(ox + bx0, ox + bx1))
            plan.append((b, b.cy, b.cx, into, (slice(by0, by1), slice(bx0, bx1))))
        else:
            plan.append((b, b.cy, b.cx, None, (slice(None), slice(None))))
    fill = spec.fill_value
    r0 = 0
    for tc in mine:
        _, days, n = w[tc]
        r1 = r0 + n
        for b, cy, cx, dst, src in plan:
            tile = tiles[at[(cy, cx, tc)]]
            if dst is not None:
                assert grid is not None
                grid[r0:r1, dst[0], dst[1]] = fill if tile is None else tile[days, src[0], src[1]]
            else:
                out[r0:r1, b.pos] = fill if tile is None else _take(b, tile, days, n)
        r0 = r1
    return out


def gather(
    ctx: ServiceContext,
    reader: CubeReader,
    band: str,
    area: Area,
    slots: list[int],
    keep: bool,
) -> npt.NDArray[Any]:
    """Values ``(len(slots), n_cells)`` of a band at the area's cells (fill where absent).

    Reads, through the context's tile cache, only the chunks of the blocks the
    area's cells fall in and of the time chunks holding ``slots``; the buffer
    holds the cells inside, not the bounding box. ``keep``: put the fetched
    chunks in the cache.
    """
    from store.cube import band_spec

    spec = band_spec(band)
    out = np.full((len(slots), area.n_cells), spec.fill_value, dtype=spec.dtype)

    def put(_: int, rows: npt.NDArray[np.intp], arrays: list[npt.NDArray[Any]]) -> None:
        out[rows] = arrays[0]

    stream(ctx, reader, [band], [Job(area, slots)], keep, put)
    return out


def clear_counts_many(
    ctx: ServiceContext, reader: CubeReader, band: str, jobs: Sequence[Job], keep: bool
) -> list[npt.NDArray[np.int64]]:
    """Per job, the clear cells (flag says clear) of each of its slots over its area.

    Only counts are kept: the memory is one group of decoded chunks
    (:data:`TILE_GROUP_BYTES`), whatever the number of slots and areas.
    """
    flag_band, clear_value = clear_info(band)
    got = stream(ctx, reader, [flag_band], jobs, keep, None, count=clear_value)
    assert got is not None
    return got


def clear_counts(
    ctx: ServiceContext, reader: CubeReader, band: str, area: Area, slots: list[int], keep: bool
) -> npt.NDArray[np.int64]:
    """Clear cells (flag says clear) of each slot over the area (:func:`clear_counts_many`)."""
    return clear_counts_many(ctx, reader, band, [Job(area, slots)], keep)[0]


def cell_scenes_many(
    ctx: ServiceContext, reader: CubeReader, band: str, jobs: Sequence[Job], keep: bool
) -> list[list[dict[str, Any] | None]]:
    """:func:`scenes_stats` of each job's slots, the jobs' chunks read together.

    Each scene's statistics depend on its own values only, so grouping the
    scenes by time chunk (and areas together) gives the same numbers.
    """
    flag_band, clear_value = clear_info(band)
    out: list[list[dict[str, Any] | None]] = [[None] * len(j.slots) for j in jobs]

    def stats(j: int, rows: npt.NDArray[np.intp], arrays: list[npt.NDArray[Any]]) -> None:
        area = jobs[j].area
        got = scenes_stats(arrays[1], arrays[0] == clear_value, area.weights, area.n_cells)
        for r, st in zip(rows.tolist(), got, strict=True):
            out[j][r] = st

    stream(ctx, reader, [flag_band, band], jobs, keep, stats)
    return out


def cell_scenes(
    ctx: ServiceContext,
    reader: CubeReader,
    band: str,
    area: Area,
    slots: list[int],
    keep: bool,
) -> list[dict[str, Any] | None]:
    """:func:`scenes_stats` of each slot (:func:`cell_scenes_many` of one area)."""
    return cell_scenes_many(ctx, reader, band, [Job(area, slots)], keep)[0]
