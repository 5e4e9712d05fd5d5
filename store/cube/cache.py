"""A byte-bounded cache of decoded cube data, shared by the readers of one process.

Two kinds of entries share one LRU, both keyed by snapshot id so that a new
snapshot never serves stale values:

* a :class:`Column`: one block's whole time column of one band (every existing
  time chunk), for per-cell queries;
* a tile: one decoded chunk (one time chunk of one block), for area queries.

:class:`SingleFlight` lets one thread load a missing entry while the others
wait for it (a cold server under load would otherwise load each one once per
waiting request).
"""

from __future__ import annotations

import contextlib
import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

__all__ = ["DEFAULT_CACHE_BYTES", "ChunkCache", "Column", "SingleFlight"]

DEFAULT_CACHE_BYTES = 512 << 20
"""Default bound of a chunk cache (bytes of cached arrays)."""


@dataclass(frozen=True, eq=False)
class Column:
    """One block's whole time column of one band in one snapshot."""

    tslots: npt.NDArray[np.int64]
    """Slots holding a value somewhere in the block, ascending."""
    values: npt.NDArray[Any]
    """``(len(tslots), side, side[, d])`` values (fill where no value)."""
    lat_q0: int
    """Row of ``values[:, 0]``."""
    lng_q0: int
    """Column of ``values[:, :, 0]``."""

    @property
    def nbytes(self) -> int:
        """Bytes held."""
        return int(self.values.nbytes + self.tslots.nbytes)

    def cell(self, lat_q: int, lng_q: int) -> npt.NDArray[Any]:
        """The cell's values along ``tslots``."""
        return self.values[:, lat_q - self.lat_q0, lng_q - self.lng_q0]


class SingleFlight:
    """Per-key locks: one thread loads a key while the others wait for it."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._locks: dict[Hashable, threading.Lock] = {}

    @contextlib.contextmanager
    def __call__(self, key: Hashable) -> Iterator[None]:
        """Hold the key's lock for the duration of the block."""
        with self._lock:
            lock = self._locks.get(key)
            if lock is None:
                lock = self._locks[key] = threading.Lock()
        try:
            with lock:
                yield
        finally:
            with self._lock:
                if self._locks.get(key) is lock and not lock.locked():
                    del self._locks[key]


class ChunkCache:
    """LRU of decoded columns and tiles bounded by the bytes they hold.

    Args:
        max_bytes: Bound of the cache (the newest entry is kept even if larger).
    """

    def __init__(self, max_bytes: int = DEFAULT_CACHE_BYTES) -> None:
        self.max_bytes = int(max_bytes)
        self.single_flight = SingleFlight()
        """Per-key load locks for the entries of this cache."""
        self._lock = threading.Lock()
        self._entries: OrderedDict[tuple[Any, ...], Column | npt.NDArray[Any]] = OrderedDict()
        self._bytes = 0

    def column(self, key: tuple[Any, ...]) -> Column | None:
        """A cached column (marked recently used), or None."""
        with self._lock:
            value = self._entries.get(key)
            if isinstance(value, Column):
                self._entries.move_to_end(key)
                return value
        return None

    def tile(self, key: tuple[Any, ...]) -> npt.NDArray[Any] | None:
        """A cached tile (marked recently used), or None."""
        with self._lock:
            value = self._entries.get(key)
            if value is not None and not isinstance(value, Column):
                self._entries.move_to_end(key)
                return value
        return None

    def tiles(self, keys: Sequence[tuple[Any, ...]]) -> list[npt.NDArray[Any] | None]:
        """:meth:`tile` of each key (one lock for all of them)."""
        out: list[npt.NDArray[Any] | None] = []
        with self._lock:
            entries = self._entries
            for key in keys:
                value = entries.get(key)
                if value is not None and not isinstance(value, Column):
                    entries.move_to_end(key)
                    out.append(value)
                else:
                    out.append(None)
        return out

    def put(self, entries: Sequence[tuple[tuple[Any, ...], Column | npt.NDArray[Any]]]) -> None:
        """Insert entries (an existing key keeps its value), then evict down to the bound."""
        with self._lock:
            for key, value in entries:
                if key not in self._entries:
                    self._entries[key] = value
                    self._bytes += int(value.nbytes)
            while self._bytes > self.max_bytes and len(self._entries) > 1:
                _, old = self._entries.popitem(last=False)
                self._bytes -= int(old.nbytes)

    def carry(self, old: str, new: str, keeps: Callable[[tuple[Any, ...]], bool]) -> int:
        """Re-key to snapshot ``new`` the entries of snapshot ``old`` whose key (without the
        snapshot id) ``keeps`` says still holds there (:class:`store.cube.carry.Changes`); the
        others stay under ``old`` and age out. Moved, not copied: readers still on ``old``
        decode what they need again. Recency order is kept; an entry the new snapshot loaded
        meanwhile wins over the carried one (which is dropped).

        Returns:
            The entries carried.
        """
        with self._lock:
            present = set(self._entries)
            kept: OrderedDict[tuple[Any, ...], Column | npt.NDArray[Any]] = OrderedDict()
            carried = dropped = 0
            for key, value in self._entries.items():
                if key and key[0] == old and keeps(key[1:]):
                    target = (new, *key[1:])
                    if target in present:
                        dropped += int(value.nbytes)
                        continue
                    key = target
                    carried += 1
                kept[key] = value
            self._entries = kept
            self._bytes -= dropped
        return carried

    def info(self) -> dict[str, int]:
        """Entries (columns, tiles), bytes held and the bound."""
        with self._lock:
            columns = sum(isinstance(v, Column) for v in self._entries.values())
            return {
                "columns": columns,
                "tiles": len(self._entries) - columns,
                "bytes": self._bytes,
                "limit": self.max_bytes,
            }
