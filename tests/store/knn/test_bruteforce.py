"""Every k-NN scan path against a numpy brute-force reference, on tie-heavy data.

The kernels order by key, then by lower row (documented in store.knn._kernels):
here many rows share a distance or a cosine key, so the references pin the
tie order exactly, whatever the path (serial, parallel chunks, word-major
planes, row-major codes, gathered rows, file scans, pruned scans), the number
of threads, masks, exclusion, k beyond the eligible rows, and empty tables.
"""

from __future__ import annotations

import numba
import numpy as np
import pytest

from store import knn as V
from store.knn import scan as knn_scan
from store.knn import table as knn_table

N = 20_000


def _tied_table(tmp_path):
    """Rows drawn from 40 distinct int8 vectors (so codes and cosine keys tie in
    blocks of ~500 rows), each perturbed in a few rows so distances also spread."""

    rng = np.random.default_rng(21)
    base = rng.integers(-127, 128, size=(40, 128), dtype=np.int8)
    vecs = base[rng.integers(0, 40, N)]
    noisy = rng.random(N) < 0.3
    vecs[noisy, :8] = rng.integers(-127, 128, size=(int(noisy.sum()), 8), dtype=np.int8)
    vecs[17] = 0  # a zero row: cosine key 0
    cells = np.arange(N, dtype=np.uint64) + np.uint64(1 << 60)
    meta = {"band": "geotessera", "tslot": 54}
    V.write_table(tmp_path / "t", cells, vecs, np.ones(N, np.float32), meta, calibrate=False)
    return V.KnnTable.open(tmp_path / "t"), vecs


def _eligible(n: int, mask, exclude) -> np.ndarray:
    ok = np.ones(n, bool) if mask is None else mask.copy()
    if exclude is not None:
        ok[exclude] = False
    return ok


def ref_hamming(codes: np.ndarray, qcode: np.ndarray, k: int, mask=None, exclude=None):
    """(distances, rows) of the k nearest codes, ties by lower row."""
    dist = np.bitwise_count(codes.view(np.uint64) ^ qcode.view(np.uint64)).sum(axis=1)
    rows = np.flatnonzero(_eligible(codes.shape[0], mask, exclude))
    order = rows[np.lexsort((rows, dist[rows]))][:k]
    return dist[order], order


def ref_cosine(vecs: np.ndarray, q: np.ndarray, k: int, mask=None, exclude=None):
    """Rows of the k best keys dot / norm (the kernels' key), ties by lower row."""
    v = vecs.astype(np.int64)
    norms = V.int8_norms(vecs).astype(np.float64)
    dots = (v @ q.astype(np.int64)).astype(np.float64)
    key = np.where(norms > 0, dots / np.where(norms > 0, norms, 1.0), 0.0)
    rows = np.flatnonzero(_eligible(vecs.shape[0], mask, exclude))
    return rows[np.lexsort((rows, -key[rows]))][:k]


def _masks(n: int) -> list[np.ndarray | None]:
    dense = np.ones(n, bool)
    dense[::3] = False
    sparse = np.zeros(n, bool)
    sparse[::40] = True
    return [None, dense, sparse]


@pytest.mark.parametrize("threads", [1, 2])
def test_hamming_paths_equal_brute_force_with_ties(tmp_path, monkeypatch, threads) -> None:
    table, _ = _tied_table(tmp_path)
    codes = np.asarray(table.bin128)
    dist_all = np.bitwise_count(codes.view(np.uint64) ^ codes[5].view(np.uint64)).sum(axis=1)
    assert np.bincount(dist_all).max() > 100  # the data really ties
    before = numba.get_num_threads()
    numba.set_num_threads(min(threads, before))
    try:
        monkeypatch.setattr(knn_scan, "_CHUNK_ROWS", 1000)  # many chunks
        for big in (False, True):  # in-memory kernels, then the mapped large-table kernels
            if big:
                monkeypatch.setattr(knn_table, "FILE_SCAN_BYTES", 0)
            monkeypatch.setattr(knn_scan, "_SERIAL_BYTES", 0 if big else 8 << 20)
            for split_up_to in (0, 10**9):  # row-major codes, then word-major planes
                monkeypatch.setattr(knn_table, "_SPLIT_MAX_KEEP", split_up_to)
                for row in (5, 17, N - 1):
                    for m in _masks(N):
                        for ex in (None, row):
                            for keep in (1, 10, 64, 700, 5000):
                                want_d, want_r = ref_hamming(codes, codes[row], keep, m, ex)
                                keys, rows, _ = table.hamming_blockwise(codes[row], keep, m, ex)
                                np.testing.assert_array_equal(rows, want_r)
                                np.testing.assert_array_equal(-keys, want_d)
                res = table.search_row(5, k=40, mode="hamming")
                want_d, want_r = ref_hamming(codes, codes[5], 40, None, 5)
                np.testing.assert_array_equal(res.rows, want_r)
                np.testing.assert_allclose(res.scores, 1 - 2 * want_d / 128)
    finally:
        numba.set_num_threads(before)


