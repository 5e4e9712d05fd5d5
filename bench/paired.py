"""Paired measurement: earthmem and its baseline alternated in rounds, judged by per-round ratios.

Two timings taken minutes apart on a shared 2-core machine see different loads,
so their ratio moves with whatever else ran. Here every round times A (earthmem)
then B (its baseline) back to back on the same input, and the row reports the
median of the per-round ratios ``a_i / b_i`` with its p10–p90: a load change
that slows both halves of a round cancels out of that round's ratio.

* :func:`paired` / :func:`paired_calls`: alternate two operations in rounds.
* :func:`ratio_stats`: the statistics of per-round ratios (pure).
* :func:`share_of_limit`: a "share of a physical limit" (scan bandwidth over the
  read bandwidth of the same mapping, requests/s over the framework's ceiling)
  capped at 100 %: a share above it is a defect of the metric, never a result.
* :func:`run_spread`: min / median / max of one row's ratio across repeated runs
  (``python -m bench.run --repeat N``).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from bench.common import Timing

__all__ = [
    "Paired",
    "Share",
    "paired",
    "paired_calls",
    "paired_samples",
    "ratio_stats",
    "run_spread",
    "share_of_limit",
]


def ratio_stats(a: Sequence[float], b: Sequence[float]) -> Timing:
    """Median and p10–p90 of the per-round ratios ``a[i] / b[i]``.

    Raises:
        ValueError: the sequences differ in length, are empty, or a ``b`` is not positive.
    """
    if len(a) != len(b) or not a:
        raise ValueError(
            f"paired samples must be non-empty and equal in length ({len(a)}, {len(b)})"
        )
    if any(not x > 0 for x in b):
        raise ValueError("a baseline sample is not positive: its ratio is undefined")
    return Timing.of([x / y for x, y in zip(a, b, strict=True)])


@dataclass(frozen=True)
class Paired:
    """Two operations timed alternately in rounds (seconds)."""

    a: Timing
    """Timings of A (earthmem) over the rounds."""
    b: Timing
    """Timings of B (the baseline) over the rounds."""
    ratio: Timing
    """Per-round ratios ``a_i / b_i``: median and spread."""
    a_samples: tuple[float, ...]
    """A's raw samples, in round order."""
    b_samples: tuple[float, ...]
    """B's raw samples, in round order."""

    @property
    def rounds(self) -> int:
        """Number of timed rounds."""
        return len(self.a_samples)

    def inverse(self) -> Timing:
        """Per-round ratios ``b_i / a_i`` (a speed-up of A over B)."""
        return ratio_stats(self.b_samples, self.a_samples)

    def ratio_fields(self, *, inverse: bool = False) -> dict[str, Any]:
        """The row fields of the ratio: median, p10, p90 and rounds."""
        r = self.inverse() if inverse else self.ratio
        return {"ratio": r.median, "ratio_p10": r.p10, "ratio_p90": r.p90, "rounds": self.rounds}


def paired_samples(a: Sequence[float], b: Sequence[float]) -> Paired:
    """A :class:`Paired` of already measured per-round samples (same length)."""
    return Paired(Timing.of(list(a)), Timing.of(list(b)), ratio_stats(a, b), tuple(a), tuple(b))


def paired(
    fa: Callable[[int], Any], fb: Callable[[int], Any], rounds: int, warmup: int = 1
) -> Paired:
    """Time ``fa(i)`` then ``fb(i)`` in each round ``i`` (A, B, A, B, ...) after untimed warm-ups.

    Both receive the round index, so they can work on the same input (the same
    query row, the same batch). Warm-up calls get ``-1`` (JIT, caches).

    Raises:
        ValueError: ``rounds`` < 1.
    """
    if rounds < 1:
        raise ValueError(f"rounds must be >= 1, got {rounds}")
    for _ in range(warmup):
        fa(-1)
        fb(-1)
    sa: list[float] = []
    sb: list[float] = []
    for i in range(rounds):
        t0 = time.perf_counter()
        fa(i)
        t1 = time.perf_counter()
        fb(i)
        t2 = time.perf_counter()
        sa.append(t1 - t0)
        sb.append(t2 - t1)
    return paired_samples(sa, sb)


def paired_calls(
    fa: Callable[[int], float], fb: Callable[[int], float], rounds: int, warmup: int = 1
) -> Paired:
    """Like :func:`paired`, but each call returns its own measured value (seconds, or a rate).

    For operations whose figure is not their wall time (an HTTP load window
    returning requests/s, a pass timing only part of its work).
    """
    if rounds < 1:
        raise ValueError(f"rounds must be >= 1, got {rounds}")
    for _ in range(warmup):
        fa(-1)
        fb(-1)
    sa, sb = [], []
    for i in range(rounds):
        sa.append(float(fa(i)))
        sb.append(float(fb(i)))
    return paired_samples(sa, sb)


@dataclass(frozen=True)
class Share:
    """A share of a physical limit (1.0 = the limit), checked never to exceed it."""

    median: float
    """Median of the per-round shares."""
    p10: float
    """10th percentile of the per-round shares."""
    p90: float
    """90th percentile of the per-round shares."""
    rounds_over: int
    """Rounds whose share exceeded 1 (noise in a single round; a defect when the median does)."""
    defect: bool
    """True when the median share exceeds 1: the bytes or the limit are miscounted."""

    def as_fields(self) -> dict[str, Any]:
        """Row fields: the share in percent, its spread, and the defect flag."""
        return {
            "median": 100 * self.median,
            "p10": 100 * self.p10,
            "p90": 100 * self.p90,
            "rounds_over_100pct": self.rounds_over,
            "metric_defect": self.defect,
        }


def share_of_limit(value: Sequence[float], limit: Sequence[float]) -> Share:
    """Per-round shares ``value[i] / limit[i]`` (rates: bytes/s, requests/s) and the 100 % cap.

    The limit is measured the same way as the value in the same round, so a
    share above 1 cannot be a result: the row is marked a metric defect.

    Raises:
        ValueError: as :func:`ratio_stats`.
    """
    t = ratio_stats(value, limit)
    over = sum(1 for x, y in zip(value, limit, strict=True) if x > y)
    return Share(t.median, t.p10, t.p90, over, t.median > 1.0)


def run_spread(values: Sequence[float | None]) -> dict[str, Any] | None:
    """Min / median / max of one row's ratio over repeated runs (None entries skipped).

    ``within_20pct``: max / median - 1 and 1 - min / median are both at most 0.2
    (every run within ±20 % of the median run: the goal for target rows).
    """
    v = sorted(float(x) for x in values if x is not None)
    if not v:
        return None
    med = statistics.median(v)
    return {
        "min": v[0],
        "median": med,
        "max": v[-1],
        "n": len(v),
        "within_20pct": bool(med > 0 and v[-1] / med - 1 <= 0.2 and 1 - v[0] / med <= 0.2),
    }
