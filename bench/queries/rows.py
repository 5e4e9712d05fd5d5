"""Shared helpers of the query benches: the result row, timing scale, progress log, child env."""

from __future__ import annotations

import os
import sys
from typing import Any

from bench.common import REPO, Timing

__all__ = ["ENV", "log", "row", "scale"]

ENV = {**os.environ, "PYTHONPATH": str(REPO)}
"""Environment of the child processes (servers, load generator): the repository importable."""


def row(
    case: str,
    unit: str,
    value: Timing | float,
    *,
    baseline_case: str | None = None,
    baseline: Timing | float | None = None,
    ratio: float | None = None,
    ratio_def: str = "",
    target: str = "",
    met: bool | None = None,
    **extra: Any,
) -> dict[str, Any]:
    """One result row in the harness's common format.

    Args:
        case: What was measured.
        unit: Unit of ``value``.
        value: The earthmem figure (a timing or a single number).
        baseline_case: What the baseline measured.
        baseline: The baseline figure, measured in the same run.
        ratio: The compared ratio, when there is one.
        ratio_def: How ``ratio`` is defined.
        target: The target, or ``(info)``.
        met: Whether the target is met (None: not judged).
        **extra: More fields kept with the row.

    Returns:
        The row as the harness (:mod:`bench.run`) reads it.
    """

    def parts(v: Timing | float | None) -> dict[str, Any]:
        if v is None:
            return {}
        if isinstance(v, Timing):
            return {"median": v.median, "p10": v.p10, "p90": v.p90, "n": v.n}
        return {"median": float(v)}

    return {
        "case": case,
        "unit": unit,
        **parts(value),
        "baseline_case": baseline_case,
        "baseline": parts(baseline) or None,
        "ratio": ratio,
        "ratio_def": ratio_def,
        "target": target,
        "met": met,
        **extra,
    }


def scale(t: Timing, k: float) -> Timing:
    """A timing with every figure multiplied by ``k`` (e.g. seconds to milliseconds)."""
    return Timing(t.median * k, t.p10 * k, t.p90 * k, t.min * k, t.max * k, t.n)


def log(msg: str) -> None:
    """Progress on stderr, tagged with the bench's name."""
    print(f"[bench_queries] {msg}", file=sys.stderr, flush=True)
