"""The bundled sample area: a deterministic, format-faithful synthetic area near Ranchi.

``build_sample`` writes Sentinel-2 L2A COGs, Sentinel-1 RTC COGs and Tessera
tiles (geotessera layout) plus a self-contained STAC catalog and a ground-truth
``manifest.json`` of the planted events. See docs/SAMPLE.md.
"""

from __future__ import annotations

from pipelines.sample._build import (
    MANIFEST_VERSION,
    TESSERA_YEARS,
    ProgressFn,
    SampleInfo,
    build_sample,
    cli_main,
)
from pipelines.sample._geo import CENTER_LAT, CENTER_LNG, EPSG, SampleGrid, SampleSize, make_grid
from pipelines.sample._optical import BANDS_10M, BANDS_20M, SCL_CLOUD, processing_baseline, s2_dates
from pipelines.sample._radar import S1_NODATA, s1_dates
from pipelines.sample._scene import (
    CLEARING_DATE,
    CONSTRUCTION_DATE,
    FLOOD_END,
    FLOOD_START,
    PERIOD_END,
    PERIOD_START,
    LandClass,
)
from pipelines.sample._stac import (
    S1_ASSETS,
    S1_COLLECTION,
    S2_ASSETS,
    S2_COLLECTION,
    TESSERA_COLLECTION,
)
from pipelines.sample._tessera import EMBEDDINGS_DIR, LANDMASKS_DIR, TESSERA_CLASSES, tile_name
from pipelines.sample.errors import InvalidSampleSize, SampleError, SampleExists

__all__ = [
    "BANDS_10M",
    "BANDS_20M",
    "CENTER_LAT",
    "CENTER_LNG",
    "CLEARING_DATE",
    "CONSTRUCTION_DATE",
    "EMBEDDINGS_DIR",
    "EPSG",
    "FLOOD_END",
    "FLOOD_START",
    "LANDMASKS_DIR",
    "MANIFEST_VERSION",
    "PERIOD_END",
    "PERIOD_START",
    "S1_ASSETS",
    "S1_COLLECTION",
    "S1_NODATA",
    "S2_ASSETS",
    "S2_COLLECTION",
    "SCL_CLOUD",
    "TESSERA_CLASSES",
    "TESSERA_COLLECTION",
    "TESSERA_YEARS",
    "InvalidSampleSize",
    "LandClass",
    "ProgressFn",
    "SampleError",
    "SampleExists",
    "SampleGrid",
    "SampleInfo",
    "SampleSize",
    "build_sample",
    "cli_main",
    "make_grid",
    "processing_baseline",
    "s1_dates",
    "s2_dates",
    "tile_name",
]
