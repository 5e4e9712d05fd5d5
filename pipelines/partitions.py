"""Partitions of the pipeline (module-level constants, as Dagster's examples do).

- Scenes (S2, S1): weekly day windows x store blocks. Weeks start on Thursday
  because day slot 0 (1970-01-01) was a Thursday: a week is exactly one cube
  time chunk (``store.cube.TIME_CHUNK_DAYS`` = 7 day slots), so a partition
  owns its chunks whole and writes never collide across partitions.
- Blocks are dynamic partitions (``b{level}.{row}.{col}``, level
  :data:`PARTITION_BLOCK_LEVEL`), registered for the configured area by
  :func:`register_area_blocks` (the CLI and the sensor call it).
- Tessera: one partition per vintage year.
"""

from __future__ import annotations

from datetime import date

from dagster import (
    DagsterInstance,
    DynamicPartitionsDefinition,
    MultiPartitionKey,
    MultiPartitionsDefinition,
    StaticPartitionsDefinition,
    TimeWindowPartitionsDefinition,
)

from pipelines.instance import instance_setup
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
]

PARTITION_BLOCK_LEVEL = 8
"""Blocks of 256 x 256 cells (~2.4 km); each owns 2 x 2 cube chunks of level 7."""
WEEKS = TimeWindowPartitionsDefinition(
    start="2022-12-29",  # a Thursday: day slot 19355 = 7 * 2765
    fmt="%Y-%m-%d",
    cron_schedule="0 0 * * 4",
    timezone="UTC",
    end_offset=1,  # the current, still-open week can be ingested as scenes arrive
)
BLOCKS = DynamicPartitionsDefinition(name="blocks")
SCENE_PARTITIONS = MultiPartitionsDefinition({"week": WEEKS, "block": BLOCKS})
TESSERA_YEARS = StaticPartitionsDefinition([str(y) for y in range(2017, 2026)])

assert day_slot("2022-12-29") % TIME_CHUNK_DAYS == 0


def week_t0(week_key: str) -> int:
    """First day slot of a week partition key."""
    return day_slot(week_key)


def week_key_of(d: date) -> str:
    """Week partition key holding a date."""
    slot = day_slot(d)
    return slot_to_date(slot - slot % TIME_CHUNK_DAYS).isoformat()


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
