"""Asset checks of ``s2_indices``, evaluated on the in-memory week stack before it is written.

A failing ERROR check stops the write: a scene with a double-applied offset
never reaches the cube.
"""

from __future__ import annotations

import numpy as np
from dagster import AssetCheckResult, AssetCheckSeverity

from pipelines.family import FamilyCheck
from pipelines.lattice import LatticeWindow
from pipelines.sentinel2.compute import CLEAR, INDEX_NAMES, NO_OBSERVATION
from pipelines.sentinel2.ingest import WeekStack

__all__ = ["CHECKS", "evaluate_checks"]

CHECKS = (
    FamilyCheck("index_range", "every index within [-1, 1] (EVI within [-3, 3])"),
    FamilyCheck("clear_cells_finite", "no NaN in clear cells"),
    FamilyCheck(
        "reflectance_sanity",
        "median vegetation red reflectance >= 0 (catches a double-applied offset)",
    ),
    FamilyCheck("clear_fraction", "share of observed cells that are clear (warn only)"),
    FamilyCheck("chunk_coverage", "the written region covers the area's part of the block"),
)
"""The checks of ``s2_indices``, in the order they are reported."""


def evaluate_checks(stack: WeekStack, window: LatticeWindow) -> list[AssetCheckResult]:
    """The five checks over a week stack."""
    clear = stack.clear == CLEAR
    out_of_range = {}
    for name in INDEX_NAMES:
        v = stack.values[name][clear]
        lim = (
            3.0 if name == "evi" else 1.0
        )  # EVI is not bounded to [-1, 1] over bright/dark targets
        out_of_range[name] = int(((v < -lim) | (v > lim)).sum())
    nan_in_clear = {
        n: int(np.isnan(stack.values[n][clear]).sum()) for n in ("ndvi", "ndwi", "ndmi", "lswi")
    }
    negatives = [
        s for s in stack.scene_stats if s.veg_red_median is not None and s.veg_red_median < 0
    ]
    observed = int((stack.clear != NO_OBSERVATION).sum())
    clear_fraction = int(clear.sum()) / observed if observed else 0.0
    h, w = window.shape
    return [
        AssetCheckResult(
            check_name="index_range",
            asset_key="s2_indices",
            passed=sum(out_of_range.values()) == 0,
            metadata={"out_of_range": out_of_range},
        ),
        AssetCheckResult(
            check_name="clear_cells_finite",
            asset_key="s2_indices",
            passed=sum(nan_in_clear.values()) == 0,
            metadata={"nan_in_clear": nan_in_clear},
        ),
        AssetCheckResult(
            check_name="reflectance_sanity",
            asset_key="s2_indices",
            passed=not negatives,
            metadata={
                "scenes_with_negative_vegetation_red": [s.item_id for s in negatives],
                "vegetation_red_medians": {
                    s.item_id: s.veg_red_median
                    for s in stack.scene_stats
                    if s.veg_red_median is not None
                },
            },
        ),
        AssetCheckResult(
            check_name="clear_fraction",
            asset_key="s2_indices",
            passed=observed == 0 or clear_fraction >= 0.05,
            severity=AssetCheckSeverity.WARN,
            metadata={"clear_fraction": clear_fraction, "observed_cells": observed},
        ),
        AssetCheckResult(
            check_name="chunk_coverage",
            asset_key="s2_indices",
            passed=stack.clear.shape[1:] == (h, w),
            metadata={"window_cells": h * w, "days_with_data": len(stack.days)},
        ),
    ]
