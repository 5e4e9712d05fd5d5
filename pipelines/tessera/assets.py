"""Tessera assets: one vintage per year into the cube, then the k-NN tables."""

from datetime import date

from dagster import (
    AssetCheckResult,
    AssetCheckSpec,
    AssetExecutionContext,
    MaterializeResult,
    asset,
)

from pipelines.cluster import DaskResource
from pipelines.partitions import TESSERA_YEARS, area_blocks
from pipelines.resources import AreaResource, SceneSourceResource, StoreResource
from pipelines.scenes import skip_line
from pipelines.sources.models import SceneItem
from pipelines.tessera.tables import build_multi_year_table, build_year_table
from pipelines.tessera.vintage import AreaBlocks, run_vintage

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
    dask: DaskResource,
) -> MaterializeResult:
    """int8 vectors + per-cell scale + bin128 sign codes of one vintage over the area.

    In the run's process, or one task per block of the area on a Dask cluster, as the run's
    ``dask`` resource chooses (:mod:`pipelines.tessera.vintage`).
    """
    year = int(context.partition_key)
    tiles = _vintage_items(scenes, area, year)
    window = area.window()
    blocks = tuple(
        (b, w) for b in area_blocks(area.bbox) if (w := area.block_window(b)) is not None
    )
    written = run_vintage(
        tiles, AreaBlocks(area.name, window, blocks), year, store.writer(), dask.choice()
    )
    totals = written.totals
    return MaterializeResult(
        metadata={
            "valid_cells": totals.n_valid,
            "tiles": list(totals.item_ids),
            "skipped": [skip_line(s) for s in totals.skipped],
            "snapshot_id": written.snapshot or "none",
        },
        check_results=[
            AssetCheckResult(
                check_name="valid_vectors",
                passed=totals.bad_scales == 0 and (totals.n_valid > 0 or not tiles),
                metadata={
                    "valid_cells": totals.n_valid,
                    "non_positive_scales": totals.bad_scales,
                },
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
