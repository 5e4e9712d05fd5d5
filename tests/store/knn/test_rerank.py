"""The rerank's table steps: the rescoring read by spans of rows, and the seeded candidate scan."""

from __future__ import annotations

import numpy as np
import pytest

from bench.data import tessera_like
from store import knn as V
from store.errors import VectorTableError
from store.knn import _kernels, _rerank
from store.knn import scan as knn_scan
from store.knn import table as knn_table
from store.knn.mapped import data_offset, open_ro
from store.knn.scan import merge_topk, prep_query, read_only

META = {"band": "geotessera", "tslot": 54}


def _table(tmp_path, n: int, d: int, seed: int):
    rng = np.random.default_rng(seed)
    vecs = rng.integers(-128, 128, (n, d), dtype=np.int8)
    vecs[7] = 0  # a zero row: key 0
    vecs[8] = vecs[9]  # a tie
    V.write_table(
        tmp_path / f"t{d}",
        np.arange(n, dtype=np.uint64),
        vecs,
        np.ones(n, np.float32),
        META,
        calibrate=False,
    )
    return V.KnnTable.open(tmp_path / f"t{d}"), vecs


def _reference(vecs, cand, query, k):
    qi, qf, use_float, _ = prep_query(query, vecs.shape[1])
    out = _kernels.cosine_rows_normed(*map(read_only, (vecs[cand], qi, qf, use_float, k)))
    return merge_topk(out, k)


def test_rescoring_by_spans_equals_the_rows_read_into_one_array(tmp_path, monkeypatch) -> None:
    """Candidates read a span at a time (neighbours share a pread), serial or in parallel
    chunks, any span length: the same keys and candidate positions as scoring the rows
    read into one array, for int8 and float queries, D = 128 and another D, ties and a
    zero row, and the first and last rows."""
    rng = np.random.default_rng(3)
    for d in (128, 96):
        table, vecs = _table(tmp_path, 5_000, d, seed=d)
        n = table.n
        runs = np.array([0, 1, 2, 7, 8, 9, 40, 41, 70, 101, 1000, 1031, 1032, 1064, n - 1])
        cands = [runs, np.sort(rng.choice(n, 2_500, replace=False)), np.arange(n)]
        queries = [vecs[9], vecs[9].astype(np.float32) * 0.37 + 0.01]
        base = data_offset(table.vectors)
        for cand in cands:
            for query in queries:
                qi, qf, use_float, _ = prep_query(query, d)
                for k in (1, 10, 64):
                    want = _reference(vecs, cand, query, k)
                    for par_min, chunk in ((10**9, 512), (0, 7), (0, 512)):
                        monkeypatch.setattr(_rerank, "RESCORE_PARALLEL_MIN", par_min)
                        monkeypatch.setattr(_rerank, "RESCORE_CHUNK", chunk)
                        got = _rerank.rescore_rows(
                            table.path / "vectors.npy", base, d, cand, qi, qf, use_float, k
                        )
                        np.testing.assert_array_equal(got[1], want[1])
                        np.testing.assert_array_equal(got[0], want[0])
                    with open_ro(table.path / "vectors.npy") as fd:
                        for span in (1, 3, 32, 4096):
                            args = (fd, base, d, cand, qi, qf, use_float, k, 5, span)
                            got = merge_topk(_rerank.rerank_rows_file(*args)[:3], k)
                            np.testing.assert_array_equal(got[1], want[1])
                            np.testing.assert_array_equal(got[0], want[0])


def test_rescoring_a_truncated_file_is_a_typed_error(tmp_path, monkeypatch) -> None:
    table, vecs = _table(tmp_path, 3_000, 128, seed=1)
    qi, qf, use_float, _ = prep_query(vecs[3], 128)
    base = data_offset(table.vectors)
    with open(table.path / "vectors.npy", "r+b") as f:
        f.truncate(base + 128 * 2_000 + 50)
    for par_min in (10**9, 0):
        monkeypatch.setattr(_rerank, "RESCORE_PARALLEL_MIN", par_min)
        cand = np.array([5, 1_999, 2_000, 2_500], np.int64)
        # 1999 and 2000 share one read, which comes back short: named by its first row
        with pytest.raises(VectorTableError, match="short read at row 1999"):
            _rerank.rescore_rows(table.path / "vectors.npy", base, 128, cand, qi, qf, use_float, 3)


