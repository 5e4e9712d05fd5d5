"""k-NN tables and scan kernels: exactness against numpy references, options, storage."""

from __future__ import annotations

import json
import os
import threading

import numpy as np
import pytest

from bench.data import tessera_like
from store import vectors as V
from store.errors import InvalidVectorQuery, VectorTableError

META = {"band": "geotessera", "tslot": 54, "vintage": 2024}


@pytest.fixture(scope="module")
def clustered():
    cells, vec, scales = tessera_like(50_000, seed=3)
    return cells, vec, scales, V.int8_norms(vec), V.binarize(vec)


@pytest.fixture(scope="module")
def small():
    rng = np.random.default_rng(7)
    n, d = 3000, 128
    vec = rng.integers(-127, 128, (n, d), dtype=np.int8)
    vec[:, :4] = 60  # a shared component so scores spread
    scales = rng.uniform(0.001, 0.1, n).astype(np.float32)
    cells = np.sort(rng.choice(2**40, n, replace=False)).astype(np.uint64) + np.uint64(2**50)
    return cells, vec, scales, V.int8_norms(vec), V.binarize(vec)


def ref_cosine(vec, scales, q_float):
    """float64 cosine over the dequantised vectors."""
    deq = vec.astype(np.float64) * scales.astype(np.float64)[:, None]
    return deq @ q_float / (np.linalg.norm(deq, axis=1) * np.linalg.norm(q_float))


def assert_topk_equal(rows, scores, ref, k):
    order = np.lexsort((np.arange(ref.size), -ref))[:k]
    np.testing.assert_allclose(scores, ref[rows], atol=1e-5)  # returned scores are right
    np.testing.assert_allclose(scores, ref[order], atol=1e-5)  # and are the top-k values
    differ = rows != order
    # ids may differ only where the reference scores tie
    assert np.all(np.abs(ref[rows[differ]] - ref[order[differ]]) < 1e-9)


def test_cosine_on_int8_equals_dequantised_float64(small):
    _, vec, scales, norms, _ = small
    for qrow in (0, 17, 2999):
        q_deq = vec[qrow].astype(np.float64) * float(scales[qrow])
        ref = ref_cosine(vec, scales, q_deq)
        res = V.cosine_topk(vec, norms, vec[qrow], 50)
        assert res.mode == "cosine"
        assert res.scanned == vec.shape[0]
        assert_topk_equal(res.rows, res.scores, ref, 50)
        assert res.rows[0] == qrow
        assert res.scores[0] == pytest.approx(1.0)


def test_inline_float_queries_both_paths(small):
    _, vec, scales, norms, _ = small
    # a dequantised vector (int8 * scale, float32): detected and scanned on the int8 path
    deq = vec[5].astype(np.float32) * scales[5]
    a = V.cosine_topk(vec, norms, deq, 20)
    b = V.cosine_topk(vec, norms, vec[5], 20)
    np.testing.assert_array_equal(a.rows, b.rows)
    np.testing.assert_allclose(a.scores, b.scores, atol=1e-12)
    # an arbitrary float vector: float32 path, exact up to float32 rounding
    q = np.random.default_rng(1).standard_normal(128) + 0.5
    res = V.cosine_topk(vec, norms, q, 20)
    assert_topk_equal(res.rows, res.scores, ref_cosine(vec, scales, q), 20)


def test_hamming_equals_bitwise_count(small):
    _, _, _, _, codes = small
    q = codes[11]
    dist = np.bitwise_count(codes.view(np.uint64) ^ q.view(np.uint64)).sum(axis=1)
    res = V.hamming_topk(codes, q, 40)
    order = np.lexsort((np.arange(dist.size), dist))[:40]
    np.testing.assert_array_equal(res.rows, order)  # ties broken by lower row, as documented
    np.testing.assert_allclose(res.scores, 1 - 2 * dist[order] / 128)


def test_binarize_is_sign_of_rotation_and_scale_free(small):
    _, vec, scales, _, codes = small
    r = V.rotation(128, V.ROTATION_SEED)
    np.testing.assert_allclose(r @ r.T, np.eye(128), atol=1e-12)
    assert np.all(
        np.diag(np.linalg.qr(np.random.default_rng(V.ROTATION_SEED).standard_normal((128, 128)))[1])
        != 0
    )
    deq = vec[:100].astype(np.float64) * scales[:100, None]
    np.testing.assert_array_equal(np.packbits(deq @ r.T > 0, axis=1), codes[:100])


