"""The numpy reference of area_over_time's weighted statistics (the tests' oracle)."""

from __future__ import annotations

import math

import numpy as np


def reference_stats(x: np.ndarray, w: np.ndarray) -> dict[str, float]:
    """The numpy implementation the kernels replaced (kept here as the oracle), with
    equal values in position order (a stable sort): the order every machine agrees on."""
    order = np.argsort(x, kind="stable")
    xs, ws = x[order], w[order]
    total = float(ws.sum())
    mean = float((xs * ws).sum() / total)
    std = float(math.sqrt(max(0.0, float((ws * (xs - mean) ** 2).sum()) / total)))
    cw = (np.cumsum(ws) - ws / 2.0) / total
    q = np.interp([0.10, 0.25, 0.50, 0.75, 0.90], cw, xs)
    return {
        "mean": mean,
        "std": std,
        "p10": float(q[0]),
        "p25": float(q[1]),
        "median": float(q[2]),
        "p75": float(q[3]),
        "p90": float(q[4]),
    }
