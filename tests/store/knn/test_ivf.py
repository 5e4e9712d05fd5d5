"""Inverted lists of large k-NN tables (store.knn.ivf) and the rerank's list triage."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from bench.data import tessera_like
from store.errors import InvalidVectorQuery
from store.knn import KnnTable, binarize, upgrade_table, write_table
from store.knn import ivf as ivf_mod
from store.knn import write as write_mod
from store.knn.codes import ROTATION_SEED, rotation
from store.knn.ivf import IvfArrays, IvfPlan, adc_lut, adc_scores, build_ivf, probe

META = {"band": "geotessera", "tslot": 54, "vintage": 2024}


@pytest.fixture(scope="module")
def clustered(tmp_path_factory: Any) -> tuple[KnnTable, Any]:
    cells, vectors, scales = tessera_like(40_000, seed=5)
    path = tmp_path_factory.mktemp("ivf") / "t"
    write_table(path, cells, vectors, scales, META, ivf=True)
    return KnnTable.open(path), (cells, vectors, scales)


def _exact(t: KnnTable, row: int, k: int = 10) -> set[int]:
    return set(t.search_row(row, k=k, mode="cosine").rows.tolist())


def test_build_lays_out_every_row_once() -> None:
    _, vectors, _ = tessera_like(5_000, seed=1)
    codes = binarize(vectors)
    lists = build_ivf(vectors, codes)
    assert lists.n_lists == ivf_mod.list_count(5_000) == 70
    assert lists.offsets[0] == 0
    assert lists.offsets[-1] == 5_000
    assert np.all(np.diff(lists.offsets) >= 0)
    np.testing.assert_array_equal(np.sort(lists.rows), np.arange(5_000))
    np.testing.assert_array_equal(lists.codes, codes[lists.rows])
    np.testing.assert_allclose(np.linalg.norm(lists.centroids, axis=1), 1.0, rtol=1e-5)
    # every row sits in the list of its nearest centroid
    owner = np.repeat(np.arange(lists.n_lists), np.diff(lists.offsets))
    nearest = np.argmax(vectors[lists.rows].astype(np.float32) @ lists.centroids.T, axis=1)
    assert np.mean(nearest == owner) > 0.999  # float ties aside
    again = build_ivf(vectors, codes)  # seeded: the same lists
    np.testing.assert_array_equal(again.rows, lists.rows)


def test_adc_lut_is_the_rotated_query_against_the_sign_bits() -> None:
    rng = np.random.default_rng(3)
    q = rng.normal(size=128)
    vecs = rng.integers(-127, 128, (50, 128), dtype=np.int8)
    codes = binarize(vecs)
    lut = adc_lut(q, 128)
    qr = rotation(128, ROTATION_SEED) @ q
    signs = np.unpackbits(codes, axis=1).astype(np.float64) * 2 - 1
    want = signs @ qr
    got = np.array([sum(float(lut[j, c[j]]) for j in range(16)) for c in codes])
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-3)


def test_adc_scores_skip_masked_and_excluded_rows() -> None:
    rows = np.array([4, 0, 3, 1, 2], np.int32)
    lists = IvfArrays(
        centroids=np.eye(2, 128, dtype=np.float32),
        offsets=np.array([0, 2, 5], np.int64),
        rows=rows,
        codes=np.zeros((5, 16), np.uint8),
    )
    lut = np.ones((16, 256), np.float32)
    got, scores = adc_scores(lists, np.array([0, 1]), lut, None, 3)
    assert got.tolist() == [4, 0, 1, 2]
    assert np.all(scores == 16)
    mask = np.array([True, False, True, True, False])
    got, _ = adc_scores(lists, np.array([1]), lut, mask, -1)
    assert got.tolist() == [3, 2]  # row 1 masked out


def test_probe_takes_the_nearest_lists_and_more_for_a_candidate_floor() -> None:
    cents = np.zeros((4, 128), np.float32)
    for i in range(4):
        cents[i, i] = 1.0
    lists = IvfArrays(
        cents, np.array([0, 10, 20, 30, 40]), np.zeros(40, np.int32), np.zeros((40, 16), np.uint8)
    )
    q = np.zeros(128, np.float32)
    q[:4] = [0.1, 0.9, 0.5, 0.0]
    assert probe(lists, q, 1).tolist() == [1]
    assert probe(lists, q, 2).tolist() == [1, 2]
    assert probe(lists, q, 1, min_rows=25).tolist() == [0, 1, 2]  # 3 lists hold 30 >= 25
    assert probe(lists, q, 9).tolist() == [0, 1, 2, 3]


def test_written_table_has_calibrated_lists(clustered: Any) -> None:
    t, _ = clustered
    cfg = t.meta["ivf"]
    assert t.ivf is not None
    assert cfg["lists"] == t.ivf.n_lists
    plan = t.ivf_plan
    assert plan == IvfPlan(cfg["nprobe"], cfg["multiple"])
    assert cfg["calibrated"] is True
    measured = cfg["recall_at_10"][f"{plan.nprobe}x{plan.multiple}"]
    assert measured >= 0.95
    # the chosen plan is the cheapest whose recall, less its sampling margin, reaches 0.95
    n_q = 50
    for key, rec in cfg["recall_at_10"].items():
        low = rec - ivf_mod.RECALL_Z * np.sqrt(rec * (1 - rec) / (10 * n_q))
        if low >= 0.95:
            p, m = map(int, key.split("x"))
            assert m >= plan.multiple or p > plan.nprobe


def test_rerank_triages_the_lists_and_keeps_recall(clustered: Any) -> None:
    t, _ = clustered
    rows = np.random.default_rng(11).choice(t.n, 40, replace=False).tolist()
    hits = 0
    for r in rows:
        res = t.search_row(r, k=10, mode="hamming_then_rerank")
        assert res.lists_probed >= t.ivf_plan.nprobe
        assert 0 < res.scanned < t.n
        assert res.reranked == min(res.scanned, t.ivf_plan.multiple * 10)
        assert r not in res.rows.tolist()
        assert np.all(np.diff(res.scores) <= 1e-12)  # best first
        hits += len(set(res.rows.tolist()) & _exact(t, r))
    assert hits / 400 >= 0.93  # calibrated at >= 0.95 on other rows of the same table


def test_rerank_with_a_candidate_floor_covering_the_table_is_exact(clustered: Any) -> None:
    t, _ = clustered
    for r in (0, 17, 12345):
        res = t.search_row(r, k=10, mode="hamming_then_rerank", min_candidates=t.n)
        assert res.lists_probed == t.ivf.n_lists
        assert res.rows.tolist() == t.search_row(r, k=10, mode="cosine").rows.tolist()


def test_masks_dense_use_the_lists_sparse_the_full_triage(clustered: Any) -> None:
    t, _ = clustered
    dense = np.ones(t.n, bool)
    dense[::3] = False
    res = t.search_row(5, k=10, mode="hamming_then_rerank", mask=dense)
    assert res.lists_probed > 0
    assert dense[res.rows].all()
    sparse = np.zeros(t.n, bool)
    sparse[::10] = True
    res = t.search_row(5, k=10, mode="hamming_then_rerank", mask=sparse)
    assert res.lists_probed == 0
    assert sparse[res.rows].all()
    with pytest.raises(InvalidVectorQuery):
        t.search(np.zeros(128, np.int8), k=5, mode="hamming_then_rerank")
    with pytest.raises(InvalidVectorQuery):
        t.search_row(5, k=5, mode="hamming_then_rerank", rerank_multiple=0)


def test_exact_modes_never_use_the_lists(clustered: Any) -> None:
    t, _ = clustered
    assert t.search_row(9, k=10, mode="cosine").scanned == t.n
    assert t.search_row(9, k=10, mode="hamming").scanned == t.n


def test_small_tables_have_no_lists_and_upgrade_adds_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cells, vectors, scales = tessera_like(3_000, seed=2)
    write_table(tmp_path / "t", cells, vectors, scales, META)
    t = KnnTable.open(tmp_path / "t")
    assert t.ivf is None
    assert "ivf" not in t.meta
    assert not list(t.path.glob("ivf_*"))
    assert t.search_row(3, k=5, mode="hamming_then_rerank").lists_probed == 0
    assert upgrade_table(tmp_path / "t") is False
    monkeypatch.setattr(write_mod, "IVF_MIN_ROWS", 2_000)
    assert upgrade_table(tmp_path / "t") is True
    t2 = KnnTable.open(tmp_path / "t")
    assert t2.ivf is not None
    assert t2.meta["rerank_multiple"] == t.meta["rerank_multiple"]
    np.testing.assert_array_equal(np.asarray(t2.vectors), np.asarray(t.vectors))
    assert upgrade_table(tmp_path / "t") is False


def test_uncalibrated_lists_use_the_default_plan(tmp_path: Path) -> None:
    cells, vectors, scales = tessera_like(3_000, seed=4)
    write_table(tmp_path / "t", cells, vectors, scales, META, ivf=True, calibrate=False)
    t = KnnTable.open(tmp_path / "t")
    assert t.ivf_plan == write_mod.UNCALIBRATED_IVF
    assert t.meta["ivf"]["calibrated"] is False


def test_open_refuses_lists_of_the_wrong_shape(clustered: Any, tmp_path: Path) -> None:
    import shutil

    from store.errors import VectorTableError

    t, _ = clustered
    broken = tmp_path / "broken"
    shutil.copytree(t.path, broken)
    np.save(broken / "ivf_rows.npy", np.zeros(5, np.int32))
    with pytest.raises(VectorTableError, match="ivf_rows"):
        KnnTable.open(broken)


def test_lists_forced_on_a_table_of_a_few_rows(tmp_path: Path) -> None:
    cells, vectors, scales = tessera_like(12, seed=6)
    write_table(tmp_path / "t", cells, vectors, scales, META, ivf=True)
    t = KnnTable.open(tmp_path / "t")
    assert t.ivf is not None
    assert t.ivf.n_lists == 12  # never more lists than rows
    res = t.search_row(0, k=5, mode="hamming_then_rerank", min_candidates=t.n)
    assert res.rows.tolist() == t.search_row(0, k=5, mode="cosine").rows.tolist()
    assert len(t.search_row(0, k=5, mode="hamming_then_rerank").rows) <= 5


def test_the_estimate_is_largest_for_the_querys_own_code() -> None:
    """Independent of the formula: the estimate of a code is the rotated query dotted with its
    +-1 bits, so the query's own code (binarize) scores sum |R q|, and no code scores more."""
    rng = np.random.default_rng(8)
    for _ in range(5):
        q = rng.normal(size=128).astype(np.float32)
        lut = adc_lut(q, 128)
        own = binarize(q)
        best = sum(float(lut[j, own[j]]) for j in range(16))
        np.testing.assert_allclose(best, np.abs(rotation(128, ROTATION_SEED) @ q).sum(), rtol=1e-4)
        others = rng.integers(0, 256, (200, 16), dtype=np.uint8)
        assert all(sum(float(lut[j, c[j]]) for j in range(16)) <= best + 1e-3 for c in others)