def test_rerank_recall_on_clustered_data(clustered):
    _, vec, _, norms, codes = clustered
    rng = np.random.default_rng(0)
    recalls = []
    for qrow in rng.choice(vec.shape[0], 60, replace=False):
        exact = V.cosine_topk(vec, norms, vec[qrow], 10, exclude_row=qrow)
        fast = V.hamming_then_rerank(vec, norms, codes, vec[qrow], 10, exclude_row=qrow)
        assert fast.reranked == 10 * V.DEFAULT_RERANK_MULTIPLE
        recalls.append(len(set(exact.rows) & set(fast.rows)) / 10)
    assert np.mean(recalls) >= 0.95


def test_exclusion_and_mask(small):
    _, vec, _, norms, codes = small
    res = V.cosine_topk(vec, norms, vec[3], 10, exclude_row=3)
    assert 3 not in res.rows
    assert res.rows.size == 10
    assert 3 not in V.hamming_topk(codes, codes[3], 10, exclude_row=3).rows
    for density in (0.9, 0.05):  # dense (scan + mask) and sparse (gather) paths
        mask = np.random.default_rng(2).random(vec.shape[0]) < density
        ref = vec.astype(np.float64) @ vec[3].astype(np.float64) / norms
        ref[~mask] = -np.inf
        ref[3] = -np.inf
        for mode_fn in ("cos", "ham", "rerank"):
            if mode_fn == "cos":
                r = V.cosine_topk(vec, norms, vec[3], 25, mask=mask, exclude_row=3)
                np.testing.assert_array_equal(np.sort(r.rows), np.sort(np.argsort(-ref)[:25]))
            elif mode_fn == "ham":
                r = V.hamming_topk(codes, codes[3], 25, mask=mask, exclude_row=3)
            else:
                r = V.hamming_then_rerank(vec, norms, codes, vec[3], 25, mask=mask, exclude_row=3)
            assert mask[r.rows].all()
            assert 3 not in r.rows


def test_k_bigger_than_eligible_returns_all(small):
    _, vec, _, norms, codes = small
    few = vec[:7]
    res = V.cosine_topk(few, norms[:7], vec[0], 1000, exclude_row=0)
    assert res.rows.size == 6
    assert sorted(res.rows) == [1, 2, 3, 4, 5, 6]
    assert np.all(np.diff(res.scores) <= 0)
    mask = np.zeros(vec.shape[0], bool)
    mask[[5, 9]] = True
    assert V.hamming_topk(codes, codes[0], 100, mask=mask).rows.size == 2
    with pytest.raises(InvalidVectorQuery):
        V.cosine_topk(vec, norms, vec[0], 0)
    with pytest.raises(InvalidVectorQuery):
        V.cosine_topk(vec, norms, vec[0], 1001)
    with pytest.raises(InvalidVectorQuery):
        V.cosine_topk(vec, norms, np.zeros(64), 5)  # wrong dimension
    with pytest.raises(InvalidVectorQuery):
        V.cosine_topk(vec, norms, np.zeros(128), 5)  # zero vector


def test_parallel_scan_equals_serial_for_any_thread_count(clustered, monkeypatch):
    import numba

    _, vec, _, norms, codes = clustered
    serial = V.cosine_topk(vec, norms, vec[42], 200), V.hamming_topk(codes, codes[42], 200)
    monkeypatch.setattr(V, "_SERIAL_BYTES", 0)  # force the parallel kernels
    monkeypatch.setattr(V, "_CHUNK_ROWS", 1000)  # and many chunks
    before = numba.get_num_threads()
    results = []
    try:
        for threads in (1, before):
            numba.set_num_threads(threads)
            results.append(
                (V.cosine_topk(vec, norms, vec[42], 200), V.hamming_topk(codes, codes[42], 200))
            )
    finally:
        numba.set_num_threads(before)
    for pair in results:
        for x, y in zip(pair, serial, strict=True):
            np.testing.assert_array_equal(x.rows, y.rows)
            np.testing.assert_array_equal(x.scores, y.scores)


