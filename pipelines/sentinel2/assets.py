"""Sentinel-2 assets: discovery and indices per (week, block), with their checks.

Both assets take single-run backfills (see :mod:`pipelines.family_assets`).
"""

from operator import attrgetter

from pipelines.family import SceneFamily
from pipelines.family_assets import scene_assets
from pipelines.sentinel2.checks import CHECKS, evaluate_checks
from pipelines.sentinel2.ingest import WeekStack, inventory_rows, stack_week
from store.cube.bands import FAMILY_FLAGS, family_scalars

__all__ = ["S2", "s2_indices", "s2_items"]

COLLECTION = "sentinel-2-l2a"

S2: SceneFamily[WeekStack] = SceneFamily(
    name="s2",
    collection=COLLECTION,
    group="sentinel2",
    asset="s2_indices",
    title="Sentinel-2 L2A",
    description="ndvi, ndwi, ndmi, lswi, evi and the clear flag; one cube transaction per week.",
    checks=CHECKS,
    stack_week=stack_week,
    evaluate_checks=evaluate_checks,
    bands=family_scalars("s2"),
    flag_band=FAMILY_FLAGS["s2"][0],
    flags=attrgetter("clear"),
    inventory_rows=inventory_rows,
    commit_items=True,
)
"""The Sentinel-2 L2A family: five spectral indices and the clear flag."""

s2_items, s2_indices = scene_assets(S2)
