"""Which decoded cache entries of one snapshot a later snapshot may keep (pure).

A server's :class:`~store.cube.cache.ChunkCache` keys every decoded entry by snapshot, so a
new snapshot never serves stale values. When the branch tip moves (an ingest committed one
partition), most chunks are the same objects in both snapshots: re-keying their entries to
the new snapshot keeps area and cell queries warm across commits instead of decoding every
chunk again. :class:`Changes` says, from an icechunk diff between the two snapshots, which
entries stay valid:

* a **tile** ``(band, chunk row, chunk column, time chunk)`` when that chunk of the band's
  array is not among the diff's updated chunks (written, rewritten or deleted);
* a **summary tile** ``("summary", band, chunk row, chunk column, time chunk)`` the same, in
  the band's summary array (:func:`store.cube.summaries.summary_path`);
* a **column** ``(band, chunk row, chunk column)`` (a block's whole time column) when no
  chunk of that block changed in any time chunk (a new week of the block changes it too).

An array created, deleted or whose metadata changed keeps nothing; neither does a key this
module does not know. The diff is conservative: a chunk rewritten with identical bytes
counts as changed.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from store.cube.bands import BANDS
from store.cube.summaries import summary_path
from store.deadline import within_deadline

__all__ = ["Changes", "ChunkIndex", "carried_index", "diff_since"]

_LOG = logging.getLogger(__name__)


def diff_since(repo: Any, previous: str, snapshot: str, *, remote: bool) -> Any | None:
    """icechunk's diff from snapshot ``previous`` to ``snapshot`` (under the storage deadline
    on object storage), or None when there is none to have: ``previous`` is no ancestor (a
    reset branch) or was expired, the storage did not answer, or anything else went wrong.
    Callers then start the new snapshot cold: a speed-up never stops a refresh."""
    try:
        return within_deadline(
            lambda: repo.diff(from_snapshot_id=previous, to_snapshot_id=snapshot),
            "comparing with the previous snapshot",
            "nothing read",
            remote=remote,
        )
    except (KeyboardInterrupt, SystemExit):
        raise
    except BaseException as exc:  # also pyo3's PanicException: the diff is best effort
        _LOG.info("no diff from snapshot %s to %s (%s): starting cold", previous, snapshot, exc)
        return None


@dataclass(frozen=True)
class Changes:
    """The arrays and chunks changed between two snapshots (paths without the leading ``/``)."""

    arrays: frozenset[str]
    """Arrays created, deleted or with changed metadata: none of their entries is kept."""
    chunks: Mapping[str, frozenset[tuple[int, int, int]]]
    """Per array, the ``(time chunk, chunk row, chunk column)`` of every updated chunk."""
    blocks: Mapping[str, frozenset[tuple[int, int]]]
    """Per array, the ``(chunk row, chunk column)`` of every updated chunk."""

    @classmethod
    def of(cls, diff: Any) -> Changes:
        """From an ``icechunk.Diff`` (``updated_chunks``, ``new_arrays``, ``deleted_arrays``,
        ``updated_arrays``)."""
        arrays = {_path(p) for p in (*diff.new_arrays, *diff.deleted_arrays, *diff.updated_arrays)}
        # a chunk listed with fewer than 3 coordinates names no (time, row, column): its array
        # keeps nothing (no array of the cube has fewer than 3 dimensions)
        short = {
            _path(p) for p, coords in diff.updated_chunks.items() if any(len(c) < 3 for c in coords)
        }
        chunks = _chunks(diff.updated_chunks)
        blocks = {p: frozenset((y, x) for _, y, x in c) for p, c in chunks.items()}
        return cls(frozenset(arrays | short), chunks, blocks)

    def keeps(self, key: tuple[Any, ...]) -> bool:
        """Whether a cache entry (its key without the snapshot id) holds in the later snapshot."""
        if len(key) == 5 and key[0] == "summary":
            _, band, cy, cx, tc = key
            return isinstance(band, str) and self._chunk_kept(summary_path(band), tc, cy, cx)
        band = key[0] if key else None
        spec = BANDS.get(band) if isinstance(band, str) else None
        if spec is None:
            return False
        path = spec.array_path
        if len(key) == 4:
            _, cy, cx, tc = key
            return self._chunk_kept(path, tc, cy, cx)
        if len(key) == 3:
            _, cy, cx = key
            return path not in self.arrays and (cy, cx) not in self.blocks.get(path, frozenset())
        return False

    def _chunk_kept(self, path: str, tc: Any, cy: Any, cx: Any) -> bool:
        return path not in self.arrays and (tc, cy, cx) not in self.chunks.get(path, frozenset())


def _path(p: str) -> str:
    return p[1:] if p.startswith("/") else p


def _chunks(updated: Mapping[str, Iterable[Any]]) -> dict[str, frozenset[tuple[int, int, int]]]:
    """Time chunk, chunk row and column of each updated chunk (extra dimensions dropped: any
    changed chunk of a ``(t, y, x, ...)`` position changes that position)."""
    return {
        _path(p): frozenset((int(c[0]), int(c[1]), int(c[2])) for c in coords if len(c) >= 3)
        for p, coords in updated.items()
    }


ChunkIndex = dict[tuple[int, int], npt.NDArray[np.int64]]
"""A band's chunk index: ``(chunk row, chunk column)`` -> its sorted stored time chunks."""


def carried_index(
    old: ChunkIndex | None,
    changes: Changes,
    path: str,
    exists: Callable[[list[tuple[int, int, int]]], list[bool]],
) -> ChunkIndex | None:
    """The previous snapshot's chunk index of the array ``path`` updated to the later one: each
    chunk the diff names is added or removed as ``exists`` (the later snapshot's manifest)
    says; the rest is the same. None when there is no index to update or the array changed."""
    if old is None or path in changes.arrays:
        return None
    changed = sorted(changes.chunks.get(path, ()))
    if not changed:
        return old
    found = exists(changed)
    new = dict(old)
    by_block: dict[tuple[int, int], list[tuple[int, bool]]] = {}
    for (t, y, x), here in zip(changed, found, strict=True):
        by_block.setdefault((y, x), []).append((t, here))
    for block, marks in by_block.items():
        times = set(new[block].tolist()) if block in new else set()
        for t, here in marks:
            if here:
                times.add(t)
            else:
                times.discard(t)
        if times:
            new[block] = np.array(sorted(times), dtype=np.int64)
        else:
            new.pop(block, None)
    return new
