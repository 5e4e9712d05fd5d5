"""Top-k scans over arrays: exactness against numpy references, options, calibration."""

from __future__ import annotations

import numpy as np
import pytest

from bench.data import tessera_like
from store import knn as V
from store.errors import InvalidVectorQuery
from store.knn import scan as knn_scan


@pytest.fixture(scope="module")
def clustered():
    cells, vec, scales = tessera_like(50_000, seed=3)
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
    monkeypatch.setattr(knn_scan, "_SERIAL_BYTES", 0)  # force the parallel kernels
    monkeypatch.setattr(knn_scan, "_CHUNK_ROWS", 1000)  # and many chunks
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


def test_kernels_get_their_arrays_read_only_whatever_the_caller_holds(monkeypatch) -> None:
    """Writable in-memory arrays and read-only (mapped) ones run the same compiled kernels:
    every array argument reaches a kernel read-only, so numba compiles one specialisation
    per kernel, not one per read-only/writable mix."""
    from store.knn import _kernels

    monkeypatch.setattr(knn_scan, "_SERIAL_BYTES", 0)  # the parallel kernels
    rng = np.random.default_rng(3)
    vecs = rng.integers(-127, 128, size=(2000, 128), dtype=np.int8)
    norms = V.int8_norms(vecs)
    frozen = vecs.copy()
    frozen.flags.writeable = False
    a = V.cosine_topk(vecs, norms, vecs[7], 5)
    b = V.cosine_topk(frozen, norms, frozen[7], 5)
    np.testing.assert_array_equal(a.rows, b.rows)
    codes = V.binarize(vecs)
    V.hamming_topk(codes, codes[7], 5)
    for kernel in (_kernels.cosine_scan, _kernels.hamming_scan):
        assert kernel.signatures, kernel
        for sig in kernel.signatures:
            arrays = [t for t in sig if hasattr(t, "mutable")]
            assert arrays
            assert not any(t.mutable for t in arrays), (kernel, sig)


def test_hamming_merge_by_counting_equals_lexsort_merge() -> None:
    """Buffers in the Hamming scans' shape (ascending chunks, ascending rows in each): the
    counting-sort merge gives merge_topk's answer, ties by lower row, n_keep beyond the
    entries included."""
    rng = np.random.default_rng(4)
    nchunk, cap = 5, 40
    keys = np.full((nchunk, cap), np.nan)
    rows = np.full((nchunk, cap), -1, np.int64)
    sizes = rng.integers(0, cap + 1, nchunk)
    for c in range(nchunk):
        chunk_rows = np.sort(rng.choice(1000, sizes[c], replace=False)) + 1000 * c
        rows[c, : sizes[c]] = chunk_rows
        keys[c, : sizes[c]] = -rng.integers(0, 6, sizes[c]).astype(np.float64)  # many ties
    out = (keys, rows, sizes)
    for n_keep in (1, 7, 30, int(sizes.sum()), int(sizes.sum()) + 5):
        want_k, want_r = knn_scan.merge_topk(out, n_keep)
        got_k, got_r = knn_scan.merge_hamming_topk(out, n_keep, 128)
        np.testing.assert_array_equal(got_r, want_r)
        np.testing.assert_array_equal(got_k, want_k)
