"""The rerank's candidate scan from a sampled distance bound (store.knn._seed)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from bench.data import tessera_like
from store import knn as V
from store.knn import _kernels, _seed
from store.knn import ivf as ivf_mod
from store.knn import scan as knn_scan
from store.knn import table as knn_table
from store.knn.scan import read_only

META = {"band": "geotessera", "tslot": 54}


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
                    (_seed.NO_SEED, True),
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
    seeds: list[int] = []
    launch = knn_table.run_parallel

    def record(fn, *args):  # the bound each split scan ran with
        if fn is _kernels.hamming_scan_split:
            seeds.append(int(args[8]))
        return launch(fn, *args)

    monkeypatch.setattr(knn_table, "run_parallel", record)
    # a bound far too low (scanned again without it); the default; no bound at all
    for factor, runs in ((1e-4, 2), (2.0, 1), (1e9, 1)):
        monkeypatch.setattr(_seed, "SEED_FACTOR", factor)
        for m in (None, mask):
            seeds.clear()
            got = table.hamming_blockwise(table.bin128[4], 3_000, m, 4)
            ref = knn_scan.hamming_candidates(table.bin128, table.bin128[4], 3_000, m, 4)
            np.testing.assert_array_equal(got[1], ref[1])
            np.testing.assert_array_equal(got[0], ref[0])
            assert len(seeds) == runs
            assert seeds[-1] == _seed.NO_SEED if factor != 2.0 else seeds[0] < _seed.NO_SEED


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
    assert _seed.hamming_seed(table.bin128w, q, 10_000, None, 10) == _seed.NO_SEED
    seed = _seed.hamming_seed(table.bin128w, q, 50, None, 10)
    assert seed < _seed.NO_SEED
    assert np.count_nonzero(np.delete(dist, 10) <= seed) >= 50


def test_cosine_seed_from_the_nearest_list_bounds_the_answer(tmp_path, monkeypatch) -> None:
    """On a table with inverted lists the pruned cosine scan's seed is the k-th best key of
    the query's nearest list's best candidates: eligible rows only (mask, excluded row), a key
    at most the answer's k-th, above a sample's in at least 3 of 4 queries; a narrow mask,
    or lists holding fewer than k eligible rows, fall back to the sample (the seed is then the
    sample's k-th key). The pruned answers stay the full scan's."""
    cells, vecs, scales = tessera_like(40_000, seed=5)
    V.write_table(tmp_path / "t", cells, vecs, scales, META, ivf=True)
    table = V.KnnTable.open(tmp_path / "t")
    assert table.ivf is not None
    monkeypatch.setattr(knn_table, "FILE_SCAN_BYTES", 0)
    monkeypatch.setattr(knn_table, "PRUNE_MIN_ROWS", 0)
    n = table.n
    dense = np.ones(n, bool)
    dense[::3] = False
    sparse = np.zeros(n, bool)
    sparse[::10] = True
    none = np.zeros(1, bool)
    above = 0
    for row in (3, 777, 12_345, 39_999):
        qi = np.asarray(vecs[row], np.int16)
        for mask, use in ((none, False), (dense, True), (sparse, True)):
            for ex in (row, -1):
                rows = _seed._list_seed_rows(table, qi, 10, mask, use, ex)
                if use and mask is sparse:
                    assert rows is None  # under IVF_MIN_MASK: the sample
                    continue
                assert rows is not None
                assert rows.size == _seed.COSINE_LIST_ROWS
                assert ex not in rows.tolist()
                if use:
                    assert mask[rows].all()
        for mask, use in ((none, False), (dense, True), (sparse, True)):
            for k in (1, 10, 70):
                m = mask if use else None
                seed = _seed.cosine_seed(table, qi, k, mask, use, row)
                ref = V.cosine_topk(
                    table.vectors, table.norms, vecs[row], k, exclude_row=row, mask=m
                )
                qnorm = float(np.linalg.norm(qi.astype(np.float64)))
                assert seed <= ref.scores[-1] * qnorm * (1 + 1e-9)
                if use and mask is sparse:  # the sample's k-th key
                    assert seed == pytest.approx(_sample_kth(table, vecs, qi, k, sparse, row))
                got = table.search(vecs[row], k=k, exclude_row=row, mask=m)
                np.testing.assert_array_equal(got.rows, ref.rows)
                np.testing.assert_array_equal(got.scores, ref.scores)
        # the list seed against the sample's (the seed the table had before the lists)
        sample = _seed._sampled_rows(n, none, False, row)
        keys = vecs[sample].astype(np.int64) @ qi.astype(np.int64) / table.norms[sample]
        listed = _seed.cosine_seed(table, qi, 10, none, False, row)
        above += listed > np.sort(keys)[-10]
    assert above >= 3
    # lists holding fewer than k eligible rows: the sample (here fewer than k rows too: -inf)
    q3 = np.asarray(vecs[3], np.int16)
    assert _seed._list_seed_rows(table, q3, n + 1, none, False, -1) is None
    assert _seed.cosine_seed(table, q3, n + 1, none, False, -1) == -np.inf


def _sample_kth(table, vecs, qi, k, mask, exclude) -> float:
    """The k-th best key of the seed's sample, by numpy (-inf when it holds fewer than k)."""
    sample = _seed._sampled_rows(table.n, mask, True, exclude)
    if sample.size < k:
        return -np.inf
    keys = vecs[sample].astype(np.int64) @ qi.astype(np.int64) / table.norms[sample]
    return float(np.sort(keys)[-k])


def test_a_row_map_naming_a_row_twice_cannot_raise_the_cosine_seed(tmp_path) -> None:
    """The seed counts each row once: a damaged ``ivf_rows.npy`` whose nearest list names the
    query's best neighbour at every position would otherwise give k copies of the best key,
    above the answer's k-th, and the exact scan would drop true neighbours. Too few distinct
    rows fall back to the sample."""
    cells, vecs, scales = tessera_like(40_000, seed=5)
    V.write_table(tmp_path / "t", cells, vecs, scales, META, ivf=True)
    table = V.KnnTable.open(tmp_path / "t")
    assert table.ivf is not None
    row = 777
    qi = np.asarray(vecs[row], np.int16)
    ref = V.cosine_topk(table.vectors, table.norms, vecs[row], 10, exclude_row=row)
    kth = ref.scores[-1] * float(np.linalg.norm(qi.astype(np.float64)))
    nearest = ivf_mod.probe(table.ivf, qi.astype(np.float32), 1)
    rows = np.array(table.ivf.rows)
    lo, hi = int(table.ivf.offsets[nearest[0]]), int(table.ivf.offsets[nearest[0] + 1])
    rows[lo:hi] = ref.rows[0]  # every position of the nearest list names the best neighbour
    damaged = dataclasses.replace(table, ivf=dataclasses.replace(table.ivf, rows=rows))
    assert _seed._list_seed_rows(damaged, qi, 10, np.zeros(1, bool), False, row) is None
    assert _seed.cosine_seed(damaged, qi, 10, np.zeros(1, bool), False, row) <= kth * (1 + 1e-9)