def test_calibrated_multiple_reaches_target(clustered):
    _, vec, _, norms, codes = clustered
    chosen, recall = V.calibrate_rerank_multiple(
        vec, norms, codes, n_queries=30, multiples=(4, 8, 16, 32, 64)
    )
    values = [recall[m] for m in (4, 8, 16, 32, 64)]
    assert values == sorted(values)  # more candidates never lose a true neighbour
    assert recall[chosen] >= 0.95
    assert all(recall[m] < 0.95 for m in (4, 8, 16, 32, 64) if m < chosen)


def test_table_roundtrip_mmap_and_search(tmp_path, small):
    cells, vec, scales, _, codes = small
    path = tmp_path / "geotessera_2024"
    shuffled = np.random.default_rng(0).permutation(cells.size)  # write_table sorts
    V.write_table(path, cells[shuffled], vec[shuffled], scales[shuffled], META)
    t = V.KnnTable.open(path)
    for arr in (t.cells, t.vectors, t.scales, t.norms, t.bin128):
        assert isinstance(arr, np.memmap)
    np.testing.assert_array_equal(np.asarray(t.cells), cells)
    np.testing.assert_array_equal(np.asarray(t.vectors), vec)
    np.testing.assert_array_equal(np.asarray(t.bin128), codes)
    assert t.meta["n"] == cells.size
    assert t.meta["d"] == 128
    assert t.meta["band"] == "geotessera"
    assert t.meta["rotation_seed"] == V.ROTATION_SEED
    assert t.meta["rerank_multiple"] in V.CALIBRATION_MULTIPLES  # calibrated at write time
    assert t.rerank_multiple == t.meta["rerank_multiple"]
    assert t.meta["rerank_recall_at_10"][str(t.rerank_multiple)] >= 0.95
    assert t.row_of(int(cells[123])) == 123
    assert t.row_of(int(cells[123]) + 1) is None
    np.testing.assert_array_equal(t.rows_of([cells[5], 1, cells[-1]]), [5, -1, cells.size - 1])
    for mode in V.MODES:
        res = t.search_row(10, k=5, mode=mode)
        assert res.mode == mode
        assert 10 not in res.rows
        assert res.rows.size == 5
    with pytest.raises(InvalidVectorQuery):
        t.search(vec[0], mode="euclid")


def test_table_without_codes(tmp_path):
    rng = np.random.default_rng(0)
    vec = rng.integers(-127, 128, (50, 256), dtype=np.int8)
    V.write_table(
        tmp_path / "multi", np.arange(50, dtype=np.uint64), vec, np.ones(50, np.float32), META
    )
    t = V.KnnTable.open(tmp_path / "multi")
    assert t.bin128 is None
    assert t.d == 256
    assert t.search_row(0, k=3).rows.size == 3
    with pytest.raises(InvalidVectorQuery):
        t.search_row(0, k=3, mode="hamming")


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
    leftovers = [p for p in os.listdir(tmp_path) if p != "t"]
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


def _random_table(tmp_path, n: int, *, seed: int):
    """A written and reopened table of ``n`` random 128-D int8 rows (no rerank calibration)."""
    import store.vectors as sv

    vecs = np.random.default_rng(seed).integers(-127, 128, size=(n, 128), dtype=np.int8)
    cells = np.arange(n, dtype=np.uint64) + np.uint64(1 << 60)
    meta = {"band": "geotessera", "tslot": 54}
    sv.write_table(tmp_path / "t", cells, vecs, np.ones(n, np.float32), meta, calibrate=False)
    return sv.KnnTable.open(tmp_path / "t"), vecs


