"""A new tip reader keeps the shared cache's entries whose chunks the commits since did not
change (store.cube.carry): the rest is read again, nothing stale is served."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import icechunk as ic
import numpy as np
import pytest
import zarr

from store.cube import CubeReader, CubeWriter, chunk_index
from store.cube.cache import ChunkCache
from store.cube.carry import Changes, carried_index

T = 19796  # a Thursday: the first day of a week chunk
TC = T // 7
BAND = "indices.ndvi"
CY, CX = 1000 // 128, 2000 // 128  # the block of (1000, 2000) at block level 7


def _commit(writer: CubeWriter, week: int, value: float, lat_q: int = 1000) -> str:
    t0 = T + 7 * week
    with writer.transaction(f"w{week}|{lat_q}") as tx:
        tx.write(BAND, np.arange(t0, t0 + 7), lat_q, 2000, np.full((7, 4, 4), value))
    assert tx.snapshot_id is not None
    return tx.snapshot_id


def _first(tile: np.ndarray | None) -> float:
    assert tile is not None
    return float(tile[0, 1000 % 128, 2000 % 128])


def _count_listings(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The arrays whose chunk manifest icechunk is asked to list from now on (a spy)."""
    listed: list[str] = []
    listing = ic.Session.chunk_coordinates

    def counted(self: ic.Session, array_path: str, **kwargs: Any) -> Any:
        listed.append(array_path)
        return listing(self, array_path, **kwargs)

    monkeypatch.setattr(ic.Session, "chunk_coordinates", counted)
    return listed


def test_changes_keep_what_the_diff_did_not_touch() -> None:
    diff = SimpleNamespace(
        new_arrays=set(),
        deleted_arrays=set(),
        updated_arrays={"/s1/vv"},
        updated_chunks={
            "/indices/ndvi": [[TC, CY, CX]],
            "/summaries/indices_ndvi": [[TC, CY, CX, 0]],
        },
    )
    changes = Changes.of(diff)
    path = "indices/ndvi"
    assert changes.chunks[path] == {(TC, CY, CX)}
    assert not changes.keeps((BAND, CY, CX, TC))  # the tile written
    assert changes.keeps((BAND, CY, CX, TC + 1))  # another week of the block
    assert changes.keeps((BAND, CY + 1, CX, TC))  # another block
    assert not changes.keeps(("summary", BAND, CY, CX, TC))
    assert changes.keeps(("summary", BAND, CY, CX, TC + 1))
    assert not changes.keeps((BAND, CY, CX))  # the block's column: one of its weeks changed
    assert changes.keeps((BAND, CY, CX + 1))
    assert not changes.keeps(("s1.vv", CY + 5, CX, TC))  # its array's metadata changed
    assert not changes.keeps(("no.such.band", CY, CX, TC))
    assert not changes.keeps(())


def test_a_new_tip_reader_carries_the_unchanged_entries(tmp_path: Path) -> None:
    w = CubeWriter(tmp_path)
    _commit(w, 0, 1.0)
    _commit(w, 1, 1.0)
    _commit(w, 0, 5.0, lat_q=1000 + 128)  # the block below
    cache = ChunkCache()
    old = CubeReader(tmp_path, cache=cache)
    keys = [(CY, CX, TC), (CY, CX, TC + 1), (CY + 1, CX, TC)]
    assert [_first(t) for t in old.tiles(BAND, keys)] == [1.0, 1.0, 5.0]
    old.column(BAND, 1000, 2000)
    old.column(BAND, 1000 + 128, 2000)
    assert old.summary_tiles(BAND, keys) is not None

    s_new = _commit(w, 0, 2.0)  # week 0 of the first block rewritten
    new = CubeReader(tmp_path, cache=cache, inventory_from=old)
    assert new.snapshot_id == s_new
    carried = lambda key: cache.tile((s_new, *key)) is not None  # noqa: E731
    assert not carried((BAND, *keys[0]))  # rewritten: read again
    assert carried((BAND, *keys[1]))
    assert carried((BAND, *keys[2]))
    assert not carried(("summary", BAND, *keys[0]))
    assert carried(("summary", BAND, *keys[1]))
    assert cache.column((s_new, BAND, CY, CX)) is None  # a week of its block changed
    assert cache.column((s_new, BAND, CY + 1, CX)) is not None
    # the answers are the new snapshot's, as a reader with a cache of its own reads them
    fresh = CubeReader(tmp_path)
    assert [_first(t) for t in new.tiles(BAND, keys)] == [2.0, 1.0, 5.0]
    for a, b in zip(new.tiles(BAND, keys), fresh.tiles(BAND, keys), strict=True):
        np.testing.assert_array_equal(a, b)
    for lat_q in (1000, 1000 + 128):
        np.testing.assert_array_equal(
            new.cell_series(BAND, lat_q, 2000)[1], fresh.cell_series(BAND, lat_q, 2000)[1]
        )
    # the old snapshot's reader still reads its own values (what was not carried)
    assert _first(old.tiles(BAND, keys[:1])[0]) == 1.0


