"""Writing tables: atomic swaps, input checks, upgrades of older layouts."""

from __future__ import annotations

import json
import logging
import os
import threading

import numpy as np
import pytest

from bench.data import tessera_like
from store import knn as V
from store.errors import VectorTableError
from store.knn import table as knn_table
from tests.store.knn.older import leave_as_older_code

META = {"band": "geotessera", "tslot": 54, "vintage": 2024}


def test_write_is_atomic_and_refuses_silent_overwrite(tmp_path, small):
    cells, vec, scales, _, _ = small
    path = tmp_path / "t"
    V.write_table(path, cells, vec, scales, META)
    V.write_table(path, cells, vec, scales, META)  # identical: no-op
    vec2 = vec.copy()
    vec2[:, 0] = -vec2[:, 0]
    with pytest.raises(VectorTableError):
        V.write_table(path, cells, vec2, scales, META)
    old = V.KnnTable.open(path)
    old_digest = old.meta["digest"]

    seen: set[str] = set()
    stop = threading.Event()

    errors: list[BaseException] = []

    def reader() -> None:
        try:
            while not stop.is_set():
                t = V.KnnTable.open(path)
                # a table is entirely old or entirely new
                first = int(t.vectors[0, 0])
                assert first in (int(vec[0, 0]), int(vec2[0, 0]))
                assert (t.meta["digest"] == old_digest) == (first == int(vec[0, 0]))
                seen.add(t.meta["digest"])
        except BaseException as e:
            errors.append(e)

    th = threading.Thread(target=reader)
    th.start()
    try:
        V.write_table(path, cells, vec2, scales, META, replace=True)
    finally:
        stop.set()
        th.join()
    assert not errors, errors
    assert old_digest in seen
    new = V.KnnTable.open(path)
    assert new.meta["digest"] != old_digest
    np.testing.assert_array_equal(np.asarray(new.vectors), vec2)
    # the old mapping stays readable after its directory was removed
    np.testing.assert_array_equal(np.asarray(old.vectors[:3]), vec[:3])
    leftovers = [p for p in os.listdir(tmp_path) if p not in ("t", ".writers.lock")]
    assert len(leftovers) == 1
    assert leftovers[0].startswith(".t@")
    assert json.loads((path / "meta.json").read_text())["digest"] == new.meta["digest"]


def test_write_validates_inputs(tmp_path, small):
    cells, vec, scales, _, _ = small
    with pytest.raises(VectorTableError):
        V.write_table(tmp_path / "a", cells, vec.astype(np.int16), scales, META)
    with pytest.raises(VectorTableError):
        V.write_table(tmp_path / "b", np.zeros(cells.size, np.uint64), vec, scales, META)
    with pytest.raises(VectorTableError):
        V.write_table(tmp_path / "c", cells, vec, -scales, META)
    with pytest.raises(VectorTableError):
        V.write_table(tmp_path / "d", cells, vec, scales, {"band": "geotessera"})
    (tmp_path / "plain").mkdir()
    with pytest.raises(VectorTableError):
        V.write_table(tmp_path / "plain", cells, vec, scales, META, replace=True)


def test_upgrade_table_adds_heads_and_keeps_rows_and_calibration(tmp_path) -> None:

    cells, vecs, scales = tessera_like(3000, 128, 6, seed=2)
    meta = {"band": "geotessera", "tslot": 54, "vintage": 2024, "rerank_multiple": 16}
    V.write_table(tmp_path / "t", cells, vecs, scales, meta)
    # make it look like a table of the layout before heads: no heads in meta
    path = V.KnnTable.open(tmp_path / "t").path
    old_meta = json.loads((path / "meta.json").read_text())
    for key in (V.HEAD_BLOCKS_KEY, "head_index"):
        old_meta.pop(key)
    (path / "meta.json").write_text(json.dumps(old_meta))
    assert V.KnnTable.open(tmp_path / "t").head_blocks is None
    assert V.upgrade_table(tmp_path / "t") is True
    new = V.KnnTable.open(tmp_path / "t")
    assert new.head_blocks is not None
    assert new.meta["rerank_multiple"] == 16
    assert new.meta["vintage"] == 2024
    np.testing.assert_array_equal(np.asarray(new.vectors), vecs[np.argsort(cells)])
    assert V.upgrade_table(tmp_path / "t") is False
    assert new.meta[V.HEAD_BLOCKS_KEY] == V.head_dims(128)
    # neither the key nor the file of the row-major heads: code of before the block layout
    # opens this table without heads instead of misreading them
    assert "head_dims" not in new.meta
    assert not (new.path / "head.npy").exists()