def test_file_scans_equal_the_mapped_scans(tmp_path, monkeypatch) -> None:
    """Large tables are scanned from the files (pread into small buffers, several per
    chunk, heap carried over); results equal the in-memory kernels, masks and
    exclusions included, and a file cut short is a typed error, not garbage."""
    import store.vectors as sv

    n = 40_000  # 5.3 MB of rows (> 20 pread buffers), 640 kB of codes (3 buffers)
    table, vecs = _random_table(tmp_path, n, seed=7)
    monkeypatch.setattr(sv, "FILE_SCAN_BYTES", 0)
    mask = np.ones(n, bool)
    mask[::3] = False
    sparse = np.zeros(n, bool)
    sparse[::50] = True
    for m in (None, mask, sparse):
        for ex in (None, 10, n - 1):
            got = table.search(vecs[10], k=25, exclude_row=ex, mask=m)
            ref = sv.cosine_topk(table.vectors, table.norms, vecs[10], 25, exclude_row=ex, mask=m)
            np.testing.assert_array_equal(got.rows, ref.rows)
            np.testing.assert_allclose(got.scores, ref.scores)
            if ex is not None:
                assert ex not in got.rows
            hb = table.search(vecs[10], k=25, mode="hamming", exclude_row=ex, mask=m)
            hr = sv.hamming_topk(table.bin128, sv.binarize(vecs[10]), 25, exclude_row=ex, mask=m)
            np.testing.assert_array_equal(hb.rows, hr.rows)
            np.testing.assert_allclose(hb.scores, hr.scores)
    # a float query that is not an int8 multiple takes the float path through the file
    qf = vecs[3].astype(np.float32) + 0.37
    np.testing.assert_array_equal(
        table.search(qf, k=7).rows, sv.cosine_topk(table.vectors, table.norms, qf, 7).rows
    )
    # many Hamming candidates (the rerank's scan) through the file
    hb = table.search(vecs[4], k=10, mode="hamming_then_rerank", rerank_multiple=300)
    hr = sv.hamming_then_rerank(table.vectors, table.norms, table.bin128, vecs[4], 10, multiple=300)
    np.testing.assert_array_equal(hb.rows, hr.rows)
    # truncate the file under the open table: a short read is reported, not scored
    with open(table.path / "vectors.npy", "r+b") as f:
        f.truncate(int(table.vectors.offset) + 1000 * 128)
    with pytest.raises(VectorTableError, match="short read"):
        table.search(vecs[10], k=5)


def test_pruned_cosine_equals_the_full_scan(tmp_path, monkeypatch) -> None:
    """Tables carry row heads; the pruned scan (head bound, whole rows read only for
    rows that can enter) returns exactly the full scan's answer: clustered data,
    masks, exclusion, exact duplicates (ties by row), zero rows, a query with its
    energy spread evenly (little pruning), and k larger than the eligible rows."""
    import store.vectors as sv

    cells, vecs, scales = tessera_like(30_000, 128, 12, seed=5)
    vecs = vecs.copy()
    vecs[100:110] = vecs[7]  # exact duplicates of row 7: ties resolved by row
    vecs[200] = 0  # a zero row scores 0
    sv.write_table(
        tmp_path / "t", cells, vecs, scales, {"band": "geotessera", "tslot": 54}, calibrate=False
    )
    table = sv.KnnTable.open(tmp_path / "t")
    assert table.head is not None
    assert table.head.shape == (30_000, sv.head_dims(128))
    # tail norms bound the true ones from above
    tail = np.setdiff1d(np.arange(128), table.meta["head_index"])
    true_tail = np.linalg.norm(vecs[:, tail].astype(np.float64), axis=1)
    assert np.all(np.asarray(table.tailnorm, np.float64) >= true_tail)
    monkeypatch.setattr(sv, "FILE_SCAN_BYTES", 0)
    monkeypatch.setattr(sv, "PRUNE_MIN_ROWS", 0)
    mask = np.ones(30_000, bool)
    mask[1::2] = False
    flat = np.full(128, 9, np.int8)
    for q, ex in ((vecs[7], 7), (vecs[7], None), (vecs[12_345], 12_345), (flat, None)):
        for m in (None, mask):
            for k in (1, 10, 60):
                got = table.search(q, k=k, exclude_row=ex, mask=m)
                ref = sv.cosine_topk(table.vectors, table.norms, q, k, exclude_row=ex, mask=m)
                np.testing.assert_array_equal(got.rows, ref.rows)
                np.testing.assert_array_equal(got.scores, ref.scores)
                assert got.rows_read_whole is not None
    # ties: the duplicates of row 7 come back in row order right after row 7
    got = table.search(vecs[7], k=11)
    assert got.rows.tolist()[:11] == [7, *range(100, 110)]
    # most rows are pruned for a clustered query
    assert table.search(vecs[12_345], k=10).rows_read_whole < 30_000 // 4
    # k beyond the eligible rows: all of them, ranked
    few = np.zeros(30_000, bool)
    few[[3, 4, 5]] = True
    monkeypatch.setattr(sv, "_SPARSE_MASK", 0.0)  # force the scan, not the gather
    assert sorted(table.search(vecs[3], k=50, mask=few).rows.tolist()) == [3, 4, 5]
    # a float query that is no int8 multiple takes the unpruned file scan
    qf = vecs[9].astype(np.float32) + 0.3
    np.testing.assert_array_equal(
        table.search(qf, k=5).rows, sv.cosine_topk(table.vectors, table.norms, qf, 5).rows
    )
    # heads are read in place: a truncated file is refused before any page is touched
    with open(table.path / "head.npy", "r+b") as f:
        f.truncate(int(table.head.offset) + 100 * table.head.shape[1])
    with pytest.raises(VectorTableError, match="truncated"):
        table.search(vecs[7], k=5)


