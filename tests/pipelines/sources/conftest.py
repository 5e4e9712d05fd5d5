"""Shared fixtures: tiny GeoTIFFs, a small static catalog, and its loopback STAC API."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import pystac
import pytest
import rasterio
from affine import Affine

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "stac"
EPSG = 32645
ORIGIN = (329_000.0, 2_585_000.0)  # near Ranchi, UTM 45N


def load_fixture(name: str) -> dict[str, Any]:
    return json.loads((FIXTURES / name).read_text())


def write_tif(
    path: Path, *, shape=(8, 8), dtype="uint16", value=1500, nodata=0, epsg=EPSG, res=10.0
) -> Path:
    """A tiny tiled GeoTIFF in UTM 45N."""
    path.parent.mkdir(parents=True, exist_ok=True)
    data = np.full(shape, value, dtype=dtype)
    profile = {
        "driver": "GTiff",
        "height": shape[0],
        "width": shape[1],
        "count": 1,
        "dtype": dtype,
        "crs": f"EPSG:{epsg}",
        "transform": Affine(res, 0.0, ORIGIN[0], 0.0, -res, ORIGIN[1]),
        "nodata": nodata,
    }
    with rasterio.open(path, "w", **profile) as ds:
        ds.write(data, 1)
    return path


def _square(lon: float, lat: float, d: float = 0.02) -> tuple[dict[str, Any], list[float]]:
    bbox = [lon, lat, lon + d, lat + d]
    ring = [[lon, lat], [lon + d, lat], [lon + d, lat + d], [lon, lat + d], [lon, lat]]
    return {"type": "Polygon", "coordinates": [ring]}, bbox


# (id, lon, lat, datetime, cloud, roles-missing, crs-ok)
S2_SPECS = [
    ("s2-a", 85.30, 23.35, datetime(2023, 1, 5, 4, 50, tzinfo=UTC), 5.0, (), True),
    ("s2-b", 85.30, 23.35, datetime(2023, 1, 10, 4, 50, tzinfo=UTC), 40.0, (), True),
    ("s2-c", 85.30, 23.35, datetime(2023, 1, 15, 4, 50, tzinfo=UTC), 95.0, (), True),
    ("s2-d", 85.60, 23.35, datetime(2023, 1, 10, 4, 50, tzinfo=UTC), 1.0, (), True),
    ("s2-e", 85.30, 23.35, datetime(2023, 3, 1, 4, 50, tzinfo=UTC), 10.0, (), True),
    ("s2-old", 85.30, 23.35, datetime(2021, 12, 30, 4, 50, tzinfo=UTC), 3.0, (), True),
    ("s2-noscl", 85.30, 23.35, datetime(2023, 1, 20, 4, 50, tzinfo=UTC), 2.0, ("scl",), True),
    ("s2-nocrs", 85.30, 23.35, datetime(2023, 1, 25, 4, 50, tzinfo=UTC), 2.0, (), False),
]
S2_ROLES = {
    "blue": "B02",
    "green": "B03",
    "red": "B04",
    "nir": "B08",
    "swir16": "B11",
    "swir22": "B12",
    "scl": "SCL",
}
S1_SPECS = [
    ("s1-a", 85.30, 23.35, datetime(2023, 1, 6, 0, 30, tzinfo=UTC)),
    ("s1-b", 85.30, 23.35, datetime(2023, 1, 18, 0, 30, tzinfo=UTC)),
]


def build_catalog(root: Path) -> Path:
    """A small self-contained static catalog: 8 S2 items, 2 S1 items, real tiny COGs."""
    extent = pystac.Extent(
        pystac.SpatialExtent([[85.0, 23.0, 86.0, 24.0]]),
        pystac.TemporalExtent([[datetime(2021, 1, 1, tzinfo=UTC), None]]),
    )
    cat = pystac.Catalog(id="earthmem-test", description="test catalog")
    s2 = pystac.Collection(id="sentinel-2-l2a", description="S2 L2A", extent=extent)
    s1 = pystac.Collection(id="sentinel-1-rtc", description="S1 RTC", extent=extent)
    cat.add_child(s2)
    cat.add_child(s1)
    data_dir = root / "data"
    for item_id, lon, lat, when, cloud, missing, crs_ok in S2_SPECS:
        geometry, bbox = _square(lon, lat)
        props: dict[str, Any] = {
            "eo:cloud_cover": cloud,
            "platform": "sentinel-2b",
            "s2:processing_baseline": "05.09" if when.year > 2021 else "03.01",
        }
        if crs_ok:
            props["proj:epsg"] = EPSG
        else:
            props["proj:epsg"] = None
        item = pystac.Item(item_id, geometry, bbox, when, props, collection="sentinel-2-l2a")
        for role, band in S2_ROLES.items():
            if role in missing:
                continue
            res = 20.0 if role in ("swir16", "swir22", "scl") else 10.0
            tif = write_tif(
                data_dir / item_id / f"{band}.tif",
                shape=(4, 4) if res == 20 else (8, 8),
                dtype="uint8" if role == "scl" else "uint16",
                value=4 if role == "scl" else 2500,
                res=res,
            )
            item.add_asset(
                band, pystac.Asset(href=str(tif), media_type=pystac.MediaType.COG, roles=["data"])
            )
        s2.add_item(item)
    for item_id, lon, lat, when in S1_SPECS:
        geometry, bbox = _square(lon, lat)
        item = pystac.Item(
            item_id,
            geometry,
            bbox,
            when,
            {"proj:epsg": EPSG, "sar:instrument_mode": "IW"},
            collection="sentinel-1-rtc",
        )
        for pol in ("vv", "vh"):
            tif = write_tif(
                data_dir / item_id / f"{pol}.tif", dtype="float32", value=0.05, nodata=None
            )
            item.add_asset(
                pol, pystac.Asset(href=str(tif), media_type=pystac.MediaType.COG, roles=["data"])
            )
        s1.add_item(item)
    cat.normalize_hrefs(str(root / "catalog"))
    cat.make_all_asset_hrefs_relative()
    cat.save(catalog_type=pystac.CatalogType.SELF_CONTAINED)
    return root / "catalog" / "catalog.json"


@pytest.fixture(scope="session")
def small_catalog(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_catalog(tmp_path_factory.mktemp("stac"))


@pytest.fixture(scope="session")
def loopback_api(small_catalog: Path) -> Iterator[str]:
    from pipelines.sources.serve import serve_catalog

    with serve_catalog(small_catalog) as url:
        yield url