def test_array_scans_equal_brute_force_with_ties(small) -> None:
    _, vec, _, _, codes = small
    tied = codes.copy()
    tied[1000:1500] = tied[3]  # 500 exact copies of row 3's code
    vtied = vec.copy()
    vtied[1000:1500] = vtied[3]
    vnorms = V.int8_norms(vtied)
    for m in _masks(vec.shape[0]):
        for ex in (None, 3, 1200):
            for k in (1, 7, 300, 1000):
                want_d, want_r = ref_hamming(tied, tied[3], k, m, ex)
                got = V.hamming_topk(tied, tied[3], k, mask=m, exclude_row=ex)
                np.testing.assert_array_equal(got.rows, want_r)
                np.testing.assert_allclose(got.scores, 1 - 2 * want_d / 128)
                want = ref_cosine(vtied, vtied[3], k, m, ex)
                cos = V.cosine_topk(vtied, vnorms, vtied[3], k, mask=m, exclude_row=ex)
                np.testing.assert_array_equal(cos.rows, want)


def test_cosine_table_paths_equal_brute_force_with_ties(tmp_path, monkeypatch) -> None:
    table, vecs = _tied_table(tmp_path)
    monkeypatch.setattr(knn_table, "FILE_SCAN_BYTES", 0)
    for prune in (False, True):  # the file scan, then the pruned scan
        monkeypatch.setattr(knn_table, "PRUNE_MIN_ROWS", 0 if prune else 10**12)
        for row in (5, 18, N - 1):  # (row 17 is zero: no cosine query)
            for m in _masks(N):
                for ex in (None, row):
                    for k in (1, 10, 600):
                        got = table.search(vecs[row], k=k, mask=m, exclude_row=ex)
                        np.testing.assert_array_equal(
                            got.rows, ref_cosine(vecs, vecs[row], k, m, ex)
                        )
                        if prune and m is None:
                            assert got.rows_read_whole is not None


def test_rerank_table_paths_equal_brute_force_with_ties(tmp_path, monkeypatch) -> None:
    """hamming_then_rerank on the table (Hamming candidates, counting-sort merge, rows read
    by pread, norms computed beside the dots): with every eligible row a candidate it is the
    exact cosine answer, ties by lower row; with fewer it is the exact cosine order of the
    exact Hamming candidates."""
    table, vecs = _tied_table(tmp_path)
    codes = np.asarray(table.bin128)
    monkeypatch.setattr(knn_scan, "_CHUNK_ROWS", 1000)  # many chunks
    for big in (False, True):
        monkeypatch.setattr(knn_table, "FILE_SCAN_BYTES", 0 if big else 8 << 20)
        for row in (5, 18, N - 1):
            for m in _masks(N):
                for k in (1, 10, 50):
                    got = table.search(
                        vecs[row],
                        k=k,
                        mode="hamming_then_rerank",
                        mask=m,
                        exclude_row=row,
                        rerank_multiple=N,
                    )
                    np.testing.assert_array_equal(got.rows, ref_cosine(vecs, vecs[row], k, m, row))
                    _, cand = ref_hamming(codes, codes[row], 8 * k, m, row)
                    got = table.search(
                        vecs[row],
                        k=k,
                        mode="hamming_then_rerank",
                        mask=m,
                        exclude_row=row,
                        rerank_multiple=8,
                    )
                    cand = np.sort(cand)  # the table reranks its candidates in row order
                    want = cand[ref_cosine(vecs[cand], vecs[row], k)]
                    np.testing.assert_array_equal(got.rows, want)


def test_k_beyond_the_eligible_rows_and_empty_tables(tmp_path, monkeypatch) -> None:
    table, vecs = _tied_table(tmp_path)
    codes = np.asarray(table.bin128)
    monkeypatch.setattr(knn_table, "FILE_SCAN_BYTES", 0)
    monkeypatch.setattr(knn_table, "SPARSE_MASK", 0.0)  # scan with the mask, no gather
    few = np.zeros(N, bool)
    few[[4, 9, 9000, N - 1]] = True
    for mode in V.MODES:
        got = table.search(vecs[9], k=1000, mode=mode, mask=few, exclude_row=9)
        assert sorted(got.rows.tolist()) == [4, 9000, N - 1]
    _, want_r = ref_hamming(codes, codes[9], 1000, few, 9)
    got = table.search(vecs[9], k=1000, mode="hamming", mask=few, exclude_row=9)
    np.testing.assert_array_equal(got.rows, want_r)
    np.testing.assert_array_equal(
        table.search(vecs[9], k=1000, mask=few, exclude_row=9).rows,
        ref_cosine(vecs, vecs[9], 1000, few, 9),
    )
    # an empty table: every mode answers nothing, on the array and the table path
    V.write_table(
        tmp_path / "empty",
        np.zeros(0, np.uint64),
        np.zeros((0, 128), np.int8),
        np.zeros(0, np.float32),
        {"band": "geotessera", "tslot": 54},
        calibrate=False,
    )
    empty = V.KnnTable.open(tmp_path / "empty")
    q = np.ones(128, np.int8)
    for mode in V.MODES:
        res = empty.search(q, k=5, mode=mode)
        assert res.rows.size == 0
        assert res.scores.size == 0
    assert V.hamming_topk(np.zeros((0, 16), np.uint8), np.zeros(16, np.uint8), 5).rows.size == 0