def test_the_estimate_ranks_better_than_hamming_at_the_same_budget(clustered: Any) -> None:
    """Within the same probed lists and the same number of re-scored candidates, candidates by
    the asymmetric estimate find more of the exact top-10 than candidates by Hamming distance."""
    t, _ = clustered
    assert t.ivf is not None
    hits = {"adc": 0, "hamming": 0}
    for r in np.random.default_rng(12).choice(t.n, 30, replace=False).tolist():
        v = np.asarray(t.vectors[r])
        lists = probe(t.ivf, v, 4)
        rows, scores = adc_scores(t.ivf, lists, adc_lut(v, 128), None, r)
        budget = max(10, rows.size // 20)
        ham = np.bitwise_count(np.asarray(t.bin128)[rows] ^ binarize(v)).sum(axis=1)
        exact = _exact(t, r)
        for name, order in (("adc", np.argsort(-scores)), ("hamming", np.argsort(ham))):
            cand = np.sort(rows[order[:budget]])
            got = t.search(
                v, k=10, mode="cosine", mask=np.isin(np.arange(t.n), cand), exclude_row=r
            )
            hits[name] += len(set(got.rows.tolist()) & exact)
    assert hits["adc"] > hits["hamming"], hits


def test_large_k_probes_enough_lists_for_its_candidates(clustered: Any) -> None:
    t, _ = clustered
    plan = t.ivf_plan
    res = t.search_row(3, k=1000, mode="hamming_then_rerank")
    assert res.multiple == plan.multiple
    assert res.reranked == min(plan.multiple * 1000, t.n - 1)
    assert res.lists_probed > plan.nprobe
    assert len(res.rows) == 1000


def test_mask_and_excluded_row_with_the_list_triage(clustered: Any) -> None:
    t, _ = clustered
    mask = np.ones(t.n, bool)
    mask[1::2] = False
    res = t.search_row(40, k=10, mode="hamming_then_rerank", mask=mask)
    assert res.lists_probed >= t.ivf_plan.nprobe
    assert 40 not in res.rows.tolist()
    assert mask[res.rows].all()
    assert len(res.rows) == 10


def test_damaged_lists_are_typed_errors(clustered: Any, tmp_path: Path) -> None:
    import shutil

    from store.errors import VectorTableError

    t, _ = clustered
    bad_rows = tmp_path / "rows"
    shutil.copytree(t.path, bad_rows)
    rows = np.load(bad_rows / "ivf_rows.npy")
    rows[:] = t.n + 5  # every list position names a row past the table
    np.save(bad_rows / "ivf_rows.npy", rows)
    with pytest.raises(VectorTableError, match="names no row"):
        KnnTable.open(bad_rows).search_row(3, k=10, mode="hamming_then_rerank")
    bad_offsets = tmp_path / "offsets"
    shutil.copytree(t.path, bad_offsets)
    offs = np.load(bad_offsets / "ivf_offsets.npy")
    offs[1] = offs[-1] + 1
    np.save(bad_offsets / "ivf_offsets.npy", offs)
    with pytest.raises(VectorTableError, match="list bounds"):
        KnnTable.open(bad_offsets)