def test_a_reader_told_not_to_carry_starts_cold(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``carry=False`` (and a server context's ``carry_cache`` false): nothing re-keyed, the
    chunk index listed again; the inventory is still updated from the old reader."""
    from api.context import ServiceContext

    w = CubeWriter(tmp_path)
    _commit(w, 0, 1.0)
    _commit(w, 1, 1.0)
    cache = ChunkCache()
    old = CubeReader(tmp_path, cache=cache)
    keys = [(CY, CX, TC + 1)]
    old.tiles(BAND, keys)
    old.chunk_index(BAND)
    s_new = _commit(w, 0, 2.0)
    listed = _count_listings(monkeypatch)
    new = CubeReader(tmp_path, cache=cache, inventory_from=old, carry=False)
    assert cache.tile((s_new, BAND, *keys[0])) is None  # not carried
    new.chunk_index(BAND)
    assert listed == ["/indices/ndvi"]  # listed anew
    assert _first(new.tiles(BAND, [(CY, CX, TC)])[0]) == 2.0
    # the context passes its setting to the reader it opens when the tip moves
    ctx = ServiceContext(tmp_path, tip_check_seconds=0.0, carry_cache=False)
    first = ctx.reader()
    first.tiles(BAND, keys)
    s_next = _commit(w, 1, 3.0, lat_q=1000 + 128)
    assert ctx.reader().snapshot_id == s_next
    assert ctx.chunks.tile((s_next, BAND, *keys[0])) is None
    ctx.carry_cache = True
    ctx.reader().tiles(BAND, keys)
    s_last = _commit(w, 2, 3.0, lat_q=1000 + 128)
    assert ctx.reader().snapshot_id == s_last
    assert ctx.chunks.tile((s_last, BAND, *keys[0])) is not None  # carried


def test_a_new_tip_reader_updates_the_old_chunk_index(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The new reader's chunk index is the old one updated by the commits since (a rewritten
    chunk, a new week, a new block, a chunk emptied back to fill), without listing the new
    snapshot's manifest, and equal to one built from it."""
    w = CubeWriter(tmp_path)
    _commit(w, 0, 1.0)
    _commit(w, 1, 1.0)
    old = CubeReader(tmp_path, cache=ChunkCache())
    before = old.chunk_index(BAND)
    assert sorted(before[(CY, CX)].tolist()) == [TC, TC + 1]
    _commit(w, 0, 2.0)  # rewritten
    _commit(w, 2, 1.0)  # a new week
    _commit(w, 0, 5.0, lat_q=1000 + 128)  # a new block
    with w.transaction("empty w1") as tx:  # week 1 back to fill
        tx.write(BAND, np.arange(T + 7, T + 14), 1000, 2000, np.full((7, 4, 4), np.nan))
    new = CubeReader(tmp_path, cache=old.cache, inventory_from=old)
    listed = _count_listings(monkeypatch)
    monkeypatch.setattr(chunk_index, "CHECK_COST", 0)  # checks as cheap as this tiny band
    got = new.chunk_index(BAND)
    assert listed == []  # updated, not listed
    assert new._index_base is not None
    assert "indices/ndvi" not in new._index_base[0]  # the old index is not kept alive after
    # more changed chunks than checks cost less than a listing: listed instead; as is a band
    # the old reader never indexed
    monkeypatch.setattr(chunk_index, "CHECK_COST", 10**9)
    assert sorted(CubeReader(tmp_path, inventory_from=old).chunk_index(BAND)) == sorted(got)
    assert listed == ["/indices/ndvi"]
    monkeypatch.setattr(chunk_index, "CHECK_COST", 0)
    CubeReader(tmp_path, inventory_from=old).chunk_index("indices.evi")
    assert listed == ["/indices/ndvi", "/indices/evi"]
    listed.clear()
    fresh = CubeReader(tmp_path)
    want = fresh.chunk_index(BAND)
    assert listed == ["/indices/ndvi"]
    assert sorted(got) == sorted(want)
    for block in want:
        np.testing.assert_array_equal(got[block], want[block])
    assert (CY + 1, CX) in got
    assert before[(CY, CX)].tolist() == [TC, TC + 1]  # the old reader's index unchanged
    # and what it serves: the tiles of the new snapshot
    keys = [(CY, CX, TC), (CY, CX, TC + 1), (CY, CX, TC + 2), (CY + 1, CX, TC)]
    for a, b in zip(new.tiles(BAND, keys), fresh.tiles(BAND, keys), strict=True):
        if b is None:
            assert a is None
        else:
            np.testing.assert_array_equal(a, b)


def test_carried_index_adds_and_removes_what_the_diff_names() -> None:
    old = {(0, 0): np.array([1, 2], np.int64), (0, 1): np.array([5], np.int64)}
    changes = Changes(
        frozenset(),
        {"a": frozenset({(2, 0, 0), (3, 0, 0), (5, 0, 1), (7, 9, 9)})},
        {"a": frozenset({(0, 0), (0, 1), (9, 9)})},
    )
    present = {(3, 0, 0), (7, 9, 9)}  # 2 and (5, 0, 1) were deleted, 3 and (9, 9) added
    asked: list[list[tuple[int, int, int]]] = []

    def exists(coords: list[tuple[int, int, int]]) -> list[bool]:
        asked.append(coords)
        return [c in present for c in coords]

    new = carried_index(old, changes, "a", exists)
    assert new is not None
    assert {k: v.tolist() for k, v in new.items()} == {(0, 0): [1, 3], (9, 9): [7]}
    assert asked == [sorted(changes.chunks["a"])]  # one batched check
    assert old[(0, 0)].tolist() == [1, 2]  # not modified
    assert carried_index(old, changes, "b", exists) is old  # nothing of it changed
    assert carried_index(None, changes, "a", exists) is None
    changed_array = Changes(frozenset({"a"}), {}, {})
    assert carried_index(old, changed_array, "a", exists) is None


def test_a_previous_snapshot_that_is_no_ancestor_leaves_the_new_reader_cold(tmp_path: Path) -> None:
    """The branch reset behind the old reader's snapshot: no diff, nothing carried, the new
    snapshot's values read; the inventory reads everything."""
    w = CubeWriter(tmp_path)
    s1 = _commit(w, 0, 1.0)
    _commit(w, 1, 1.0)
    cache = ChunkCache()
    old = CubeReader(tmp_path, cache=cache)
    old.tiles(BAND, [(CY, CX, TC), (CY, CX, TC + 1)])
    old.repo.reset_branch("main", s1)
    s_new = _commit(w, 0, 3.0)
    new = CubeReader(tmp_path, cache=cache, inventory_from=old)
    assert new.snapshot_id == s_new
    assert cache.tile((s_new, BAND, CY, CX, TC + 1)) is None  # nothing carried
    assert cache.tile((old.snapshot_id, BAND, CY, CX, TC + 1)) is not None
    got = new.tiles(BAND, [(CY, CX, TC), (CY, CX, TC + 1)])
    assert _first(got[0]) == 3.0
    assert got[1] is None  # week 1 is not in the new branch's history


def test_any_error_of_the_comparison_leaves_the_new_reader_cold(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A speed-up never stops a refresh: whatever the diff raises, the reader opens cold."""
    w = CubeWriter(tmp_path)
    _commit(w, 0, 1.0)
    _commit(w, 1, 1.0)
    cache = ChunkCache()
    old = CubeReader(tmp_path, cache=cache)
    old.tiles(BAND, [(CY, CX, TC + 1)])
    s_new = _commit(w, 0, 2.0)
    asked: list[BaseException] = []
    for error in (ic.IcechunkError("not an ancestor"), ValueError("odd"), KeyError("odd")):

        def refuse(self: ic.Repository, error: BaseException = error, **kwargs: object) -> None:
            asked.append(error)
            raise error

        monkeypatch.setattr(ic.Repository, "diff", refuse)
        new = CubeReader(tmp_path, cache=cache, inventory_from=old)
        assert cache.tile((s_new, BAND, CY, CX, TC + 1)) is None
        assert _first(new.tiles(BAND, [(CY, CX, TC)])[0]) == 2.0
        assert asked[-1] is error  # the new reader asked for the diff, and got this error


def test_changes_of_a_real_diff_over_several_commits(tmp_path: Path) -> None:
    """icechunk's diff over several commits lists a rewritten chunk, a deleted one and a new
    week of a block; the columns of those blocks and those tiles are not kept."""
    repo = ic.Repository.create(ic.local_filesystem_storage(str(tmp_path / "r")))
    session = repo.writable_session("main")
    arr = zarr.create_array(
        session.store,
        name="indices/ndvi",
        shape=(8, 8, 8),
        chunks=(1, 4, 4),
        dtype="f4",
        fill_value=np.nan,
        config={"write_empty_chunks": False},
    )
    arr[:4] = 1.0
    s1 = session.commit("one")
    for region, value in (
        ((0, slice(0, 4), slice(0, 4)), 2.0),
        ((1, slice(4, 8), slice(0, 4)), np.nan),
    ):
        session = repo.writable_session("main")
        zarr.open_array(session.store, path="indices/ndvi")[region] = value
        session.commit("rewrite / delete")
    session = repo.writable_session("main")
    zarr.open_array(session.store, path="indices/ndvi")[5, 4:8, 4:8] = 7.0  # a new week
    s4 = session.commit("new week")
    changes = Changes.of(repo.diff(from_snapshot_id=s1, to_snapshot_id=s4))
    assert changes.chunks["indices/ndvi"] == {(0, 0, 0), (1, 1, 0), (5, 1, 1)}
    assert not changes.keeps((BAND, 0, 0, 0))  # rewritten
    assert not changes.keeps((BAND, 1, 0, 1))  # deleted
    assert changes.keeps((BAND, 0, 1, 0))
    assert not changes.keeps((BAND, 1, 1))  # a new week in its block
    assert changes.keeps((BAND, 0, 1))
    # coordinates that name no (time, row, column): the array keeps nothing
    odd = SimpleNamespace(
        new_arrays=set(),
        deleted_arrays=set(),
        updated_arrays=set(),
        updated_chunks={"/indices/ndvi": [[3]]},
    )
    assert not Changes.of(odd).keeps((BAND, 0, 1, 0))


def test_carry_keeps_the_bytes_and_prefers_the_new_snapshots_entry() -> None:
    cache = ChunkCache(max_bytes=10_000)
    a, b, c = (np.full(100, i, np.float64) for i in range(3))  # 800 bytes each
    cache.put([(("s1", "x", 1), a), (("s1", "x", 2), b), (("s2", "x", 2), c)])
    assert cache.carry("s1", "s2", lambda key: True) == 1
    assert cache.tile(("s2", "x", 1)) is a
    assert cache.tile(("s2", "x", 2)) is c  # loaded under s2 first: kept, s1's dropped
    assert cache.tile(("s1", "x", 2)) is None
    assert cache.info()["bytes"] == 1600
    assert cache.carry("s2", "s3", lambda key: False) == 0
