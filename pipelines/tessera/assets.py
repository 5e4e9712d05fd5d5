"""Tessera assets: one vintage per year into the cube, then the k-NN tables."""

from datetime import date

import numpy as np
from dagster import (
    AssetCheckResult,
    AssetCheckSpec,
    AssetExecutionContext,
    MaterializeResult,
    asset,
)

from pipelines.partitions import TESSERA_YEARS
from pipelines.resources import AreaResource, SceneSourceResource, StoreResource
from pipelines.sources.models import SceneItem
from pipelines.tessera.ingest import load_vintage
from pipelines.tessera.tables import build_multi_year_table, build_year_table
from store.inventory import InventoryRow
from store.tslot import year_slot

__all__ = [
    "geotessera_embeddings",
    "geotessera_multi_year",
    "geotessera_year_table",
    "tessera_items",
]

COLLECTION = "tessera-embeddings"


def _vintage_items(scenes: SceneSourceResource, area: AreaResource, year: int) -> list[SceneItem]:
    """Tessera tiles of one vintage touching the area, searched from the configured source."""
    min_lat, min_lng, max_lat, max_lng = area.bbox
    found = scenes.open().search(
        COLLECTION, (min_lng, min_lat, max_lng, max_lat), date(year, 1, 1), date(year, 12, 31)
    )
    return [i for i in found.items if i.tessera_year in (None, year)]


@asset(partitions_def=TESSERA_YEARS, group_name="tessera", kinds={"stac"})
def tessera_items(
    context: AssetExecutionContext, scenes: SceneSourceResource, area: AreaResource
) -> MaterializeResult:
    """Tessera tiles of the partition's year touching the area (ids recorded).

    Nothing is stored by Dagster: the items name files under the data directory, so the cube
    asset searches them again from the configured source (a moved data directory is read
    where it is now).
    """
    items = _vintage_items(scenes, area, int(context.partition_key))
    return MaterializeResult(metadata={"item_ids": [i.id for i in items]})


@asset(
    partitions_def=TESSERA_YEARS,
    group_name="tessera",
    kinds={"zarr", "icechunk"},
    deps=[tessera_items],
    check_specs=[
        AssetCheckSpec(
            "valid_vectors",
            asset="geotessera_embeddings",
            description="some land vectors, scales positive",
        )
    ],
)
def geotessera_embeddings(
    context: AssetExecutionContext,
    scenes: SceneSourceResource,
    store: StoreResource,
    area: AreaResource,
) -> MaterializeResult:
    """int8 vectors + per-cell scale + bin128 sign codes of one vintage over the area."""
    year = int(context.partition_key)
    tiles = _vintage_items(scenes, area, year)
    win = area.window()
    vintage = load_vintage(tiles, win, year)
    finite = np.isfinite(vintage.scale)
    bad_scale = int((vintage.scale[finite] <= 0).sum())
    slot = np.array([year_slot(date(year, 1, 1))])
    snapshot = None
    if tiles:
        with store.writer().transaction(
            f"tessera|{year}", metadata={"asset": "geotessera_embeddings"}
        ) as tx:
            tx.write("geotessera", slot, win.lat_q0, win.lng_q0, vintage.embedding[None])
            tx.write("geotessera.scale", slot, win.lat_q0, win.lng_q0, vintage.scale[None])
            tx.write("geotessera.bin128", slot, win.lat_q0, win.lng_q0, vintage.bin128[None])
            tx.write_inventory(
                f"tessera|{year}",
                [
                    InventoryRow(
                        band="geotessera",
                        tslot=int(slot[0]),
                        block=f"area:{area.name}",
                        item_ids=vintage.item_ids,
                        clear_cells=vintage.n_valid,
                        total_cells=int(win.shape[0] * win.shape[1]),
                        tempo="year",
                    )
                ],
            )
        snapshot = tx.snapshot_id
    return MaterializeResult(
        metadata={
            "valid_cells": vintage.n_valid,
            "tiles": list(vintage.item_ids),
            "snapshot_id": snapshot or "none",
        },
        check_results=[
            AssetCheckResult(
                check_name="valid_vectors",
                passed=bad_scale == 0 and (vintage.n_valid > 0 or not tiles),
                metadata={"valid_cells": vintage.n_valid, "non_positive_scales": bad_scale},
            )
        ],
    )


@asset(
    partitions_def=TESSERA_YEARS,
    group_name="tessera",
    kinds={"numpy"},
    deps=[geotessera_embeddings],
)
def geotessera_year_table(
    context: AssetExecutionContext, store: StoreResource, area: AreaResource
) -> MaterializeResult:
    """The k-NN table of one vintage: cells, int8 vectors, norms, bin128 (memory-mappable)."""
    year = int(context.partition_key)
    n = build_year_table(store.data_dir, area.window(), year)
    return MaterializeResult(
        metadata={"rows": n, "path": f"knn/geotessera/{year}"}  # under the data directory
    )


@asset(group_name="tessera", kinds={"numpy"}, deps=[geotessera_year_table])
def geotessera_multi_year(store: StoreResource) -> MaterializeResult:
    """geotessera.multi_year: every vintage concatenated, for cells present in all of them."""
    n, years = build_multi_year_table(store.data_dir)
    return MaterializeResult(metadata={"rows": n, "years": years})
