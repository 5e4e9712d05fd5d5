"""The cell path of area_over_time: reading an area's cells from the cube's chunks.

Reads fetch, through the context's tile cache, only the chunks of the blocks
the area's cells fall in, a bounded group at a time (:data:`TILE_GROUP_BYTES`
of decoded chunks, :data:`SCENE_BUFFER_BYTES` of gathered values), so the
memory follows the area's cells, not its bounding box or the number of
scenes. :mod:`api.queries.area_summary` answers the blocks wholly inside an
area from their summaries and calls these for the rest.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

from api.context import ServiceContext
from api.queries._common import clear_info
from api.queries.area_geometry import Area
from api.queries.area_stats import scenes_stats
from store.cube import CubeReader

__all__ = [
    "SCENE_BUFFER_BYTES",
    "TILE_GROUP_BYTES",
    "cell_scenes",
    "clear_counts",
    "gather",
    "tile_bytes",
]

TILE_GROUP_BYTES = 48 << 20
"""Decoded chunks one read step holds at once."""
SCENE_BUFFER_BYTES = 32 << 20
"""Values and clear flags of one group of scenes (at the area's cells) held at once."""


def tile_bytes(band: str, side: int) -> int:
    from store.cube import band_spec

    spec = band_spec(band)
    return spec.time_chunk * side * side * np.dtype(spec.dtype).itemsize


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
    area's cells fall in and of the time chunks holding ``slots`` (all missing
    chunks of the call fetched together); the buffer holds the cells inside,
    not the bounding box. ``keep``: put the fetched chunks in the cache.
    """
    from store.cube import band_spec

    spec = band_spec(band)
    out = np.full((len(slots), area.n_cells), spec.fill_value, dtype=spec.dtype)
    if not slots or not area.n_cells:
        return out
    blocks = area.blocks(1 << reader.block_level)
    step = spec.time_chunk
    tcs = sorted({t // step for t in slots})
    at = {tc: k for k, tc in enumerate(tcs)}
    tiles = ctx.tiles(reader, band, [(b.cy, b.cx, tc) for b in blocks for tc in tcs], keep=keep)
    for j, b in enumerate(blocks):
        row = tiles[j * len(tcs) : (j + 1) * len(tcs)]
        for i, t in enumerate(slots):
            tile = row[at[t // step]]
            if tile is not None:
                out[i, b.pos] = b.take(tile[t % step])
    return out


def clear_counts(
    ctx: ServiceContext, reader: CubeReader, band: str, area: Area, slots: list[int], keep: bool
) -> npt.NDArray[np.int64]:
    """Clear cells (flag says clear) of each slot over the area, streamed a few time chunks at a time.

    Only counts are kept: the memory is one group of decoded chunks
    (:data:`TILE_GROUP_BYTES`), whatever the number of slots.
    """
    from store.cube import band_spec

    flag_band, clear_value = clear_info(band)
    counts = np.zeros(len(slots), np.int64)
    if not slots or not area.n_cells:
        return counts
    side = 1 << reader.block_level
    blocks = area.blocks(side)
    step = band_spec(flag_band).time_chunk
    wanted: dict[int, list[tuple[int, int]]] = {}
    for i, t in enumerate(slots):
        wanted.setdefault(t // step, []).append((i, t % step))
    tcs = sorted(wanted)
    per = max(1, TILE_GROUP_BYTES // max(1, len(blocks) * tile_bytes(flag_band, side)))
    for g in range(0, len(tcs), per):
        group = tcs[g : g + per]
        keys = [(b.cy, b.cx, tc) for b in blocks for tc in group]
        tiles = ctx.tiles(reader, flag_band, keys, keep=keep)
        for j, b in enumerate(blocks):
            for k, tc in enumerate(group):
                tile = tiles[j * len(group) + k]
                if tile is None:
                    continue
                for i, d in wanted[tc]:
                    counts[i] += np.count_nonzero(b.take(tile[d]) == clear_value)
    return counts


def cell_scenes(
    ctx: ServiceContext,
    reader: CubeReader,
    band: str,
    area: Area,
    slots: list[int],
    keep: bool,
) -> list[dict[str, Any] | None]:
    """:func:`scenes_stats` of each slot, a group of scenes at a time.

    A group's values and clear flags take about :data:`SCENE_BUFFER_BYTES`
    (and its chunks about :data:`TILE_GROUP_BYTES`), so the memory follows the
    area's cells, not the number of scenes.
    """
    from store.cube import band_spec

    flag_band, clear_value = clear_info(band)
    side = 1 << reader.block_level
    per_scene = area.n_cells * (np.dtype(band_spec(band).dtype).itemsize + 2)
    per_tiles = len(area.blocks(side)) * (tile_bytes(band, side) + tile_bytes(flag_band, side))
    group = max(
        1, min(SCENE_BUFFER_BYTES // max(1, per_scene), TILE_GROUP_BYTES // max(1, per_tiles))
    )
    out: list[dict[str, Any] | None] = []
    for g in range(0, len(slots), group):
        part = slots[g : g + group]
        oks = gather(ctx, reader, flag_band, area, part, keep) == clear_value
        values = gather(ctx, reader, band, area, part, keep)
        out.extend(scenes_stats(values, oks, area.weights, area.n_cells))
    return out
