"""The one ``Definitions`` of earthmem's pipeline (``workspace.yaml`` loads this module)."""

from __future__ import annotations

from dagster import (
    Definitions,
    ExecutorDefinition,
    in_process_executor,
    load_asset_checks_from_modules,
    load_assets_from_modules,
)

from pipelines import automation
from pipelines.memory import assets as memory_assets
from pipelines.resources import default_resources
from pipelines.sentinel1 import assets as s1_assets
from pipelines.sentinel2 import assets as s2_assets
from pipelines.tessera import assets as tessera_assets

__all__ = ["ALL_ASSETS", "EXECUTOR", "defs"]

EXECUTOR: ExecutorDefinition = in_process_executor
"""How a run launched from the UI, a schedule or a sensor executes its steps: in the run's own
process. The sample's runs are a few steps on a small machine, where the default multiprocess
executor spends seconds starting a process per step, and the scene work that would gain from
more processes leaves the run's process anyway when a Dask scheduler is named
(:mod:`pipelines.cluster`). The one place to choose another executor."""

ALL_ASSETS = [*load_assets_from_modules([s2_assets, s1_assets, tessera_assets, memory_assets])]

defs = Definitions(
    assets=ALL_ASSETS,
    asset_checks=load_asset_checks_from_modules([s2_assets, s1_assets, tessera_assets]),
    jobs=[automation.scene_ingest_job, automation.gc_job, memory_assets.memory_recheck_job],
    schedules=[automation.daily_ingest, automation.weekly_gc],
    sensors=[automation.stac_new_items_sensor, memory_assets.memory_recheck_sensor],
    resources=default_resources(),
    executor=EXECUTOR,
)
