"""``hamming_then_rerank`` over a table: a triage of candidates, then exact int8 cosine.

Two triages, chosen per query:

- **the inverted lists** of a table that has them (:mod:`store.knn.ivf`): the rows of the
  lists nearest the query, ranked by the asymmetric sign-bit estimate; used unless a mask
  keeps less than :data:`IVF_MIN_MASK` of the rows or the probed lists hold fewer than ``k``
  eligible rows;
- **the full Hamming triage** otherwise: the Hamming distance over every row
  (:meth:`~store.knn.table.KnnTable.hamming_blockwise`).

Either way the best ``multiple * k`` candidates (at least ``min_candidates``) are read with
``pread`` and re-scored by exact cosine; the result says which triage ran
(``lists_probed``), how many rows it looked at and how many it re-scored.
"""

from __future__ import annotations

from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

from store.errors import InvalidVectorQuery
from store.knn import _kernels
from store.knn.ivf import IVF_MIN_MASK, IvfArrays, IvfPlan, list_candidates
from store.knn.scan import (
    MAX_CANDIDATES,
    KnnResult,
    check_k,
    merge_topk,
    prep_mask,
    prep_query,
    read_only,
)

__all__ = ["IVF_MIN_MASK", "RerankTable", "rerank"]


class RerankTable(Protocol):
    """What a rerank reads of a table (a :class:`store.knn.table.KnnTable`)."""

    @property
    def n(self) -> int: ...

    @property
    def d(self) -> int: ...

    @property
    def ivf(self) -> IvfArrays | None: ...

    @property
    def ivf_plan(self) -> IvfPlan | None: ...

    @property
    def rerank_multiple(self) -> int: ...

    def hamming_blockwise(
        self,
        code: npt.NDArray[np.uint8],
        n_keep: int,
        mask: npt.ArrayLike | None,
        exclude_row: int | None,
    ) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.int64], int]: ...

    def read_rows(self, rows: npt.NDArray[np.int64]) -> npt.NDArray[np.int8]: ...


MODE = "hamming_then_rerank"


def rerank(
    table: RerankTable,
    q: npt.NDArray[Any],
    code: npt.NDArray[np.uint8],
    k: int,
    mask: npt.ArrayLike | None,
    exclude_row: int | None,
    rerank_multiple: int | None,
    min_candidates: int,
) -> KnnResult:
    """Neighbours of ``q`` (its sign-bit ``code`` given) by a triage and a cosine rerank.

    Args:
        rerank_multiple: Candidates per neighbour (None: the calibrated one of the triage).
        min_candidates: Fewest candidates re-scored.

    Raises:
        InvalidVectorQuery: a multiple that is not a positive integer, bad k or mask.
    """
    if rerank_multiple is not None and (
        isinstance(rerank_multiple, bool)
        or not isinstance(rerank_multiple, (int, np.integer))
        or rerank_multiple < 1
    ):
        raise InvalidVectorQuery(f"multiple must be a positive integer, got {rerank_multiple!r}")
    k = check_k(k)
    m = prep_mask(mask, table.n)
    plan = table.ivf_plan
    eligible = table.n if m is None else int(np.count_nonzero(m))
    if plan is not None and eligible >= IVF_MIN_MASK * table.n:
        multiple = _effective(plan.multiple, rerank_multiple, min_candidates, k)
        res = _list_triage(table, q, k, m, exclude_row, plan.nprobe, multiple, eligible)
        if res is not None:
            return res
    multiple = _effective(table.rerank_multiple, rerank_multiple, min_candidates, k)
    n_keep = min(MAX_CANDIDATES, multiple * k)
    _, cand, scanned = table.hamming_blockwise(code, n_keep, m, exclude_row)
    return _rescore(table, q, k, np.sort(cand), scanned, multiple, 0)


def _effective(calibrated: int, given: int | None, min_candidates: int, k: int) -> int:
    """Candidates per neighbour: the one given (else the triage's calibrated one), raised to
    ``ceil(min_candidates / k)`` (so ``multiple * k`` candidates, as find_similar always had)."""
    return max(int(calibrated if given is None else given), -(-int(min_candidates) // k))


def _list_triage(
    table: RerankTable,
    q: npt.NDArray[Any],
    k: int,
    m: npt.NDArray[np.bool_] | None,
    exclude_row: int | None,
    nprobe: int,
    multiple: int,
    eligible: int,
) -> KnnResult | None:
    """The triage over the inverted lists; None when they hold fewer than ``k`` eligible rows.

    Probes the ``nprobe`` lists nearest the query, and more until they hold about
    ``multiple * k`` eligible rows (a large ``k``, or a mask: the lists' rows scaled by the
    mask's share), so the candidates are chosen from at least that many rows.
    """
    ivf = table.ivf
    assert ivf is not None
    qf = np.asarray(q, np.float32)
    if not np.all(np.isfinite(qf)) or not np.any(qf):
        raise InvalidVectorQuery("query vector must be finite and not all zeros")
    n_keep = min(MAX_CANDIDATES, multiple * k)
    exclude = -1 if exclude_row is None else int(exclude_row)
    cand, scored, probed = list_candidates(ivf, qf, table.n, n_keep, nprobe, m, eligible, exclude)
    if scored < k:
        return None
    return _rescore(table, q, k, cand, scored, multiple, probed)


def _rescore(
    table: RerankTable,
    q: npt.NDArray[Any],
    k: int,
    cand: npt.NDArray[np.int64],
    scanned: int,
    multiple: int,
    lists_probed: int,
) -> KnnResult:
    """Exact cosine of the candidates (ascending rows), best ``k`` first."""
    if cand.size == 0:
        empty = np.empty(0, np.int64)
        return KnnResult(empty, np.empty(0), scanned, MODE, 0, None, multiple, lists_probed)
    # Read the candidates with pread, not through the mapping: a page fault on a
    # hot file maps the whole (large) page-cache folio around it, so a few
    # thousand scattered rows would make most of the table resident.
    vectors = table.read_rows(cand)
    qi, qf, use_float, qnorm = prep_query(q, table.d)
    # norms computed with the dot products (equal to the stored norms; reading those
    # would fault their pages in)
    out = _kernels.cosine_rows_normed(*map(read_only, (vectors, qi, qf, use_float, k)))
    keys, top = merge_topk(out, k)
    return KnnResult(
        cand[top], keys / qnorm, scanned, MODE, int(cand.size), None, multiple, lists_probed
    )