def test_the_meta_alone_gives_the_upgrades_verdict(tmp_path) -> None:
    """``meta_needs_upgrade`` (what ``knn upgrade`` reads on object storage instead of copying
    a table) says what ``upgrade_table`` would do: current, older heads (either way older code
    leaves them), no heads at all; and None when the meta lacks the table's size."""
    from store.knn.write import meta_needs_upgrade

    cells, vecs, scales = tessera_like(3000, 128, 6, seed=4)
    V.write_table(tmp_path / "t", cells, vecs, scales, dict(META))
    meta = lambda: json.loads((V.KnnTable.open(tmp_path / "t").path / "meta.json").read_text())  # noqa: E731
    assert meta_needs_upgrade(meta()) is False
    assert V.upgrade_table(tmp_path / "t") is False
    no_n = {k: v for k, v in meta().items() if k != "n"}
    assert meta_needs_upgrade(no_n) is None
    for both_keys in (False, True):
        V.write_table(tmp_path / "t", cells, vecs, scales, dict(META), replace=True)
        leave_as_older_code(tmp_path / "t", both_keys=both_keys)
        assert meta_needs_upgrade(meta()) is True
    no_heads = {k: v for k, v in meta().items() if k not in ("head_dims", V.HEAD_BLOCKS_KEY)}
    assert meta_needs_upgrade(no_heads) is True
    assert V.upgrade_table(tmp_path / "t") is True
    assert meta_needs_upgrade(meta()) is False
    # the planes and the lists, from metas alone (a table of 2**18 rows is not written here)
    current = meta()
    assert meta_needs_upgrade({**current, "has_bin128w": False}) is True
    big = {**current, "n": 1 << 18}
    assert meta_needs_upgrade({k: v for k, v in big.items() if k != "ivf"}) is True
    assert meta_needs_upgrade({**big, "ivf": {"lists": 512}}) is False
    small_d = {"n": 1 << 18, "d": 32}  # neither heads (d < 64), planes nor lists at d != 128
    assert meta_needs_upgrade(small_d) is False
    assert meta_needs_upgrade({**current, "n": 0, V.HEAD_BLOCKS_KEY: 0}) is False  # empty


def _as_older_code_left_it(tmp_path, monkeypatch, n: int, seed: int, row: int, *, both_keys: bool):
    """A pruned table of ``n`` rows at ``tmp_path / "t"`` and its answer for ``row``; then the
    table rewritten as code of before the block layout leaves it: ``head.npy`` row-major int8
    under ``head_dims`` (beside ``head_block_dims`` when ``both_keys``: what older code's
    ``upgrade_table`` keeps), no ``head_blocks.npy``. File scans and pruning forced on.

    Returns:
        (head dimensions, the pruned answer).
    """
    monkeypatch.setattr(knn_table, "FILE_SCAN_BYTES", 0)
    monkeypatch.setattr(knn_table, "PRUNE_MIN_ROWS", 0)
    cells, vecs, scales = tessera_like(n, 128, 6, seed=seed)
    V.write_table(tmp_path / "t", cells, vecs, scales, {"band": "geotessera", "tslot": 54})
    t = V.KnnTable.open(tmp_path / "t")
    want = t.search_row(row, k=10)
    assert want.rows_read_whole is not None  # pruned
    h = leave_as_older_code(tmp_path / "t", both_keys=both_keys)
    return h, want


