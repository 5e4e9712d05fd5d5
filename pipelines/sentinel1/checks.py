"""Asset checks of ``s1_backscatter``, evaluated on the in-memory week before it is written.

A failing check stops the write: backscatter outside its physical range never
reaches the cube.
"""

from __future__ import annotations

from dagster import AssetCheckResult

from pipelines.family import FamilyCheck
from pipelines.lattice import LatticeWindow
from pipelines.sentinel1.ingest import S1Week

__all__ = ["CHECKS", "evaluate_checks"]

CHECKS = (FamilyCheck("backscatter_positive", "linear gamma0 > 0 and < 10 where valid"),)
"""The checks of ``s1_backscatter``, in the order they are reported."""


def evaluate_checks(week: S1Week, window: LatticeWindow) -> list[AssetCheckResult]:
    """Linear gamma0 within (0, 10) where both polarisations were observed.

    Args:
        week: The stacked week.
        window: The partition's window (unused: the check needs only the stack).
    """
    vv = week.values["vv"][week.valid == 1]
    bad = int(((vv <= 0) | (vv >= 10)).sum())
    return [
        AssetCheckResult(
            check_name="backscatter_positive", passed=bad == 0, metadata={"bad_cells": bad}
        )
    ]