def test_table_rerank_reads_rows_with_pread_and_matches_the_mapped_path(tmp_path) -> None:
    import store.vectors as sv

    n = 3000
    table, vecs = _random_table(tmp_path, n, seed=11)
    rows = np.array([0, 1, 2, 57, 2999], dtype=np.int64)
    np.testing.assert_array_equal(table._read_rows(rows), vecs[rows])
    for m in (1, 8, 64):
        got = table.search(
            vecs[5], k=10, mode="hamming_then_rerank", rerank_multiple=m, exclude_row=5
        )
        ref = sv.hamming_then_rerank(
            table.vectors, table.norms, table.bin128, vecs[5], 10, multiple=m, exclude_row=5
        )
        np.testing.assert_array_equal(got.rows, ref.rows)
        np.testing.assert_allclose(got.scores, ref.scores)
        assert got.reranked == ref.reranked
        assert 5 not in got.rows


def test_upgrade_table_adds_heads_and_keeps_rows_and_calibration(tmp_path) -> None:
    import store.vectors as sv

    cells, vecs, scales = tessera_like(3000, 128, 6, seed=2)
    meta = {"band": "geotessera", "tslot": 54, "vintage": 2024, "rerank_multiple": 16}
    sv.write_table(tmp_path / "t", cells, vecs, scales, meta)
    # make it look like a table of the previous layout: no heads in meta
    path = sv.KnnTable.open(tmp_path / "t").path
    old_meta = json.loads((path / "meta.json").read_text())
    for key in ("head_dims", "head_index"):
        old_meta.pop(key)
    (path / "meta.json").write_text(json.dumps(old_meta))
    assert sv.KnnTable.open(tmp_path / "t").head is None
    assert sv.upgrade_table(tmp_path / "t") is True
    new = sv.KnnTable.open(tmp_path / "t")
    assert new.head is not None
    assert new.meta["rerank_multiple"] == 16
    assert new.meta["vintage"] == 2024
    np.testing.assert_array_equal(np.asarray(new.vectors), vecs[np.argsort(cells)])
    assert sv.upgrade_table(tmp_path / "t") is False


def test_word_major_hamming_equals_the_row_major_scan(tmp_path, monkeypatch) -> None:
    """Tables carry the codes word-major too; the split scan (first word bounds the
    distance, second words read only for buffers with a passing row) returns the
    row-major scan's answer for small and large n_keep, masks, exclusion and a
    far query, and a short plane file is a typed error."""
    import store.vectors as sv

    cells, vecs, scales = tessera_like(60_000, 128, 12, seed=9)
    sv.write_table(
        tmp_path / "t", cells, vecs, scales, {"band": "geotessera", "tslot": 54}, calibrate=False
    )
    table = sv.KnnTable.open(tmp_path / "t")
    assert table.bin128w is not None
    np.testing.assert_array_equal(np.asarray(table.bin128w).T, table.bin128.view(np.uint64))
    monkeypatch.setattr(sv, "FILE_SCAN_BYTES", 0)
    mask = np.ones(60_000, bool)
    mask[::5] = False
    for split_up_to in (sv._SPLIT_MAX_KEEP, 10**9):  # default policy; the split scan for all
        monkeypatch.setattr(sv, "_SPLIT_MAX_KEEP", split_up_to)
        for row in (3, 31_337):
            code = table.bin128[row]
            for m in (None, mask):
                for keep in (1, 10, 63, 700, 5000):
                    got = table._hamming_blockwise(code, keep, m, row)
                    ref = sv._hamming_candidates(table.bin128, code, keep, m, row)
                    np.testing.assert_array_equal(got[1], ref[1])
                    np.testing.assert_array_equal(got[0], ref[0])
    monkeypatch.undo()
    monkeypatch.setattr(sv, "FILE_SCAN_BYTES", 0)
    # a query far from every row (most rows pass the first word)
    far = np.bitwise_not(table.bin128[3])
    got = table._hamming_blockwise(far, 300, None, None)
    ref = sv._hamming_candidates(table.bin128, far, 300, None, None)
    np.testing.assert_array_equal(got[1], ref[1])
    with open(table.path / "bin128w.npy", "r+b") as f:
        f.truncate(int(table.bin128w.offset) + 8 * 60_000 + 800)
    with pytest.raises(VectorTableError, match="truncated"):
        table._hamming_blockwise(table.bin128[3], 10, None, None)


