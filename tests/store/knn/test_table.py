"""KnnTable: mapped tables, file and pruned scans equal to the array scans, concurrency."""

from __future__ import annotations

import mmap
import os
import threading

import numpy as np
import pytest

from bench.data import tessera_like
from store import knn as V
from store.errors import InvalidVectorQuery, VectorTableError
from store.knn import mapped as knn_mapped
from store.knn import scan as knn_scan
from store.knn import table as knn_table
from store.knn.mapped import advise_huge

META = {"band": "geotessera", "tslot": 54, "vintage": 2024}


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


def _random_table(tmp_path, n: int, *, seed: int):
    """A written and reopened table of ``n`` random 128-D int8 rows (no rerank calibration)."""

    vecs = np.random.default_rng(seed).integers(-127, 128, size=(n, 128), dtype=np.int8)
    cells = np.arange(n, dtype=np.uint64) + np.uint64(1 << 60)
    meta = {"band": "geotessera", "tslot": 54}
    V.write_table(tmp_path / "t", cells, vecs, np.ones(n, np.float32), meta, calibrate=False)
    return V.KnnTable.open(tmp_path / "t"), vecs


def test_file_scans_equal_the_mapped_scans(tmp_path, monkeypatch) -> None:
    """Large tables are scanned from the files (pread into small buffers, several per
    chunk, heap carried over); results equal the in-memory kernels, masks and
    exclusions included, and a file cut short is a typed error, not garbage."""

    n = 40_000  # 5.3 MB of rows (> 20 pread buffers), 640 kB of codes (3 buffers)
    table, vecs = _random_table(tmp_path, n, seed=7)
    monkeypatch.setattr(knn_table, "FILE_SCAN_BYTES", 0)
    mask = np.ones(n, bool)
    mask[::3] = False
    sparse = np.zeros(n, bool)
    sparse[::50] = True
    for m in (None, mask, sparse):
        for ex in (None, 10, n - 1):
            got = table.search(vecs[10], k=25, exclude_row=ex, mask=m)
            ref = V.cosine_topk(table.vectors, table.norms, vecs[10], 25, exclude_row=ex, mask=m)
            np.testing.assert_array_equal(got.rows, ref.rows)
            np.testing.assert_allclose(got.scores, ref.scores)
            if ex is not None:
                assert ex not in got.rows
            hb = table.search(vecs[10], k=25, mode="hamming", exclude_row=ex, mask=m)
            hr = V.hamming_topk(table.bin128, V.binarize(vecs[10]), 25, exclude_row=ex, mask=m)
            np.testing.assert_array_equal(hb.rows, hr.rows)
            np.testing.assert_allclose(hb.scores, hr.scores)
    # a float query that is not an int8 multiple takes the float path through the file
    qf = vecs[3].astype(np.float32) + 0.37
    np.testing.assert_array_equal(
        table.search(qf, k=7).rows, V.cosine_topk(table.vectors, table.norms, qf, 7).rows
    )
    # many Hamming candidates (the rerank's scan) through the file
    hb = table.search(vecs[4], k=10, mode="hamming_then_rerank", rerank_multiple=300)
    hr = V.hamming_then_rerank(table.vectors, table.norms, table.bin128, vecs[4], 10, multiple=300)
    np.testing.assert_array_equal(hb.rows, hr.rows)
    # truncate the file under the open table: a short read is reported, not scored
    with open(table.path / "vectors.npy", "r+b") as f:
        f.truncate(int(table.vectors.offset) + 1000 * 128)
    with pytest.raises(VectorTableError, match="short read"):
        table.search(vecs[10], k=5)