def test_row_major_heads_of_older_tables_are_not_scanned_and_upgrade_blocks_them(
    tmp_path, monkeypatch, caplog
) -> None:
    """A table written before the block layout (``head.npy`` row-major int8 under
    ``head_dims``) opens without heads (its bytes would read as wrong dot products),
    says so once, and scans unpruned with the same answer; ``upgrade_table`` rewrites
    its heads in blocks and the scan is pruned again."""
    h, want = _as_older_code_left_it(tmp_path, monkeypatch, 3000, 3, 5, both_keys=False)
    with caplog.at_level(logging.WARNING, logger="store.knn.layout"):
        old = V.KnnTable.open(tmp_path / "t")
        V.KnnTable.open(tmp_path / "t")
    assert [r.getMessage().count("unpruned") for r in caplog.records] == [1]
    assert old.head_blocks is None
    assert old.tailnorm is None
    got = old.search_row(5, k=10)
    assert got.rows_read_whole is None  # the unpruned file scan
    np.testing.assert_array_equal(got.rows, want.rows)
    np.testing.assert_array_equal(got.scores, want.scores)
    assert V.upgrade_table(tmp_path / "t") is True
    new = V.KnnTable.open(tmp_path / "t")
    assert new.head_blocks is not None
    assert new.head_blocks.shape == (-(-3000 // 16), 16 * h)
    again = new.search_row(5, k=10)
    assert again.rows_read_whole is not None
    np.testing.assert_array_equal(again.rows, want.rows)
    np.testing.assert_array_equal(again.scores, want.scores)
    assert "head_dims" not in new.meta


def test_a_table_rewritten_by_older_code_opens_unpruned_and_upgrades(tmp_path, monkeypatch) -> None:
    """Older code's upgrade_table rewrites a table of this layout with row-major heads and
    keeps the ``head_block_dims`` it does not know: ``head_dims`` wins, the table opens
    without heads (no missing ``head_blocks.npy``), answers the same, and upgrades."""
    _, want = _as_older_code_left_it(tmp_path, monkeypatch, 2000, 4, 3, both_keys=True)
    old = V.KnnTable.open(tmp_path / "t")
    assert old.head_blocks is None
    got = old.search_row(3, k=10)
    assert got.rows_read_whole is None
    np.testing.assert_array_equal(got.rows, want.rows)
    assert V.upgrade_table(tmp_path / "t") is True
    new = V.KnnTable.open(tmp_path / "t")
    assert new.head_blocks is not None
    assert "head_dims" not in new.meta
    np.testing.assert_array_equal(new.search_row(3, k=10).rows, want.rows)


def test_derived_keys_of_the_callers_meta_are_not_written_and_bad_head_keys_refused(
    tmp_path,
) -> None:
    """Metadata copied from another table cannot claim arrays this one lacks (a 32-D table
    has no heads and no lists); a head count that is no multiple of 4 is refused at open,
    a boolean one means no heads."""
    cells, vecs, scales = tessera_like(500, 32, 4, seed=6)
    copied = {"band": "x", "tslot": 1, V.HEAD_BLOCKS_KEY: 64, "head_index": [0], "ivf": {}}
    V.write_table(tmp_path / "small", cells, vecs, scales, copied)
    small = V.KnnTable.open(tmp_path / "small")
    assert small.head_blocks is None
    assert small.ivf is None
    assert V.HEAD_BLOCKS_KEY not in small.meta
    cells, vecs, scales = tessera_like(500, 128, 4, seed=6)
    V.write_table(tmp_path / "t", cells, vecs, scales, {"band": "x", "tslot": 1})
    path = V.KnnTable.open(tmp_path / "t").path
    meta = json.loads((path / "meta.json").read_text())
    (path / "meta.json").write_text(json.dumps({**meta, V.HEAD_BLOCKS_KEY: True}))
    assert V.KnnTable.open(tmp_path / "t").head_blocks is None
    (path / "meta.json").write_text(json.dumps({**meta, V.HEAD_BLOCKS_KEY: 62}))
    with pytest.raises(VectorTableError):
        V.KnnTable.open(tmp_path / "t")


def test_a_replaced_version_is_removed_through_a_symlinked_data_directory(tmp_path, small) -> None:
    """The version a name pointed at is removed when a new one is swapped in, also when the
    table's path goes through a symlink (a data directory linked from elsewhere): only the
    current version folder stays."""
    cells, vec, scales, _, _ = small
    (tmp_path / "real").mkdir()
    (tmp_path / "linked").symlink_to(tmp_path / "real")
    path = tmp_path / "linked" / "knn" / "t"
    V.write_table(path, cells, vec, scales, META)
    vec2 = vec.copy()
    vec2[:, 0] = -vec2[:, 0]
    V.write_table(path, cells, vec2, scales, META, replace=True)
    versions = sorted(p.name for p in (tmp_path / "real" / "knn").glob(".t@*"))
    assert len(versions) == 1
    assert os.readlink(path) == versions[0]
    np.testing.assert_array_equal(np.asarray(V.KnnTable.open(path).vectors), vec2)
