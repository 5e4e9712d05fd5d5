"""The k-NN table of one band vintage: a directory of memory-mapped arrays, and its scans.

Layout of a table directory (all arrays ``.npy``, C-contiguous, little-endian)::

    cells.npy    uint64 (N,)     raw cell64 ids, strictly ascending
    vectors.npy  int8   (N, D)   Tessera int8 embedding (D=128; 256 for a two-vintage concat, ...)
    scales.npy   float32 (N,)    per-cell Tessera dequantisation scale (value = int8 * scale)
    norms.npy    float32 (N,)    L2 norm of the int8 row
    bin128.npy   uint8  (N, 16)  sign bits of the rotated vector (only when D == 128)
    bin128w.npy  uint64 (2, N)   the same codes word-major (plane j = word j of every row)
    head_blocks.npy uint8 (B, 16H) the row at its H highest-variance dimensions (H = D / 2),
                                 in blocks of 16 rows (B = ceil(N / 16); codes.head_blocks)
    tailnorm.npy float32 (N,)    L2 norm of the row's other dimensions, rounded up
    ivf_*.npy                    inverted lists of large tables (:mod:`store.knn.ivf`)
    meta.json                    band, tslot, vintage, N, D, rotation_seed, digest,
                                 head_block_dims, head_index, rerank_multiple, ...

:meth:`KnnTable.open` resolves the table's symlink once and memory-maps every
array (``np.load(mmap_mode="r")``; those the scans read in order advised for 2 MB pages:
:func:`store.knn.mapped.map_arrays`): opening a table reads only headers. Tables
written before heads and planes existed, or with row-major heads (before
:data:`store.knn.codes.HEAD_BLOCKS_KEY`), open and scan unpruned
(:func:`store.knn.write.upgrade_table` rewrites them).

:meth:`KnnTable.search` scores as :mod:`store.knn.scan` does, but never holds
a large table resident: large tables are read with ``pread`` into small buffers
or scanned through the mapping region by region, releasing each region after
it. Exact cosine over tables of at least :data:`PRUNE_MIN_ROWS` rows is
pruned: heads first, a Cauchy-Schwarz bound per row, whole rows only where the
bound reaches the current k-th best
(:func:`store.knn._kernels.cosine_scan_pruned`; same answer).
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numba
import numpy as np
import numpy.typing as npt

from store.errors import InvalidVectorQuery, VectorTableError
from store.knn import _kernels
from store.knn._seed import NO_SEED, cosine_seed, hamming_seed
from store.knn.codes import BIN_BYTES, binarize, head_blocks_shape, int8_norms
from store.knn.ivf import IVF_FILES, IvfArrays, IvfPlan
from store.knn.layout import array_names, check_arrays
from store.knn.mapped import (
    check_mapped,
    data_offset,
    file_mapped,
    map_arrays,
    open_ro,
    read_meta,
    release,
)
from store.knn.rerank import rerank
from store.knn.scan import (
    DEFAULT_RERANK_MULTIPLE,
    MAX_CANDIDATES,
    MODES,
    SPARSE_MASK,
    KnnResult,
    check_k,
    cosine_topk,
    hamming_candidates,
    merge_hamming_topk,
    merge_topk,
    n_chunks,
    prep_mask,
    prep_query,
    run_parallel,
)

__all__ = ["FILE_SCAN_BYTES", "PARALLEL_READ_ROWS", "PRUNE_MIN_ROWS", "KnnTable"]

FILE_SCAN_BYTES = 8 << 20
"""Tables with more bytes than this (per scanned array) are scanned in parallel chunks that never
leave the table resident (pread into small buffers, or the mapping released region by region)."""
PRUNE_MIN_ROWS = 1 << 19
"""Tables with at least this many rows are scanned pruned (heads first) when they have heads.