@pytest.mark.parametrize(("n", "d"), [(30_005, 128), (20_011, 64)])
def test_pruned_cosine_equals_the_full_scan(tmp_path, monkeypatch, n, d) -> None:
    """Tables carry row heads; the pruned scan (head bound, whole rows read only for
    rows that can enter) returns exactly the full scan's answer: clustered data,
    masks, exclusion, exact duplicates (ties by row), zero rows, a query with its
    energy spread evenly (little pruning), and k larger than the eligible rows. Both
    the 64-dimension heads of the SIMD block (D = 128) and the generic block (D = 64:
    32-dimension heads); row counts that leave the last head block part-filled, and
    queries whose own row (ranked first) is the table's last or lies inside a chunk."""

    cells, vecs, scales = tessera_like(n, d, 12, seed=5)
    vecs = vecs.copy()
    vecs[100:110] = vecs[7]  # exact duplicates of row 7: ties resolved by row
    vecs[200] = 0  # a zero row scores 0
    V.write_table(
        tmp_path / "t", cells, vecs, scales, {"band": "geotessera", "tslot": 54}, calibrate=False
    )
    table = V.KnnTable.open(tmp_path / "t")
    assert table.head_blocks is not None
    h = V.head_dims(d)
    assert table.head_blocks.shape == (-(-n // 16), 16 * h)
    # the blocks hold each row's values at the head dimensions
    some = np.array([0, 1, 15, 16, 17, 12_345, n - 1])
    np.testing.assert_array_equal(
        V.head_values(table.head_blocks, some, h), vecs[some][:, table.meta["head_index"]]
    )
    # tail norms bound the true ones from above
    tail = np.setdiff1d(np.arange(d), table.meta["head_index"])
    true_tail = np.linalg.norm(vecs[:, tail].astype(np.float64), axis=1)
    assert np.all(np.asarray(table.tailnorm, np.float64) >= true_tail)
    monkeypatch.setattr(knn_table, "FILE_SCAN_BYTES", 0)
    monkeypatch.setattr(knn_table, "PRUNE_MIN_ROWS", 0)
    # many chunks: their row bounds fall inside head blocks (the scan starts each on one)
    chunk_rows = knn_scan._CHUNK_ROWS
    monkeypatch.setattr(knn_scan, "_CHUNK_ROWS", 1000)
    assert knn_scan.n_chunks(n) > 2
    assert n // knn_scan.n_chunks(n) % 16  # the first chunk ends inside a block
    mask = np.ones(n, bool)
    mask[1::2] = False
    flat = np.full(d, 9, np.int8)
    cases = [(vecs[7], 7), (vecs[7], None), (vecs[12_345], 12_345), (flat, None)]
    cases += [(vecs[n - 1], None), (vecs[n // 3 + 5], None)]  # the last row; mid-chunk
    for q, ex in cases:
        for m in (None, mask):
            for k in (1, 10, 60):
                got = table.search(q, k=k, exclude_row=ex, mask=m)
                ref = V.cosine_topk(table.vectors, table.norms, q, k, exclude_row=ex, mask=m)
                np.testing.assert_array_equal(got.rows, ref.rows)
                np.testing.assert_array_equal(got.scores, ref.scores)
                assert got.rows_read_whole is not None
    monkeypatch.setattr(knn_scan, "_CHUNK_ROWS", chunk_rows)
    # ties: the duplicates of row 7 come back in row order right after row 7
    got = table.search(vecs[7], k=11)
    assert got.rows.tolist()[:11] == [7, *range(100, 110)]
    # most rows are pruned for a clustered query (fewer with 32-dimension heads)
    assert table.search(vecs[12_345], k=10).rows_read_whole < (n // 4 if d == 128 else n * 3 // 4)
    # k beyond the eligible rows: all of them, ranked
    few = np.zeros(n, bool)
    few[[3, 4, 5]] = True
    monkeypatch.setattr(knn_table, "SPARSE_MASK", 0.0)  # force the scan, not the gather
    assert sorted(table.search(vecs[3], k=50, mask=few).rows.tolist()) == [3, 4, 5]
    # a float query that is no int8 multiple takes the unpruned file scan
    qf = vecs[9].astype(np.float32) + 0.3
    np.testing.assert_array_equal(
        table.search(qf, k=5).rows, V.cosine_topk(table.vectors, table.norms, qf, 5).rows
    )
    # heads are read in place: a truncated file is refused before any page is touched
    with open(table.path / "head_blocks.npy", "r+b") as f:
        f.truncate(int(table.head_blocks.offset) + 100 * table.head_blocks.shape[1])
    with pytest.raises(VectorTableError, match="truncated"):
        table.search(vecs[7], k=5)


def test_read_rows_on_every_thread_equals_the_rows_and_reports_short_reads(tmp_path) -> None:
    """From PARALLEL_READ_ROWS rows on, rows are read in parallel chunks: runs of
    consecutive rows that straddle a chunk's bounds, repeated and scattered rows come back
    as stored; a file cut under the open table is a short read at the first lost row."""
    n = 3000
    table, vecs = _random_table(tmp_path, n, seed=12)
    rng = np.random.default_rng(0)
    rows = np.sort(
        np.concatenate([rng.choice(n, 700, replace=False), np.arange(1000, 1400), [5, 5]])
    ).astype(np.int64)
    assert rows.size >= knn_table.PARALLEL_READ_ROWS
    np.testing.assert_array_equal(table.read_rows(rows), vecs[rows])
    with open(table.path / "vectors.npy", "r+b") as f:
        f.truncate(int(table.vectors.offset) + 2500 * 128)
    with pytest.raises(VectorTableError, match=f"short read at row {rows[rows >= 2500][0]}"):
        table.read_rows(rows)


def test_table_rerank_reads_rows_with_pread_and_matches_the_mapped_path(tmp_path) -> None:

    n = 3000
    table, vecs = _random_table(tmp_path, n, seed=11)
    rows = np.array([0, 1, 2, 57, 2999], dtype=np.int64)
    np.testing.assert_array_equal(table.read_rows(rows), vecs[rows])
    for m in (1, 8, 64):
        got = table.search(
            vecs[5], k=10, mode="hamming_then_rerank", rerank_multiple=m, exclude_row=5
        )
        ref = V.hamming_then_rerank(
            table.vectors, table.norms, table.bin128, vecs[5], 10, multiple=m, exclude_row=5
        )
        np.testing.assert_array_equal(got.rows, ref.rows)
        np.testing.assert_allclose(got.scores, ref.scores)
        assert got.reranked == ref.reranked
        assert 5 not in got.rows


def test_word_major_hamming_equals_the_row_major_scan(tmp_path, monkeypatch) -> None:
    """Tables carry the codes word-major too; the split scan (first word bounds the
    distance, second words read only for buffers with a passing row) returns the
    row-major scan's answer for small and large n_keep, masks, exclusion and a
    far query, and a short plane file is a typed error."""

    cells, vecs, scales = tessera_like(60_000, 128, 12, seed=9)
    V.write_table(
        tmp_path / "t", cells, vecs, scales, {"band": "geotessera", "tslot": 54}, calibrate=False
    )
    table = V.KnnTable.open(tmp_path / "t")
    assert table.bin128w is not None
    np.testing.assert_array_equal(np.asarray(table.bin128w).T, table.bin128.view(np.uint64))
    monkeypatch.setattr(knn_table, "FILE_SCAN_BYTES", 0)
    mask = np.ones(60_000, bool)
    mask[::5] = False
    for split_up_to in (knn_table._SPLIT_MAX_KEEP, 10**9):  # default policy; the split scan for all
        monkeypatch.setattr(knn_table, "_SPLIT_MAX_KEEP", split_up_to)
        for row in (3, 31_337):
            code = table.bin128[row]
            for m in (None, mask):
                for keep in (1, 10, 63, 700, 5000):
                    got = table.hamming_blockwise(code, keep, m, row)
                    ref = knn_scan.hamming_candidates(table.bin128, code, keep, m, row)
                    np.testing.assert_array_equal(got[1], ref[1])
                    np.testing.assert_array_equal(got[0], ref[0])
    monkeypatch.undo()
    monkeypatch.setattr(knn_table, "FILE_SCAN_BYTES", 0)
    # a query far from every row (most rows pass the first word)
    far = np.bitwise_not(table.bin128[3])
    got = table.hamming_blockwise(far, 300, None, None)
    ref = knn_scan.hamming_candidates(table.bin128, far, 300, None, None)
    np.testing.assert_array_equal(got[1], ref[1])
    with open(table.path / "bin128w.npy", "r+b") as f:
        f.truncate(int(table.bin128w.offset) + 8 * 60_000 + 800)
    with pytest.raises(VectorTableError, match="truncated"):
        table.hamming_blockwise(table.bin128[3], 10, None, None)


def test_concurrent_scans_of_one_table_agree_with_sequential_ones(tmp_path, monkeypatch) -> None:
    """Server threads scan one table at once: parallel kernels run side by side and each
    releases the regions it read while others may be reading them (they fault back in)."""

    cells, vecs, scales = tessera_like(40_000, 128, 8, seed=4)
    V.write_table(
        tmp_path / "t", cells, vecs, scales, {"band": "geotessera", "tslot": 54}, calibrate=False
    )
    table = V.KnnTable.open(tmp_path / "t")
    monkeypatch.setattr(knn_table, "FILE_SCAN_BYTES", 0)
    monkeypatch.setattr(knn_table, "PRUNE_MIN_ROWS", 0)
    jobs = [(row, mode) for row in (5, 999, 20_000, 39_999) for mode in V.MODES]
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

    cells, vecs, scales = tessera_like(40_000, 128, 8, seed=6)
    V.write_table(
        tmp_path / "t", cells, vecs, scales, {"band": "geotessera", "tslot": 54}, calibrate=False
    )
    mapped = V.KnnTable.open(tmp_path / "t")
    copies = {
        name: np.array(getattr(mapped, name))
        for name in ("head_blocks", "norms", "tailnorm", "bin128", "bin128w")
    }
    mem = dataclasses.replace(mapped, **{k: v.copy() for k, v in copies.items()})
    assert knn_mapped.file_mapped(mapped.head_blocks, mapped.norms, mapped.tailnorm)
    assert not knn_mapped.file_mapped(mem.head_blocks)
    monkeypatch.setattr(knn_table, "FILE_SCAN_BYTES", 0)
    monkeypatch.setattr(knn_table, "PRUNE_MIN_ROWS", 0)
    for mode in V.MODES:
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
        cwd=here.parents[3],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "1 passed" in proc.stdout


def _mapping_field(arr: np.ndarray, name: str) -> list[str]:
    """The values of field ``name`` of the mapping holding ``arr`` (its ``/proc/self/smaps`` entry)."""
    start = arr.ctypes.data
    inside = False
    with open("/proc/self/smaps") as f_:
        smaps = f_.read().splitlines()
    for line in smaps:
        f = line.split()
        if "-" in f[0] and len(f) >= 5:
            lo, hi = (int(v, 16) for v in f[0].split("-"))
            inside = lo <= start < hi
        elif inside and f[0] == f"{name}:":
            return f[1:]
    raise AssertionError("no mapping holds the array")


def _mapping_rss_kb(arr: np.ndarray) -> int:
    """Resident kB of the mapping holding ``arr``."""
    return int(_mapping_field(arr, "Rss")[0])


@pytest.mark.skipif(
    not os.path.exists("/sys/kernel/mm/transparent_hugepage") or not hasattr(mmap, "MADV_HUGEPAGE"),
    reason="needs transparent huge pages (Linux)",
)
def test_open_advises_the_scanned_mappings_for_huge_pages(tmp_path) -> None:
    """The arrays the scans read in order lie in mappings advised for 2 MB pages (``hg`` in
    their smaps VmFlags), so the pages a scan faults in come in 2 MB folios; the arrays read
    a row at a time (cell ids, rows, scales) are not (a 2 MB read-ahead per fault)."""
    cells, vecs, scales = tessera_like(3000, 128, 8, seed=3)
    V.write_table(
        tmp_path / "t", cells, vecs, scales, {"band": "geotessera", "tslot": 54}, calibrate=False
    )
    table = V.KnnTable.open(tmp_path / "t")
    for name in knn_mapped.SCANNED:
        assert getattr(table, name) is not None
        assert "hg" in _mapping_field(getattr(table, name), "VmFlags"), name
    for name in ("cells", "vectors", "scales"):
        assert "hg" not in _mapping_field(getattr(table, name), "VmFlags"), name
    assert advise_huge(np.zeros(4)) is False  # not a mapping: nothing asked


@pytest.mark.skipif(not os.path.exists("/proc/self/smaps"), reason="needs Linux smaps")
def test_mapped_scans_leave_nothing_of_the_table_resident(tmp_path, monkeypatch) -> None:
    """The scans release what they read in whole 2 MB spans (no huge mapping split) and
    round the last release of each chunk up, so no span stays resident after a query: the
    pruned cosine scan, the word-major Hamming scan, a rerank's triage (its sampled seed
    first) and the row-major Hamming scan of a very long candidate list."""
    cells, vecs, scales = tessera_like(140_000, 128, 8, seed=8)  # 9 MB of heads
    V.write_table(
        tmp_path / "t", cells, vecs, scales, {"band": "geotessera", "tslot": 54}, calibrate=False
    )
    table = V.KnnTable.open(tmp_path / "t")
    monkeypatch.setattr(knn_table, "FILE_SCAN_BYTES", 0)
    monkeypatch.setattr(knn_table, "PRUNE_MIN_ROWS", 0)
    assert table.head_blocks is not None
    assert table.bin128 is not None
    assert table.bin128w is not None
    arrays = (table.head_blocks, table.norms, table.tailnorm, table.bin128, table.bin128w)
    for arr in arrays:
        np.asarray(arr).view(np.uint8).sum()  # everything resident before
        assert _mapping_rss_kb(arr) > 100
    table.search_row(7, k=10, mode="cosine")
    table.search_row(7, k=10, mode="hamming")
    table.search_row(7, k=10, mode="hamming_then_rerank", min_candidates=4096)
    long = table.hamming_blockwise(table.bin128[7], knn_table._SPLIT_MAX_KEEP, None, None)
    assert long[1].size == knn_table._SPLIT_MAX_KEEP  # the row-major scan (long lists) ran
    for arr in arrays:
        assert _mapping_rss_kb(arr) == 0


def test_release_stays_inside_the_arrays_pages() -> None:
    """A release rounds out to 2 MB spans but never past the array's own first and last
    page: on anonymous memory around it (where MADV_DONTNEED would zero the data) every
    byte outside those pages is kept."""
    from numba import njit

    from store.knn._prims import PAGE, _drop

    @njit
    def drop(a, lo, hi, final):  # type: ignore[no-untyped-def]
        _drop(a, lo, hi, final)

    big = np.ones(8 << 20, np.uint8)
    off = (-big.ctypes.data) % (2 << 20)  # a 2 MB boundary inside the buffer
    lo_b, hi_b = off + (1 << 20) + 100, off + (3 << 20) + 50
    view = big[lo_b:hi_b]
    drop(view, 0, view.shape[0], True)
    first = (view.ctypes.data // PAGE) * PAGE - big.ctypes.data
    last = -(-(view.ctypes.data + view.shape[0]) // PAGE) * PAGE - big.ctypes.data
    assert big[:first].all()
    assert big[last:].all()
    assert not big[first:last].any()  # the whole range was released (zeroed: anonymous)
    big[:] = 1
    drop(view, 0, view.shape[0] // 2, False)  # mid-scan: only whole 2 MB spans up to there
    assert big[:first].all()
    assert big[off + (2 << 20) :].all()
    assert not big[first : off + (2 << 20)].any()