def test_seeded_candidate_scan_is_exact_or_scans_again(tmp_path, monkeypatch) -> None:
    """The word-major scan from a sampled bound: with a bound at or above the exact n-th
    distance the answer is the unbounded scan's; below it the scan keeps fewer than n rows
    (the caller's signal) and the table scans again, with the same answer. Table level:
    a sample that guesses far too low (or gives no bound) changes nothing."""
    cells, vecs, scales = tessera_like(60_000, 128, 12, seed=5)
    V.write_table(tmp_path / "t", cells, vecs, scales, META, calibrate=False)
    table = V.KnnTable.open(tmp_path / "t")
    planes = table.bin128w
    assert planes is not None
    mask = np.ones(table.n, bool)
    mask[::3] = False
    for row in (4, 44_444):
        q = np.ascontiguousarray(table.bin128[row]).view("<u8")
        for m in (None, mask):
            marr = m if m is not None else np.ones(1, np.bool_)
            for keep in (300, 3_000):
                ref = knn_scan.hamming_candidates(table.bin128, table.bin128[row], keep, m, row)
                nth = int(-ref[0][-1])  # the exact keep-th distance
                for seed, exact in (
                    (_rerank.NO_SEED, True),
                    (nth, True),
                    (nth + 2, True),
                    (nth - 1, False),
                ):
                    for prefetch1 in (False, True):
                        args = (
                            planes,
                            q,
                            marr,
                            m is not None,
                            row,
                            keep,
                            6,
                            False,
                            seed,
                            prefetch1,
                        )
                        out = _kernels.hamming_scan_split(*map(read_only, args))
                        assert (int(out[2].sum()) >= keep) == exact
                        if exact:
                            got = _kernels.merge_hamming(*out, keep, 128)
                            np.testing.assert_array_equal(got[1], ref[1])
                            np.testing.assert_array_equal(got[0], ref[0])
    monkeypatch.setattr(knn_table, "FILE_SCAN_BYTES", 0)
    for factor in (1e-4, 2.0, 1e9):  # a bound far too low: scanned again; the default; none
        monkeypatch.setattr(_rerank, "SEED_FACTOR", factor)
        for m in (None, mask):
            got = table._hamming_blockwise(table.bin128[4], 3_000, m, 4)
            ref = knn_scan.hamming_candidates(table.bin128, table.bin128[4], 3_000, m, 4)
            np.testing.assert_array_equal(got[1], ref[1])
            np.testing.assert_array_equal(got[0], ref[0])


def test_hamming_seed_counts_only_eligible_rows(tmp_path) -> None:
    cells, vecs, scales = tessera_like(10_000, 128, 6, seed=2)
    V.write_table(tmp_path / "t", cells, vecs, scales, META, calibrate=False)
    table = V.KnnTable.open(tmp_path / "t")
    planes = np.asarray(table.bin128w)
    q = np.ascontiguousarray(table.bin128[10]).view("<u8")
    dist = np.bitwise_count(planes[0] ^ q[0]) + np.bitwise_count(planes[1] ^ q[1])
    mask = np.arange(10_000) % 2 == 0
    starts = np.array([0, 500, 9_990], np.int64)
    rows = np.concatenate([np.arange(0, 100), np.arange(500, 600), np.arange(9_990, 10_000)])
    for m in (None, mask):
        marr = m if m is not None else np.ones(1, np.bool_)
        hist, counted = _kernels.hamming_seed_counts(
            planes, q, starts, 100, marr, m is not None, 10, False
        )
        ok = rows[(rows != 10) & (m[rows] if m is not None else True)]
        assert counted == ok.size
        np.testing.assert_array_equal(hist, np.bincount(dist[ok], minlength=130))
    # the bound holds SEED_FACTOR x n_keep rows scaled from the sample; none when all rows are kept
    assert _rerank.hamming_seed(table.bin128w, q, 10_000, None, 10) == _rerank.NO_SEED
    seed = _rerank.hamming_seed(table.bin128w, q, 50, None, 10)
    assert seed < _rerank.NO_SEED
    assert np.count_nonzero(np.delete(dist, 10) <= seed) >= 50
