"""The block hierarchy over the cell64 lattice (see :mod:`store.address`).

Pure functions, no I/O. Blocks (a hierarchy the protocol lacks) are the
``2**k x 2**k`` squares of cells sharing ``lat_q >> k`` and ``lng_q >> k``;
the cube chunking is aligned to them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from store.address import (
    LAT_BITS,
    LAT_MAX_Q,
    LAT_STEP,
    LNG_MAX_Q,
    LNG_STEP,
    bbox_q_range,
    q_to_raw_array,
)
from store.errors import InvalidBlock

__all__ = [
    "MAX_BLOCKS",
    "Block",
    "block_bounds",
    "block_cells",
    "block_of",
    "block_q_range",
    "blocks_for_bbox",
    "blocks_for_polygon",
]

MAX_BLOCKS = 1_000_000
"""Cap on the number of blocks a bbox or polygon cover may return."""

_BLOCK_ID = re.compile(r"^b(\d{1,2})\.(\d{1,7})\.(\d{1,7})$")


@dataclass(frozen=True, slots=True, order=True)
class Block:
    """A ``2**level x 2**level`` square of cells sharing ``lat_q >> level`` and ``lng_q >> level``."""

    level: int
    """Block level ``k`` (0 = one cell, 21 = half the globe's rows)."""
    lat_b: int
    """``lat_q >> level`` of every cell in the block."""
    lng_b: int
    """``lng_q >> level`` of every cell in the block."""

    def __post_init__(self) -> None:
        if not 0 <= self.level <= LAT_BITS:
            raise InvalidBlock(f"block level must be in 0..{LAT_BITS}, got {self.level}")
        if not 0 <= self.lat_b <= (LAT_MAX_Q >> self.level):
            raise InvalidBlock(f"block row {self.lat_b} out of range for level {self.level}")
        if not 0 <= self.lng_b <= (LNG_MAX_Q >> self.level):
            raise InvalidBlock(f"block column {self.lng_b} out of range for level {self.level}")

    @property
    def id(self) -> str:
        """Stable text id ``b{level}.{lat_b}.{lng_b}``."""
        return f"b{self.level}.{self.lat_b}.{self.lng_b}"

    @classmethod
    def parse(cls, block_id: str) -> Block:
        """Parse a block id made by :attr:`id`.

        Raises:
            InvalidBlock: malformed id or out-of-range parts.
        """
        m = _BLOCK_ID.match(block_id.strip()) if isinstance(block_id, str) else None
        if m is None:
            raise InvalidBlock(f"malformed block id {block_id!r}; expected 'b<level>.<row>.<col>'")
        return cls(int(m.group(1)), int(m.group(2)), int(m.group(3)))

    def __str__(self) -> str:
        return self.id


def block_of(lat_q: int, lng_q: int, level: int) -> Block:
    """The level-``level`` block containing a lattice position."""
    return Block(level, int(lat_q) >> level, int(lng_q) >> level)


def block_q_range(block: Block) -> tuple[int, int, int, int]:
    """Half-open lattice ranges ``(lat_q0, lat_q1, lng_q0, lng_q1)`` of a block, clipped to the lattice."""
    size = 1 << block.level
    lat_q0 = block.lat_b * size
    lng_q0 = block.lng_b * size
    return lat_q0, min(lat_q0 + size, LAT_MAX_Q + 1), lng_q0, min(lng_q0 + size, LNG_MAX_Q)


def block_bounds(block: Block) -> tuple[float, float, float, float]:
    """``(min_lat, min_lng, max_lat, max_lng)`` of a block's cells (outer cell edges)."""
    lat_q0, lat_q1, lng_q0, lng_q1 = block_q_range(block)
    return (
        max(-90.0, (lat_q0 - 0.5) * LAT_STEP - 90.0),
        (lng_q0 - 0.5) * LNG_STEP - 180.0,
        min(90.0, (lat_q1 - 0.5) * LAT_STEP - 90.0),
        (lng_q1 - 0.5) * LNG_STEP - 180.0,
    )


def block_cells(block: Block) -> npt.NDArray[np.uint64]:
    """All cell integers of a block, row-major from the south-west (levels <= 12 only).

    Pole rows hold a single canonical cell (``lng_q = 0``), so cells there repeat
    no cell: the result lists each distinct cell once.
    """
    if block.level > 12:
        raise InvalidBlock(f"refusing to enumerate a level-{block.level} block (> 2**24 cells)")
    lat_q0, lat_q1, lng_q0, lng_q1 = block_q_range(block)
    la, ln = np.meshgrid(
        np.arange(lat_q0, lat_q1, dtype=np.int64),
        np.arange(lng_q0, lng_q1, dtype=np.int64),
        indexing="ij",
    )
    pole = (la == 0) | (la == LAT_MAX_Q)
    ln = np.where(pole, 0, ln)
    raw = q_to_raw_array(la.ravel(), ln.ravel())
    if pole.any():
        _, first = np.unique(raw, return_index=True)
        raw = raw[np.sort(first)]
    return raw


def blocks_for_bbox(
    min_lat: float, min_lng: float, max_lat: float, max_lng: float, level: int
) -> list[Block]:
    """Blocks of ``level`` holding any cell whose centre lies in the bbox (sorted).

    Raises:
        InvalidBlock: the cover would exceed :data:`MAX_BLOCKS`.
    """
    lat_q0, lat_q1, lng_q0, lng_q1 = bbox_q_range(min_lat, min_lng, max_lat, max_lng)
    if lat_q1 <= lat_q0 or lng_q1 <= lng_q0:
        return []
    rows = range(lat_q0 >> level, ((lat_q1 - 1) >> level) + 1)
    cols = range(lng_q0 >> level, ((lng_q1 - 1) >> level) + 1)
    if len(rows) * len(cols) > MAX_BLOCKS:
        raise InvalidBlock(
            f"bbox covers {len(rows) * len(cols)} level-{level} blocks (cap {MAX_BLOCKS}); use a higher level"
        )
    return [Block(level, r, c) for r in rows for c in cols]


def blocks_for_polygon(polygon: Any, level: int) -> list[Block]:
    """Blocks of ``level`` whose area intersects a polygon.

    Args:
        polygon: a shapely geometry or a GeoJSON-like mapping (x = lng, y = lat).
        level: block level.
    """
    from shapely.geometry import box, shape
    from shapely.prepared import prep

    geom = (
        polygon if hasattr(polygon, "bounds") and hasattr(polygon, "intersects") else shape(polygon)
    )
    min_lng, min_lat, max_lng, max_lat = geom.bounds
    min_lat, max_lat = max(-90.0, min_lat - LAT_STEP), min(90.0, max_lat + LAT_STEP)
    min_lng, max_lng = max(-180.0, min_lng - LNG_STEP), min(180.0, max_lng + LNG_STEP)
    prepared = prep(geom)
    out = []
    for blk in blocks_for_bbox(min_lat, min_lng, max_lat, max_lng, level):
        b = block_bounds(blk)
        if prepared.intersects(box(b[1], b[0], b[3], b[2])):
            out.append(blk)
    return out
