"""Search from examples: find_similar's positive and negative keys and its ``within`` area.

An analyst clicks a few examples, gets more, rejects some and repeats. The query
is a Rocchio-style centroid of unit vectors::

    q = mean_i(p_i / |p_i|) - NEGATIVE_WEIGHT * mean_j(n_j / |n_j|)

over the positives ``p`` (the key and ``positives``) and the negatives ``n``;
candidates are scored by their cosine to ``q`` (the Hamming modes by ``q``'s sign
bits, like an inline key). Unit vectors first, so each example pulls equally
whatever its int8 scale. The examples themselves are never returned.

``within`` (a bbox or a GeoJSON Polygon/MultiPolygon, area_over_time's checks and
caps) keeps only candidates whose cell centre lies inside.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from api.errors import InvalidArgument
from api.queries._common import CellRef, parse_cell_arg
from api.queries.area_geometry import parse_area
from store import address

if TYPE_CHECKING:
    from store.knn.table import KnnTable

__all__ = [
    "EXAMPLE_FORMULA",
    "MAX_EXAMPLE_KEYS",
    "NEGATIVE_WEIGHT",
    "example_cells",
    "example_query",
    "within_mask",
]

MAX_EXAMPLE_KEYS = 16
"""Most positive keys (the key included) and, separately, most negative keys per call."""
NEGATIVE_WEIGHT = 0.5
"""How hard the negatives' mean pulls the query away (Rocchio's gamma over beta)."""
EXAMPLE_FORMULA = (
    f"q = mean(p/|p| over the key and positives) - {NEGATIVE_WEIGHT} * mean(n/|n| over the "
    "negatives); score = cosine(candidate, q) (hamming modes: q's sign bits); examples excluded"
)
"""The scoring rule, stated in the answer."""


def example_cells(
    positives: list[str] | None, negatives: list[str] | None
) -> tuple[list[CellRef], list[CellRef]]:
    """The extra positive and the negative example cells, parsed and capped.

    Raises:
        InvalidArgument: ``too_many_keys`` over :data:`MAX_EXAMPLE_KEYS`, ``invalid_cell``.
    """
    pos = list(positives or [])
    neg = list(negatives or [])
    n_pos = len(pos) + 1  # the key is the first positive
    if n_pos > MAX_EXAMPLE_KEYS or len(neg) > MAX_EXAMPLE_KEYS:
        raise InvalidArgument(
            f"{n_pos} positive and {len(neg)} negative keys; at most {MAX_EXAMPLE_KEYS} of each "
            "(the key counts as a positive)",
            code="too_many_keys",
            details={"max_keys": MAX_EXAMPLE_KEYS, "positives": n_pos, "negatives": len(neg)},
        )
    p = [parse_cell_arg(c, f"positives[{i}]") for i, c in enumerate(pos)]
    n = [parse_cell_arg(c, f"negatives[{i}]") for i, c in enumerate(neg)]
    clash = {c.cell for c in p} & {c.cell for c in n}
    if clash:
        raise InvalidArgument(
            f"cells both positive and negative: {sorted(clash)[:5]}", code="invalid_argument"
        )
    return p, n


def _unit(v: npt.NDArray[Any]) -> npt.NDArray[np.float64]:
    f = np.asarray(v, np.float64)
    norm = float(np.linalg.norm(f))
    if norm == 0.0:
        raise InvalidArgument("an example's vector is all zeros", code="invalid_vector")
    return f / norm


def example_query(
    positives: list[npt.NDArray[Any]], negatives: list[npt.NDArray[Any]]
) -> npt.NDArray[np.float64]:
    """The query vector of :data:`EXAMPLE_FORMULA`.

    Raises:
        InvalidArgument: ``invalid_vector`` when a vector or the query is zero.
    """
    q = np.mean([_unit(v) for v in positives], axis=0)
    if negatives:
        q = q - NEGATIVE_WEIGHT * np.mean([_unit(v) for v in negatives], axis=0)
    if not np.any(q):
        raise InvalidArgument("the negatives cancel the positives exactly", code="invalid_vector")
    return np.asarray(q, np.float64)


def within_mask(table: KnnTable, within: Any) -> tuple[npt.NDArray[np.bool_], dict[str, Any]]:
    """Rows of ``table`` whose cell centre lies inside ``within`` (a bbox or a polygon).

    Raises:
        InvalidArgument: ``invalid_geometry`` / ``area_too_large`` (area_over_time's checks).
    """
    if isinstance(within, dict) and "type" in within:
        area = parse_area("within", within, None)
    else:
        area = parse_area("within", None, within)
    inside = area.mask()
    y0, y1, x0, x1 = area.box
    lat_q, lng_q = address.raw_to_q_array(np.asarray(table.cells))
    ys = np.asarray(lat_q, np.int64)
    xs = np.asarray(lng_q, np.int64)
    keep = (ys >= y0) & (ys < y1) & (xs >= x0) & (xs < x1)
    idx = np.flatnonzero(keep)
    keep[idx] = inside[ys[idx] - y0, xs[idx] - x0]
    info = {"area_km2": area.km2, "n_cells": area.n_cells, "eligible": int(keep.sum())}
    return keep, info
