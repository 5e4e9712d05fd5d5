"""The chunk index of a cube snapshot: which chunks of a band exist, per block.

:class:`ChunkIndexReads` is the part of :class:`store.cube.read.CubeReader` that knows which
chunks a snapshot stores: listed from the snapshot's manifest once per reader and band, or,
for a reader opened from the previous tip's, that reader's index updated by the diff of the
two snapshots (:func:`store.cube.carry.carried_index`).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Coroutine
from typing import Any, TypeVar

import numpy as np
import numpy.typing as npt
import zarr

from store.cube.bands import X_SIZE, BandSpec, band_spec
from store.cube.cache import ChunkCache
from store.cube.carry import Changes, ChunkIndex, carried_index

__all__ = ["CHECK_COST", "ChunkIndex", "ChunkIndexReads"]

T = TypeVar("T")

CHECK_COST = 20
"""What checking one changed chunk costs, in stored chunks listed: a new tip reader updates a
band's index by checks only while they cost less than listing the band's manifest again.
Measured on the demo store (session 23, bench/HISTORY.md): a check (a manifest lookup awaited
from Python, gathered) 71-103 us, a listing 4.2 us a stored chunk (587 chunks in 2.4 ms)."""


class ChunkIndexReads:
    """A snapshot's chunk indexes (mixed into :class:`~store.cube.read.CubeReader`)."""

    session: Any
    cache: ChunkCache
    _snapshot_id: str
    _index: dict[str, ChunkIndex]
    _stored: dict[str, dict[tuple[int, int], frozenset[int]]]
    _index_base: tuple[dict[str, ChunkIndex], Changes] | None

    def array(self, band: str) -> zarr.Array:
        """The band's array (provided by the reader)."""
        raise NotImplementedError

    def _sync(self, coro: Coroutine[Any, Any, T], what: str) -> T:
        raise NotImplementedError

    def chunks(self, band: str) -> npt.NDArray[np.int64]:
        """Coordinates of the chunks that exist for a band, ``(n, ndim)`` sorted.

        Args:
            band: Band name.

        Returns:
            Chunk grid coordinates (time chunk, y chunk, x chunk[, 0]).
        """
        spec = band_spec(band)

        async def collect() -> list[tuple[int, ...]]:
            coords: AsyncIterator[tuple[int, ...]] = self.session.chunk_coordinates(
                "/" + spec.array_path, batch_size=10_000
            )
            return [c async for c in coords]

        found = self._sync(collect(), f"listing the chunks of {band}")
        ndim = len(spec.shape)
        out = np.array(sorted(found), dtype=np.int64).reshape(len(found), ndim)
        return out

    def chunk_index(self, band: str) -> dict[tuple[int, int], npt.NDArray[np.int64]]:
        """The band's stored chunks: ``(chunk row, chunk column)`` -> sorted time chunks.

        Built once per reader from the snapshot's chunk manifest (one thread builds
        it while others wait).
        """
        spec = band_spec(band)
        index = self._index.get(spec.array_path)
        if index is not None:
            return index
        with self.cache.single_flight(("index", self._snapshot_id, spec.name)):
            index = self._index.get(spec.array_path)
            if index is None:
                index = self._carried_index(spec)
                index = self._build_index(spec) if index is None else index
                self._index[spec.array_path] = index
        return index

    def _carried_index(self, spec: BandSpec) -> ChunkIndex | None:
        """The previous tip reader's index of the band, updated by the chunks the diff names
        (:func:`store.cube.carry.carried_index`); None: build it from the manifest."""
        if self._index_base is None or len(spec.shape) != 3:
            return None
        indexes, changes = self._index_base
        old = indexes.pop(spec.array_path, None)  # used once: not kept alive after
        stored = sum(len(v) for v in old.values()) if old is not None else 0
        if len(changes.chunks.get(spec.array_path, ())) * CHECK_COST > stored:
            return None  # a backfill, or a small band: one listing costs less than the checks
        arr, store = self.array(spec.name), self.session.store

        async def exists(coords: list[tuple[int, int, int]]) -> list[bool]:
            keys = [f"{spec.array_path}/{arr.metadata.encode_chunk_key(c)}" for c in coords]
            return list(await asyncio.gather(*(store.exists(k) for k in keys)))

        def check(coords: list[tuple[int, int, int]]) -> list[bool]:
            return self._sync(exists(coords), f"checking the changed chunks of {spec.name}")

        return carried_index(old, changes, spec.array_path, check)

    def _stored_sets(self, band: str) -> dict[tuple[int, int], frozenset[int]]:
        """:meth:`chunk_index` as sets of time chunks (made once per reader and band)."""
        sets = self._stored.get(band)
        if sets is None:
            index = self.chunk_index(band)
            sets = {k: frozenset(v.tolist()) for k, v in index.items()}
            self._stored[band] = sets
        return sets

    def _build_index(self, spec: BandSpec) -> dict[tuple[int, int], npt.NDArray[np.int64]]:
        coords = self.chunks(spec.name)
        index: dict[tuple[int, int], npt.NDArray[np.int64]] = {}
        if coords.size:
            keys = coords[:, 1] * X_SIZE + coords[:, 2]
            order = np.lexsort((coords[:, 0], keys))
            coords, keys = coords[order], keys[order]
            starts = np.flatnonzero(np.r_[True, keys[1:] != keys[:-1]])
            for s, e in zip(starts.tolist(), [*starts[1:].tolist(), len(keys)], strict=True):
                index[(int(coords[s, 1]), int(coords[s, 2]))] = np.unique(coords[s:e, 0])
        return index
