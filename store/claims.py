"""The claim algebra: ``{band, op, value, tslot? | window?, agg?}`` evaluated over facts.

Pure and vectorised: :func:`evaluate` takes a ``(t, n)`` value matrix (NaN =
no fact) for ``n`` cells and returns one verdict per cell, so the same code
answers ``confirm`` (one cell) and filters ``find_similar`` candidates
(thousands of cells).

Semantics
---------
* Facts considered: those at ``tslot`` (if given), else those with
  ``t0 <= tslot <= t1`` (if ``window``), else the cell's latest fact.
* ``exists`` is true when at least one fact is considered, ``absent`` when
  none; neither is ever unknown.
* Other ops with no fact considered: **unknown** (a filter drops such cells).
* ``agg`` (default ``any``): ``any`` / ``all`` combine the op applied to each
  fact; ``mean`` / ``min`` / ``max`` aggregate the values first and apply the
  op once.
* ``eq`` / ``ne`` / ``in`` / ``ni`` compare with an absolute tolerance of
  :data:`EQ_TOLERANCE` (stored values are float32).
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from store.errors import InvalidClaim, InvalidWindow

__all__ = [
    "AGGS",
    "EQ_TOLERANCE",
    "MAX_IN_VALUES",
    "OPS",
    "ClaimResult",
    "ParsedClaim",
    "evaluate",
    "parse_claim",
]

OPS = ("eq", "ne", "lt", "le", "gt", "ge", "in", "ni", "exists", "absent")
"""Valid operators."""
AGGS = ("any", "all", "mean", "min", "max")
"""Valid aggregations."""
EQ_TOLERANCE = 1e-6
"""Absolute tolerance of eq / ne / in / ni."""
MAX_IN_VALUES = 1000
"""Longest list accepted by in / ni."""

TRUE, FALSE, UNKNOWN = 1, 0, -1


@dataclass(frozen=True)
class ParsedClaim:
    """A validated claim."""

    band: str
    """Band name (canonicalised by the caller)."""
    op: str
    """Operator."""
    value: float | tuple[float, ...] | None
    """Number, tuple of numbers (in/ni) or None (exists/absent)."""
    tslot: int | None = None
    """Single tslot."""
    window: tuple[int, int] | None = None
    """Inclusive tslot window."""
    agg: str = "any"
    """Aggregation."""

    def as_dict(self) -> dict[str, Any]:
        """JSON form (the claim as evaluated)."""
        value: Any = list(self.value) if isinstance(self.value, tuple) else self.value
        return {
            "band": self.band,
            "op": self.op,
            "value": value,
            "tslot": self.tslot,
            "window": list(self.window) if self.window else None,
            "agg": self.agg,
        }


@dataclass(frozen=True, eq=False)
class ClaimResult:
    """Verdicts for ``n`` cells."""

    verdict: npt.NDArray[np.int8]
    """``(n,)``: 1 true, 0 false, -1 unknown."""
    used: npt.NDArray[np.bool_]
    """``(t, n)``: the facts each verdict rests on."""
    aggregate: npt.NDArray[np.float64]
    """``(n,)`` aggregated value for mean/min/max (NaN otherwise or when unknown)."""


def _is_int(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def _number(x: Any, what: str) -> float:
    if isinstance(x, bool) or not isinstance(x, int | float) or not math.isfinite(float(x)):
        raise InvalidClaim(f"{what} must be a finite number, got {x!r}")
    return float(x)


def parse_claim(raw: Mapping[str, Any], band: str) -> ParsedClaim:
    """Validate a claim's op, value, tslot, window and agg.

    Args:
        raw: The claim fields (``op``, ``value``, ``tslot``, ``window``, ``agg``).
        band: The claim's band, already canonicalised by the caller.

    Returns:
        The parsed claim.

    Raises:
        InvalidClaim: a bad op / value / agg / tslot (code ``invalid_claim``).
        InvalidWindow: a window that is not two increasing ints (code ``invalid_window``).
    """
    op = raw.get("op")
    if op not in OPS:
        raise InvalidClaim(f"unknown claim op {op!r}; valid: {', '.join(OPS)}")
    agg = raw.get("agg") or "any"
    if agg not in AGGS:
        raise InvalidClaim(f"unknown agg {agg!r}; valid: {', '.join(AGGS)}")
    tslot = raw.get("tslot")
    window = raw.get("window")
    if tslot is not None and window is not None:
        raise InvalidClaim("give tslot or window, not both")
    if tslot is not None and (not _is_int(tslot) or tslot < 0):
        raise InvalidClaim(f"claim tslot must be a non-negative integer, got {tslot!r}")
    win: tuple[int, int] | None = None
    if window is not None:
        if (
            not isinstance(window, list | tuple)
            or len(window) != 2
            or not all(_is_int(w) for w in window)
            or not 0 <= window[0] < window[1]
        ):
            raise InvalidWindow(
                f"claim window must be two increasing non-negative integers, got {window!r}"
            )
        win = (int(window[0]), int(window[1]))
    value: float | tuple[float, ...] | None
    raw_value = raw.get("value")
    if op in ("exists", "absent"):
        value = None
    elif op in ("in", "ni"):
        if (
            not isinstance(raw_value, list | tuple)
            or not raw_value
            or len(raw_value) > MAX_IN_VALUES
        ):
            raise InvalidClaim(f"op {op} needs a non-empty list of at most {MAX_IN_VALUES} numbers")
        value = tuple(_number(v, "claim value") for v in raw_value)
    else:
        value = _number(raw_value, "claim value")
    return ParsedClaim(band, str(op), value, None if tslot is None else int(tslot), win, str(agg))


def _compare(
    op: str, x: npt.NDArray[np.float64], value: float | tuple[float, ...] | None
) -> npt.NDArray[np.bool_]:
    with np.errstate(invalid="ignore"):
        if op in ("in", "ni"):
            vals = np.asarray(value, dtype=np.float64)
            hit = np.asarray((np.abs(x[..., None] - vals) <= EQ_TOLERANCE).any(axis=-1))
            return hit if op == "in" else np.logical_not(hit)
        v = float(value)  # type: ignore[arg-type]
        if op == "eq":
            return np.abs(x - v) <= EQ_TOLERANCE
        if op == "ne":
            return np.abs(x - v) > EQ_TOLERANCE
        if op == "lt":
            return x < v
        if op == "le":
            return x <= v
        if op == "gt":
            return x > v
        return x >= v  # ge


def evaluate(claim: ParsedClaim, tslots: npt.ArrayLike, values: npt.ArrayLike) -> ClaimResult:
    """Evaluate a claim for many cells at once.

    Args:
        claim: The parsed claim.
        tslots: ``(t,)`` ascending tslots of the value rows.
        values: ``(t, n)`` values, NaN where a cell has no fact at that tslot.

    Returns:
        Verdicts, the facts used and aggregates.
    """
    t = np.asarray(tslots, dtype=np.int64)
    v = np.asarray(values, dtype=np.float64)
    if v.ndim == 1:
        v = v[:, None]
    n = v.shape[1]
    have = np.isfinite(v)
    if claim.tslot is not None:
        used = have & (t == claim.tslot)[:, None]
    elif claim.window is not None:
        used = have & ((t >= claim.window[0]) & (t <= claim.window[1]))[:, None]
    else:
        used = np.zeros_like(have)
        if t.size:
            # latest fact per cell: last row index holding a value
            idx = t.size - 1 - np.argmax(have[::-1], axis=0)
            any_fact = have.any(axis=0)
            cols = np.flatnonzero(any_fact)
            used[idx[cols], cols] = True
    n_used = used.sum(axis=0)
    verdict = np.full(n, UNKNOWN, dtype=np.int8)
    aggregate = np.full(n, np.nan)
    if claim.op in ("exists", "absent"):
        exists = n_used > 0
        verdict[:] = np.where(exists == (claim.op == "exists"), TRUE, FALSE)
        return ClaimResult(verdict, used, aggregate)
    known = n_used > 0
    if claim.agg in ("any", "all"):
        pred = _compare(claim.op, v, claim.value) & used
        ok = pred.any(axis=0) if claim.agg == "any" else (pred | ~used).all(axis=0)
    else:
        masked = np.where(used, v, np.nan)
        with np.errstate(invalid="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN columns (unknown cells)
            if claim.agg == "mean":
                agg = np.nanmean(masked, axis=0) if t.size else np.full(n, np.nan)
            elif claim.agg == "min":
                agg = np.nanmin(masked, axis=0) if t.size else np.full(n, np.nan)
            else:
                agg = np.nanmax(masked, axis=0) if t.size else np.full(n, np.nan)
        aggregate = np.where(known, agg, np.nan)
        ok = _compare(claim.op, aggregate, claim.value)
    verdict[known] = np.where(ok[known], TRUE, FALSE)
    return ClaimResult(verdict, used, aggregate)
