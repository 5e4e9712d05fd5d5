"""Sentinel-1 RTC assets: discovery and backscatter per (week, block); single-run backfills as Sentinel-2."""

from operator import attrgetter

from pipelines.family import SceneFamily
from pipelines.family_assets import scene_assets
from pipelines.sentinel1.checks import CHECKS, evaluate_checks
from pipelines.sentinel1.ingest import S1Week, inventory_rows, stack_week
from store.cube.bands import FAMILY_FLAGS, family_scalars

__all__ = ["S1", "s1_backscatter", "s1_items"]

COLLECTION = "sentinel-1-rtc"

S1: SceneFamily[S1Week] = SceneFamily(
    name="s1",
    collection=COLLECTION,
    group="sentinel1",
    asset="s1_backscatter",
    title="Sentinel-1 RTC",
    description="s1.vv, s1.vh (linear gamma0) and indices.vh_vv; one cube transaction per week.",
    checks=CHECKS,
    stack_week=stack_week,
    evaluate_checks=evaluate_checks,
    bands=family_scalars("s1"),
    flag_band=FAMILY_FLAGS["s1"][0],
    flags=attrgetter("valid"),
    inventory_rows=inventory_rows,
)
"""The Sentinel-1 RTC family: linear backscatter per polarisation, their ratio and the valid flag."""

s1_items, s1_backscatter = scene_assets(S1)
