"""One Tessera vintage into the cube: in the run's process, or block by block on a Dask cluster.

:func:`run_vintage` applies the run's executor choice (:mod:`pipelines.cluster`), as
:func:`pipelines.family_dask.run_range` does for the scene families:

- ``local``: the vintage's tiles are gathered onto the whole area's window in the run's
  process and committed in one transaction (the sample's path on a small machine);
- ``dask``: each block of the area (the blocks the scene partitions use,
  :func:`pipelines.partitions.area_blocks`) is one task: gather the tiles whose bounding box
  meets the block onto the area's part of it and write its vectors, scales and sign bits
  into its own fork of the coordinator's session (:func:`store.cube.cooperative.write_in_fork`).
  A block owns its Tessera chunks whole (one chunk per block and year), so the forks never
  overlap. The coordinator writes the vintage's inventory row (the summed totals) into one
  more fork, merges them and commits once; until then nothing is visible, and a task lost
  for good fails the run with :class:`~pipelines.cluster.ClusterError`, committing nothing.
  No process holds more than a block of the vintage, so the area's size bounds the tasks,
  not any machine's memory.

Both write the same cells: a cell takes the first tile (by id) that has data under its
centre, whichever window it is gathered in (tested: the same chunks and row either way).
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

from pipelines.cluster import ExecutorChoice, dask_client, gather_all
from pipelines.lattice import LatticeWindow
from pipelines.sources.models import SceneItem
from pipelines.tessera.ingest import (
    VintageTotals,
    inventory_key,
    load_vintage,
    vintage_inventory,
    write_vintage,
)
from store.cube import CubeWriter
from store.cube.cooperative import CooperativeCommit, ForkWrite, write_in_fork

__all__ = ["AreaBlocks", "BlockResult", "block_task", "run_vintage", "tiles_meeting"]

TASK_RETRIES = 1
"""Reruns of a block's task that raised (a transient read or storage error)."""


@dataclass(frozen=True)
class AreaBlocks:
    """The area a vintage covers: its name, its window, and its part of each of its blocks."""

    name: str
    """Area name (the inventory row's ``area:<name>`` block)."""
    window: LatticeWindow
    """The area's lattice window."""
    blocks: tuple[tuple[str, LatticeWindow], ...]
    """``(block id, the area's part of it)`` for every block meeting the area."""


@dataclass(frozen=True)
class BlockResult:
    """What one block's task sends back to the coordinator (picklable)."""

    block: str
    """The block id."""
    totals: VintageTotals
    """The block's cells and tiles."""
    write: ForkWrite
    """The fork holding the block's chunks."""


@dataclass(frozen=True)
class VintageWritten:
    """A vintage's totals and the snapshot that holds it (``None``: nothing was committed)."""

    totals: VintageTotals
    snapshot: str | None


def tiles_meeting(items: Sequence[SceneItem], window: LatticeWindow) -> list[SceneItem]:
    """The tiles whose bounding box meets ``window``'s bounds (edges touching count)."""
    w, s, e, n = window.bounds()
    return [
        i for i in items if i.bbox[0] <= e and i.bbox[2] >= w and i.bbox[1] <= n and i.bbox[3] >= s
    ]


def block_task(
    items: Sequence[SceneItem], window: LatticeWindow, year: int, block: str, fork: Any
) -> BlockResult:
    """One block on a worker: gather the vintage's tiles onto ``window``, write them into ``fork``."""
    vintage = load_vintage(items, window, year)
    written = write_in_fork(
        fork, inventory_key(year), partial(write_vintage, vintage=vintage, window=window)
    )
    return BlockResult(block, VintageTotals.of(vintage), written)


def run_vintage(
    items: Sequence[SceneItem],
    area: AreaBlocks,
    year: int,
    writer: CubeWriter,
    choice: ExecutorChoice,
) -> VintageWritten:
    """Ingest one vintage on the chosen executor (the one place the choice is applied).

    No tiles: nothing is written (the stored vintage, if any, stays).
    """
    if not items:  # nothing read, nothing written
        return VintageWritten(VintageTotals.summed([]), None)
    if choice.kind == "local":
        return _local(items, area, year, writer)
    with dask_client(choice) as client:
        return _on_cluster(items, area, year, writer, client)


def _local(
    items: Sequence[SceneItem], area: AreaBlocks, year: int, writer: CubeWriter
) -> VintageWritten:
    vintage = load_vintage(items, area.window, year)
    totals = VintageTotals.of(vintage)
    metadata = {"asset": "geotessera_embeddings"}
    with writer.transaction(inventory_key(year), metadata=metadata) as tx:
        write_vintage(tx, vintage, area.window)
        vintage_inventory(tx, year, totals, area.window, area.name)
    return VintageWritten(totals, tx.snapshot_id)


def _on_cluster(
    items: Sequence[SceneItem], area: AreaBlocks, year: int, writer: CubeWriter, client: Any
) -> VintageWritten:
    key = inventory_key(year)
    run = uuid.uuid4().hex[:8]
    with CooperativeCommit(writer) as coop:
        futures = [
            client.submit(
                block_task,
                tiles_meeting(items, window),
                window,
                year,
                block,
                coop.fork(),
                key=f"earthmem-tessera-{year}-{block}-{run}",
                pure=False,
                retries=TASK_RETRIES,
            )
            for block, window in area.blocks
        ]
        try:
            done: list[BlockResult] = gather_all(
                client,
                futures,
                f"geotessera_embeddings {year}: a block's task",
                "rerun the vintage",
            )
        finally:
            client.cancel(futures)
        totals = VintageTotals.summed([r.totals for r in done])
        row = write_in_fork(
            coop.fork(),
            key,
            partial(
                vintage_inventory,
                year=year,
                totals=totals,
                window=area.window,
                area=area.name,
            ),
            remote=coop.remote,
        )
        snapshot, _ = coop.commit(
            [*(r.write for r in done), row],
            [key],
            f"materialise geotessera_embeddings {year}",
            {"asset": "geotessera_embeddings", "blocks": [r.block for r in done]},
        )
    return VintageWritten(totals, snapshot)
