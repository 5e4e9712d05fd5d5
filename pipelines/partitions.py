"""Partitions of the pipeline (module-level constants, as Dagster's examples do).

- Scenes (S2, S1): weekly day windows x store blocks. Weeks start on Thursday
  because day slot 0 (1970-01-01) was a Thursday: a week is exactly one cube
  time chunk (``store.cube.TIME_CHUNK_DAYS`` = 7 day slots), so a partition
  owns its chunks whole and writes never collide across partitions.
- Blocks are dynamic partitions (``b{level}.{row}.{col}``, level
  :data:`PARTITION_BLOCK_LEVEL`), registered for the configured area by
  :func:`register_area_blocks` (the CLI and the sensor call it).
- Tessera: one partition per vintage year.
- An area that declares a period (the sample's manifest does) gets the weeks of that
  period only (:func:`weeks_for`); a live one keeps weeks up to the current one.
"""

from __future__ import annotations

import os
from datetime import date, timedelta
from pathlib import Path
from typing import Any

from dagster import (
    DagsterInstance,
    DynamicPartitionsDefinition,
    MultiPartitionKey,
    MultiPartitionsDefinition,
    StaticPartitionsDefinition,
    TimeWindowPartitionsDefinition,
)

from pipelines.instance import instance_setup
from pipelines.resources import load_period
from store import blocks
from store.cube import TIME_CHUNK_DAYS
from store.tslot import day_slot, slot_to_date

__all__ = [
    "BLOCKS",
    "PARTITION_BLOCK_LEVEL",
    "SCENE_PARTITIONS",
    "TESSERA_YEARS",
    "WEEKS",
    "area_blocks",
    "register_area_blocks",
    "scene_key",
    "week_key_of",
    "week_t0",
    "weeks_for",
]

PARTITION_BLOCK_LEVEL = 8
"""Blocks of 256 x 256 cells (~2.4 km); each owns 2 x 2 cube chunks of level 7."""
FIRST_WEEK = "2022-12-29"
"""First week partition of a live area (a Thursday: day slot 19355 = 7 * 2765)."""
AREA_ENV = "EARTHMEM_AREA"
"""The area JSON of the code location (see :mod:`pipelines.resources`)."""


def weeks_for(period: tuple[date, date] | None) -> TimeWindowPartitionsDefinition:
    """The week partitions of an area: those of its declared period, or live weeks.

    A period (a sample's, whose scenes exist only then) gives the weeks holding its first to
    its last day, so the UI shows no week that cannot have scenes and "materialize missing"
    launches none. Without one the weeks run from :data:`FIRST_WEEK` to the current, still
    open week (scenes keep arriving).
    """
    common: dict[str, Any] = {"fmt": "%Y-%m-%d", "cron_schedule": "0 0 * * 4", "timezone": "UTC"}
    if period is None:
        return TimeWindowPartitionsDefinition(start=FIRST_WEEK, end_offset=1, **common)
    first = max(week_key_of(period[0]), FIRST_WEEK)
    end = date.fromisoformat(week_key_of(period[1])) + timedelta(days=7)  # exclusive
    return TimeWindowPartitionsDefinition(start=first, end=end.isoformat(), **common)


def _configured_period() -> tuple[date, date] | None:
    """The period of the configured area (``EARTHMEM_AREA``), if it declares one.

    Read when the definitions load: Dagster needs the partitions then. No area configured,
    or none readable yet (before the sample is built), means live weeks.
    """
    path = os.environ.get(AREA_ENV)
    if not path or not Path(path).is_file():
        return None
    return load_period(path)


TESSERA_YEARS = StaticPartitionsDefinition([str(y) for y in range(2017, 2026)])

assert day_slot(FIRST_WEEK) % TIME_CHUNK_DAYS == 0


def week_t0(week_key: str) -> int:
    """First day slot of a week partition key."""
    return day_slot(week_key)


def week_key_of(d: date) -> str:
    """Week partition key holding a date."""
    slot = day_slot(d)
    return slot_to_date(slot - slot % TIME_CHUNK_DAYS).isoformat()


WEEKS = weeks_for(_configured_period())
"""The week partitions of the configured area (:func:`weeks_for`)."""
BLOCKS = DynamicPartitionsDefinition(name="blocks")
SCENE_PARTITIONS = MultiPartitionsDefinition({"week": WEEKS, "block": BLOCKS})


def scene_key(week: str, block: str) -> MultiPartitionKey:
    """The multi-partition key of one week and block."""
    return MultiPartitionKey({"week": week, "block": block})


def area_blocks(bbox: tuple[float, float, float, float]) -> list[str]:
    """Block ids covering an area ``(min_lat, min_lng, max_lat, max_lng)``."""
    return [b.id for b in blocks.blocks_for_bbox(*bbox, level=PARTITION_BLOCK_LEVEL)]


def register_area_blocks(
    instance: DagsterInstance, bbox: tuple[float, float, float, float]
) -> list[str]:
    """Add the area's blocks to the dynamic ``blocks`` partitions (idempotent).

    Held under the instance's setup lock: two processes adding the same key at once
    would fail one of them (a UNIQUE constraint in Dagster's storage).
    """
    keys = area_blocks(bbox)
    with instance_setup(instance):
        existing = set(instance.get_dynamic_partitions(BLOCKS.name or "blocks"))
        new = [k for k in keys if k not in existing]
        if new:
            instance.add_dynamic_partitions(BLOCKS.name or "blocks", new)
    return keys