Below, the seed sample and the per-buffer bookkeeping cost more than the bytes
saved. bench/RESULTS.md lists the pruned scan beside the unpruned one
("cosine full scan, no pruning") at 10^6 and 10^7 rows.
"""
PARALLEL_READ_ROWS = 512
"""Rows from which :meth:`KnnTable.read_rows` reads on every thread (a rerank's 2,560+
candidates, the pruned cosine seed's 8,192 sampled rows)."""
_SPLIT_MAX_KEEP = MAX_CANDIDATES + 1
"""Hamming scans keeping fewer rows than this read the word-major planes (all of them).

Measured at 10^7 rows, one thread, 25 paired rounds (bench/HISTORY.md, session 11): for
a rerank's 5,120 candidates the word-major scan costs 0.767 [0.70-0.83] of the row-major
scan's CPU time; for k = 10 it reads about half the bytes."""
_GATHER_ROWS = 1 << 16  # a sparse mask with at most this many rows is gathered by pread
_SEED_MIN_KEEP = 1024
"""Hamming scans keeping at least this many rows (a rerank's candidates) start from a sampled
bound (:func:`store.knn._seed.hamming_seed`) and prefetch the second words too. 10^7 rows,
1 thread, CPU vs neither, 40 paired queries (load 5-6): n_keep 256 1.016 [0.84-1.34],
1,000 0.919 [0.86-1.25], 5,120 0.863 [0.80-0.92] (bench/HISTORY.md, session 14)."""


@dataclass(frozen=True, eq=False)
class KnnTable:
    """One memory-mapped k-NN table (a band vintage). Open with :meth:`open`."""

    path: Path
    """Resolved version directory the arrays were mapped from."""
    meta: dict[str, Any]
    """Contents of ``meta.json``."""
    cells: npt.NDArray[np.uint64]
    """``(N,)`` raw cell64 ids, ascending (memmap)."""
    vectors: npt.NDArray[np.int8]
    """``(N, D)`` int8 rows (memmap)."""
    scales: npt.NDArray[np.float32]
    """``(N,)`` dequantisation scales (memmap)."""
    norms: npt.NDArray[np.float32]
    """``(N,)`` int8 row norms (memmap)."""
    bin128: npt.NDArray[np.uint8] | None = field(default=None)
    """``(N, 16)`` binary codes (memmap), or None when D != 128."""
    head_blocks: npt.NDArray[np.uint8] | None = field(default=None)
    """``(ceil(N / 16), 16 H)`` row heads in blocks (memmap; :func:`store.knn.codes.head_blocks`),
    or None (older tables, small D)."""
    tailnorm: npt.NDArray[np.float32] | None = field(default=None)
    """``(N,)`` tail norms rounded up (memmap), with :attr:`head_blocks`."""
    bin128w: npt.NDArray[np.uint64] | None = field(default=None)
    """``(2, N)`` the binary codes word-major (memmap), or None (older tables, D != 128)."""
    ivf: IvfArrays | None = field(default=None)
    """Inverted lists (memmap; :mod:`store.knn.ivf`), or None (small or older tables)."""

    @classmethod
    def open(cls, directory: str | os.PathLike[str]) -> KnnTable:
        """Memory-map a table written by :func:`store.knn.write.write_table` (reads headers only).

        Raises:
            VectorTableError: missing files, wrong shapes or dtypes.
        """
        for attempt in range(3):
            # Resolve the link once; retry if a concurrent replace removed that version
            # between the resolve and the maps (open maps themselves stay valid).
            path = Path(os.path.realpath(directory))
            try:
                meta = read_meta(path)
                arrays = map_arrays(path, array_names(meta))
                break
            except (OSError, ValueError) as e:
                if attempt == 2 or Path(os.path.realpath(directory)) == path:
                    raise VectorTableError(f"cannot open table {path}: {e}") from e
        check_arrays(path, meta, arrays)
        return cls(
            path=path,
            meta=meta,
            cells=arrays["cells"],
            vectors=arrays["vectors"],
            scales=arrays["scales"],
            norms=arrays["norms"],
            bin128=arrays.get("bin128"),
            head_blocks=arrays.get("head_blocks"),
            tailnorm=arrays.get("tailnorm"),
            bin128w=arrays.get("bin128w"),
            ivf=IvfArrays(*(arrays[f] for f in IVF_FILES)) if meta.get("ivf") else None,
        )

    @property
    def n(self) -> int:
        """Number of rows."""
        return int(self.vectors.shape[0])

    @property
    def d(self) -> int:
        """Vector dimension."""
        return int(self.vectors.shape[1])

    @property
    def rerank_multiple(self) -> int:
        """Candidate multiple of the full Hamming triage (calibrated one if stored)."""
        return int(self.meta.get("rerank_multiple", DEFAULT_RERANK_MULTIPLE))

    @property
    def ivf_plan(self) -> IvfPlan | None:
        """Lists probed and candidate multiple of the list triage (None: no lists)."""
        if self.ivf is None:
            return None
        cfg = self.meta["ivf"]
        return IvfPlan(int(cfg["nprobe"]), int(cfg["multiple"]))

    def row_of(self, cell_raw: int) -> int | None:
        """Row of a raw cell64 id, or None when the table has no vector for it."""
        c = np.uint64(cell_raw)
        try:
            i = int(np.searchsorted(self.cells, c))
            return i if i < self.n and self.cells[i] == c else None
        finally:
            release(self.cells, 0, self.n)

    def rows_of(self, cells_raw: npt.ArrayLike) -> npt.NDArray[np.int64]:
        """Vectorised :meth:`row_of`; -1 where a cell is absent."""
        c = np.asarray(cells_raw, dtype=np.uint64)
        try:
            i = np.searchsorted(self.cells, c)
            ok = i < self.n
            ok[ok] = self.cells[i[ok]] == c[ok]
        finally:
            release(self.cells, 0, self.n)
        return np.where(ok, i, -1).astype(np.int64)

    # Point reads copy out of the mapping and then drop the touched pages: a fault
    # on a hot page-cache file maps the whole large folio around the page (many
    # pages per row read), so a server answering many queries would otherwise grow
    # towards the table's size.

    def vector(self, row: int) -> npt.NDArray[np.int8]:
        """The int8 vector of one row (a copy)."""
        return self._point(self.vectors, row)

    def scale(self, row: int) -> float:
        """The dequantisation scale of one row."""
        return float(self._point(self.scales, row))

    def norm(self, row: int) -> float:
        """The int8 L2 norm of one row."""
        return float(self._point(self.norms, row))

    def cells_at(self, rows: npt.ArrayLike) -> npt.NDArray[np.uint64]:
        """Raw cell64 ids of the given rows (a copy)."""
        r = np.asarray(rows, dtype=np.int64)
        if r.size == 0:
            return np.zeros(0, np.uint64)
        try:
            return np.array(self.cells[r])
        finally:
            release(self.cells, 0, self.n)

    def _point(self, arr: Any, row: int) -> Any:
        r = int(row)
        if not 0 <= r < self.n:
            raise InvalidVectorQuery(f"row {row} outside 0..{self.n - 1}")
        try:
            return np.array(arr[r])
        finally:
            release(arr, r, r + 1)

    def dequantised(self, row: int) -> npt.NDArray[np.float32]:
        """The float32 embedding of one row (int8 * scale)."""
        return self.vector(row).astype(np.float32) * np.float32(self.scale(row))

    def search(
        self,
        query: npt.ArrayLike,
        *,
        k: int = 10,
        mode: str = "cosine",
        mask: npt.ArrayLike | None = None,
        exclude_row: int | None = None,
        rerank_multiple: int | None = None,
        query_code: npt.ArrayLike | None = None,
        min_candidates: int = 0,
    ) -> KnnResult:
        """Nearest rows to a query vector.

        Args:
            query: ``(D,)`` int8 or float vector (inline vectors are float).
            k: 1..:data:`K_MAX`.
            mode: ``cosine``, ``hamming`` or ``hamming_then_rerank``.
            mask: Optional ``(N,)`` bool eligibility (the caller's filter).
            exclude_row: Row never returned.
            rerank_multiple: Candidates per neighbour for the rerank (default: the
                calibrated multiple of the triage used: ``meta["ivf"]`` for the list
                triage, ``meta["rerank_multiple"]`` (else :data:`DEFAULT_RERANK_MULTIPLE`)
                for the full one).
            query_code: The query's 16-byte code if known (default: :func:`binarize`).
            min_candidates: Fewest candidates a rerank re-scores (whatever the multiple).

        ``hamming_then_rerank`` triages a table with inverted lists (:mod:`store.knn.ivf`)
        from the lists nearest the query, unless a mask keeps less than
        :data:`~store.knn.rerank.IVF_MIN_MASK` of the rows or the probed lists hold fewer than ``k``
        eligible rows; otherwise by the Hamming distance over every row.

        Raises:
            InvalidVectorQuery: unknown mode, Hamming on a table without codes,
                wrong dimension, zero query, bad k or mask.
        """
        if mode not in MODES:
            raise InvalidVectorQuery(f"unknown mode {mode!r}; valid: {', '.join(MODES)}")
        if mode == "cosine":
            return self._cosine_blockwise(query, k, mask, exclude_row)
        if self.bin128 is None:
            raise InvalidVectorQuery(
                f"mode {mode!r} needs binary codes; this table (D={self.d}) has none"
            )
        q = np.asarray(query)
        if q.ndim != 1 or q.shape[0] != self.d:
            raise InvalidVectorQuery(f"query must have dimension {self.d}, got shape {q.shape}")
        code = binarize(q) if query_code is None else np.asarray(query_code, np.uint8)
        if mode == "hamming":
            kk = check_k(k)
            keys, top, scanned = self.hamming_blockwise(code, kk, mask, exclude_row)
            bits = self.bin128.shape[1] * 8
            return KnnResult(
                rows=top, scores=1.0 + 2.0 * keys / bits, scanned=scanned, mode="hamming"
            )
        return rerank(self, q, code, k, mask, exclude_row, rerank_multiple, min_candidates)

    def hamming_blockwise(
        self,
        code: npt.NDArray[np.uint8],
        n_keep: int,
        mask: npt.ArrayLike | None,
        exclude_row: int | None,
    ) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.int64], int]:
        """Best ``n_keep`` rows by Hamming distance; ``(-distance, rows, scanned)``, best first.

        Small tables and sparse masks use the serial kernels. A large table is
        scanned in parallel chunks through the mapping, each chunk releasing every
        4 MB region after its scan (:func:`store.knn._kernels.hamming_scan`, or
        :func:`store.knn._kernels.hamming_scan_split` over the word-major planes for
        small ``n_keep``), so the codes never become resident in this process.
        A split scan keeping :data:`_SEED_MIN_KEEP` rows or more (a rerank's
        candidates) starts from a sampled bound (:func:`store.knn._seed.hamming_seed`)
        and is run again without it if it kept fewer than ``n_keep`` rows; the answer
        is the same either way.
        """
        assert self.bin128 is not None
        n = self.n
        m = prep_mask(mask, n)
        if n * BIN_BYTES <= FILE_SCAN_BYTES or (m is not None and m.mean() < SPARSE_MASK):
            try:
                return hamming_candidates(self.bin128, code, n_keep, m, exclude_row)
            finally:
                release(self.bin128, 0, n)
        q = np.ascontiguousarray(np.asarray(code, dtype=np.uint8))
        if q.shape != (BIN_BYTES,):
            raise InvalidVectorQuery(f"query code must have {BIN_BYTES} bytes, got shape {q.shape}")
        marr = m if m is not None else np.ones(1, np.bool_)
        exclude = -1 if exclude_row is None else int(exclude_row)
        # word-major planes: blocks whose first words all miss the limit skip their
        # second words (most blocks for small n_keep, many for rerank candidate lists)
        planes = self.bin128w if n_keep < _SPLIT_MAX_KEEP else None
        check_mapped(
            self.path, {"bin128w": planes} if planes is not None else {"bin128": self.bin128}
        )
        if planes is not None:
            many = n_keep >= _SEED_MIN_KEEP
            seed = hamming_seed(planes, q.view("<u8"), n_keep, m, exclude) if many else NO_SEED
            while True:
                out = run_parallel(
                    _kernels.hamming_scan_split,
                    planes,
                    q.view("<u8"),
                    marr,
                    m is not None,
                    exclude,
                    n_keep,
                    n_chunks(n),
                    file_mapped(planes),
                    seed,
                    many,
                )
                if seed >= NO_SEED or int(out[2].sum()) >= n_keep:
                    break
                seed = NO_SEED  # the sample's bound kept too few rows: scan without it
        else:
            out = run_parallel(
                _kernels.hamming_scan,
                self.bin128.view(np.uint64),
                q.view(np.uint64),
                marr,
                m is not None,
                exclude,
                n_keep,
                n_chunks(n),
                file_mapped(self.bin128),
            )
        keys, rows = merge_hamming_topk(out, n_keep, 8 * BIN_BYTES)
        return keys, rows, n

    def _check_errs(self, errs: npt.NDArray[np.int64], name: str) -> None:
        bad = errs[errs > 0]
        if bad.size:
            raise VectorTableError(f"{self.path}/{name}: short read at row {int(bad.min()) - 1}")

    def read_rows(self, rows: npt.NDArray[np.int64]) -> npt.NDArray[np.int8]:
        """Rows of ``vectors`` read with ``pread`` (runs coalesced, in a compiled loop; from
        :data:`PARALLEL_READ_ROWS` rows on, on every thread: a scattered row's pread is ~1 µs
        of syscall, most of a rerank's time)."""
        r = np.ascontiguousarray(rows, np.int64)
        with open_ro(self.path / "vectors.npy") as fd:
            if r.size >= PARALLEL_READ_ROWS:
                nchunk = 2 * max(numba.get_num_threads(), 1)
                out, bad = run_parallel(
                    _kernels.pread_rows_parallel, fd, r, self.d, data_offset(self.vectors), nchunk
                )
            else:
                out = np.empty((r.size, self.d), dtype=np.int8)
                bad = _kernels.pread_rows(fd, r, self.d, data_offset(self.vectors), out)
        if bad >= 0:
            raise VectorTableError(f"{self.path}/vectors.npy: short read at row {int(rows[bad])}")
        return out

    def _cosine_blockwise(
        self, query: npt.ArrayLike, k: int, mask: npt.ArrayLike | None, exclude_row: int | None
    ) -> KnnResult:
        """Exact cosine over the whole table, never holding it resident.

        A memory-mapped scan would leave every page it touched resident in the
        process (the whole table, for a full scan), and dropping pages after each
        block costs a page fault per page on every query. Instead a large table is
        read with ``pread`` into small per-chunk buffers that stay in cache
        (:func:`store.knn._kernels.cosine_scan_file`), in parallel chunks; the page
        cache serves repeated scans. Small tables (<= :data:`FILE_SCAN_BYTES`) are
        scanned through the mapping. A sparse mask (< 25 % eligible, at most
        2^16 rows) reads only the eligible rows. Results equal one whole-table
        :func:`cosine_topk` scan (ties by lower row).
        """
        k = check_k(k)
        n, d = self.n, self.d
        if n * (d + 4) <= FILE_SCAN_BYTES:
            try:
                return cosine_topk(
                    self.vectors, self.norms, query, k, mask=mask, exclude_row=exclude_row
                )
            finally:
                release(self.vectors, 0, n)
        qi, qf, use_float, qnorm = prep_query(query, d)
        m = prep_mask(mask, n)
        exclude = -1 if exclude_row is None else int(exclude_row)
        if m is not None and m.mean() < SPARSE_MASK:
            cand = np.flatnonzero(m).astype(np.int64)
            cand = cand[cand != exclude]
            if cand.size <= _GATHER_ROWS:
                vectors = self.read_rows(cand)
                part = cosine_topk(vectors, int8_norms(vectors), query, k)
                return KnnResult(cand[part.rows], part.scores, int(cand.size), "cosine")
        marr = m if m is not None else np.ones(1, np.bool_)
        if (
            self.head_blocks is not None
            and self.tailnorm is not None
            and not use_float
            and self.n >= PRUNE_MIN_ROWS
        ):
            return self._cosine_pruned(qi, qnorm, k, marr, m is not None, exclude)
        with open_ro(self.path / "vectors.npy") as fdv, open_ro(self.path / "norms.npy") as fdn:
            out = run_parallel(
                _kernels.cosine_scan_file,
                fdv,
                data_offset(self.vectors),
                fdn,
                data_offset(self.norms),
                n,
                d,
                qi,
                qf,
                use_float,
                marr,
                m is not None,
                exclude,
                k,
                n_chunks(n),
            )
        self._check_errs(out[3], "vectors.npy or norms.npy")
        keys, top = merge_topk(out[:3], k)
        return KnnResult(rows=top, scores=keys / qnorm, scanned=n, mode="cosine")

    def _cosine_pruned(
        self,
        qi: npt.NDArray[np.int16],
        qnorm: float,
        k: int,
        mask: npt.NDArray[np.bool_],
        use_mask: bool,
        exclude: int,
    ) -> KnnResult:
        """Exact cosine from the heads (:func:`store.knn._kernels.cosine_scan_pruned`)."""
        assert self.head_blocks is not None
        assert self.tailnorm is not None
        head_index = np.asarray(self.meta["head_index"], np.int64)
        tail = np.ones(self.d, bool)
        tail[head_index] = False
        qt = qi[tail].astype(np.float64)
        qtn = math.nextafter(math.sqrt(float(np.dot(qt, qt))), math.inf)
        h = int(head_index.size)
        if self.head_blocks.dtype != np.uint8 or self.head_blocks.shape != head_blocks_shape(
            self.n, h
        ):
            raise VectorTableError(
                f"{self.path}: heads are not {head_blocks_shape(self.n, h)} blocks"
            )
        check_mapped(
            self.path,
            {"head_blocks": self.head_blocks, "norms": self.norms, "tailnorm": self.tailnorm},
        )
        with open_ro(self.path / "vectors.npy") as fdv:
            out = run_parallel(
                _kernels.cosine_scan_pruned,
                self.head_blocks,
                self.norms,
                self.tailnorm,
                fdv,
                data_offset(self.vectors),
                self.n,
                h,
                self.d,
                np.ascontiguousarray(qi[head_index]),
                qi,
                qtn,
                mask,
                use_mask,
                exclude,
                k,
                n_chunks(self.n),
                cosine_seed(self, qi, k, mask, use_mask, exclude),
                file_mapped(self.head_blocks, self.norms, self.tailnorm),
            )
        self._check_errs(out[3], "head_blocks.npy, norms.npy, tailnorm.npy or vectors.npy")
        keys, top = merge_topk(out[:3], k)
        return KnnResult(
            rows=top,
            scores=keys / qnorm,
            scanned=self.n,
            mode="cosine",
            rows_read_whole=int(out[4].sum()),
        )

    def search_row(self, row: int, **kwargs: Any) -> KnnResult:
        """Neighbours of a stored row (the row itself is excluded).

        Uses the stored int8 vector (and stored code for Hamming, which equals
        :func:`binarize` of the row). Keyword arguments as in :meth:`search`.
        """
        if not 0 <= int(row) < self.n:
            raise InvalidVectorQuery(f"row {row} outside 0..{self.n - 1}")
        r = int(row)
        code = None if self.bin128 is None else self._point(self.bin128, r)
        return self.search(self.vector(r), exclude_row=r, query_code=code, **kwargs)
