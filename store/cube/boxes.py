"""What a cube write covers: its checked slots and values, and the chunks its box meets.

Pure helpers of :mod:`store.cube.write` (no store access).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import Any

import numpy as np
import numpy.typing as npt

from store.cube.bands import BandSpec
from store.cube.codec import ChunkCodec
from store.errors import InvalidWrite, RegionOutOfBounds

__all__ = ["cast_values", "check_tslots", "chunk_boxes"]


def check_tslots(spec: BandSpec, tslots: npt.ArrayLike) -> npt.NDArray[np.int64]:
    """The slots of a write as int64, checked: 1-D, non-empty, strictly increasing, on the axis."""
    t = np.asarray(tslots)
    if t.ndim != 1 or t.size == 0 or t.dtype.kind not in "iu":
        raise InvalidWrite("tslots must be a non-empty 1-D integer array")
    t = t.astype(np.int64)
    if np.any(np.diff(t) <= 0):
        raise InvalidWrite("tslots must be strictly increasing")
    if t[0] < 0 or t[-1] >= spec.time_size:
        raise RegionOutOfBounds(
            f"tslots {int(t[0])}..{int(t[-1])} outside [0, {spec.time_size}) for {spec.name}"
        )
    return t


def cast_values(spec: BandSpec, values: npt.ArrayLike) -> npt.NDArray[Any]:
    """``values`` in the band's dtype (no copy when it already is), integers range-checked."""
    arr = np.asarray(values)
    target = np.dtype(spec.dtype)
    if target.kind == "f":
        if arr.dtype.kind not in "fiub":
            raise InvalidWrite(f"{spec.name} takes numbers, got dtype {arr.dtype}")
        return arr.astype(target, copy=False)
    if arr.dtype.kind not in "iub":
        raise InvalidWrite(f"{spec.name} takes integers, got dtype {arr.dtype}")
    info = np.iinfo(target)
    if arr.size and (int(arr.min()) < info.min or int(arr.max()) > info.max):
        raise InvalidWrite(f"{spec.name} values outside the {target} range")
    return arr.astype(target, copy=False)


def chunk_boxes(
    codec: ChunkCodec, start: tuple[int, ...], stop: tuple[int, ...]
) -> Iterator[tuple[tuple[int, ...], tuple[slice, ...], tuple[slice, ...], bool]]:
    """Chunks meeting a box: (coords, slice inside the chunk, slice of the values, whole?)."""
    ranges = [
        range(a // c, (b - 1) // c + 1) for a, b, c in zip(start, stop, codec.chunks, strict=True)
    ]
    for coords in itertools.product(*ranges):
        inner, outer, whole = [], [], True
        for i, a, b, c in zip(coords, start, stop, codec.chunks, strict=True):
            lo, hi = max(a, i * c), min(b, (i + 1) * c)
            inner.append(slice(lo - i * c, hi - i * c))
            outer.append(slice(lo - a, hi - a))
            whole = whole and lo == i * c and hi == (i + 1) * c
        yield coords, tuple(inner), tuple(outer), whole