def test_concurrent_scans_of_one_table_agree_with_sequential_ones(tmp_path, monkeypatch) -> None:
    """Server threads scan one table at once: parallel kernels run side by side and each
    releases the regions it read while others may be reading them (they fault back in)."""
    import store.vectors as sv

    cells, vecs, scales = tessera_like(40_000, 128, 8, seed=4)
    sv.write_table(
        tmp_path / "t", cells, vecs, scales, {"band": "geotessera", "tslot": 54}, calibrate=False
    )
    table = sv.KnnTable.open(tmp_path / "t")
    monkeypatch.setattr(sv, "FILE_SCAN_BYTES", 0)
    monkeypatch.setattr(sv, "PRUNE_MIN_ROWS", 0)
    jobs = [(row, mode) for row in (5, 999, 20_000, 39_999) for mode in sv.MODES]
    want = {j: table.search_row(j[0], k=10, mode=j[1]).rows.tolist() for j in jobs}
    got: dict[tuple[int, str], list[int]] = {}
    errors: list[BaseException] = []

    def work(js: list[tuple[int, str]]) -> None:
        try:
            for _ in range(3):
                for j in js:
                    got[j] = table.search_row(j[0], k=10, mode=j[1]).rows.tolist()
        except BaseException as e:
            errors.append(e)

    threads = [threading.Thread(target=work, args=(jobs[i::4],)) for i in range(4)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(timeout=120)
    assert not errors
    assert got == want


def test_scans_of_in_memory_arrays_never_release_them(tmp_path, monkeypatch) -> None:
    """Only file mappings are released after a scan: MADV_DONTNEED on anonymous memory
    would zero it. A table built from in-memory copies scans to the same answers and
    its arrays are unchanged afterwards."""
    import dataclasses

    import store.vectors as sv

    cells, vecs, scales = tessera_like(40_000, 128, 8, seed=6)
    sv.write_table(
        tmp_path / "t", cells, vecs, scales, {"band": "geotessera", "tslot": 54}, calibrate=False
    )
    mapped = sv.KnnTable.open(tmp_path / "t")
    copies = {
        name: np.array(getattr(mapped, name))
        for name in ("head", "norms", "tailnorm", "bin128", "bin128w")
    }
    mem = dataclasses.replace(mapped, **{k: v.copy() for k, v in copies.items()})
    assert sv._file_mapped(mapped.head, mapped.norms, mapped.tailnorm)
    assert not sv._file_mapped(mem.head)
    monkeypatch.setattr(sv, "FILE_SCAN_BYTES", 0)
    monkeypatch.setattr(sv, "PRUNE_MIN_ROWS", 0)
    for mode in sv.MODES:
        for row in (11, 25_000):
            a = mem.search_row(row, k=10, mode=mode)
            b = mapped.search_row(row, k=10, mode=mode)
            np.testing.assert_array_equal(a.rows, b.rows)
    for name, arr in copies.items():
        np.testing.assert_array_equal(getattr(mem, name), arr)


def test_concurrent_scans_survive_numba_workqueue_layer() -> None:
    """Where neither OpenMP nor TBB loads, numba falls back to its "workqueue" layer,
    which aborts the process (SIGABRT) when two threads launch parallel kernels at once;
    the scans then serialise their launches. The concurrent-scan test runs under it."""
    import subprocess
    import sys
    from pathlib import Path

    here = Path(__file__).resolve()
    test = f"{here}::test_concurrent_scans_of_one_table_agree_with_sequential_ones"
    env = {**os.environ, "NUMBA_THREADING_LAYER": "workqueue"}
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", test],
        cwd=here.parents[2],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "1 passed" in proc.stdout
