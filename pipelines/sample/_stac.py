"""STAC objects of the sample area (pystac), written as a self-contained static catalog."""

from __future__ import annotations

import json
from datetime import UTC, date, datetime, time
from pathlib import Path
from typing import Any

import pystac
from pystac.stac_io import DefaultStacIO

from pipelines.sample._geo import SampleGrid
from pipelines.sample._io import COG_MEDIA_TYPE, GTIFF_MEDIA_TYPE
from pipelines.sample._optical import processing_baseline
from pipelines.sample._radar import S1_ENL, S1_NODATA
from pipelines.sample._scene import PERIOD_END, PERIOD_START
from pipelines.sample._tessera import TESSERA_DIM, TesseraTile

__all__ = [
    "EO_EXT",
    "NPY_MEDIA_TYPE",
    "PROJ_EXT",
    "RASTER_EXT",
    "S1_ASSETS",
    "S1_COLLECTION",
    "S2_ASSETS",
    "S2_COLLECTION",
    "SAR_EXT",
    "SAT_EXT",
    "TESSERA_COLLECTION",
    "build_catalog",
    "mgrs_tile",
    "s1_item",
    "s1_item_id",
    "s2_item",
    "s2_item_id",
    "save_catalog",
    "tessera_item",
]

EO_EXT = "https://stac-extensions.github.io/eo/v1.1.0/schema.json"
"""Electro-optical extension (eo:bands, eo:cloud_cover)."""
PROJ_EXT = "https://stac-extensions.github.io/projection/v2.0.0/schema.json"
"""Projection extension v2 (proj:code, proj:shape, proj:transform, proj:bbox)."""
RASTER_EXT = "https://stac-extensions.github.io/raster/v1.1.0/schema.json"
"""Raster extension (raster:bands with scale / offset / nodata)."""
SAR_EXT = "https://stac-extensions.github.io/sar/v1.0.0/schema.json"
"""SAR extension."""
SAT_EXT = "https://stac-extensions.github.io/sat/v1.0.0/schema.json"
"""Satellite extension (sat:orbit_state, sat:relative_orbit)."""
NPY_MEDIA_TYPE = "application/x-npy"
"""Media type of NumPy ``.npy`` assets."""

S2_COLLECTION = "sentinel-2-l2a"
"""Collection id of the Sentinel-2 L2A items."""
S1_COLLECTION = "sentinel-1-rtc"
"""Collection id of the Sentinel-1 RTC items."""
TESSERA_COLLECTION = "tessera-embeddings"
"""Collection id of the Tessera items."""

# asset key -> (file band, common name, description, centre wavelength um, FWHM um, resolution m)
S2_ASSETS: dict[str, tuple[str, str, str, float, float, int]] = {
    "blue": ("B02", "blue", "Blue (band 2)", 0.49, 0.098, 10),
    "green": ("B03", "green", "Green (band 3)", 0.56, 0.045, 10),
    "red": ("B04", "red", "Red (band 4)", 0.665, 0.038, 10),
    "nir": ("B08", "nir", "NIR 1 (band 8)", 0.842, 0.145, 10),
    "swir16": ("B11", "swir16", "SWIR 1 (band 11)", 1.61, 0.143, 20),
    "swir22": ("B12", "swir22", "SWIR 2 (band 12)", 2.19, 0.242, 20),
}
"""Sentinel-2 reflectance assets (Earth Search v1 keys); files are ``<band>.tif``; ``scl`` is separate."""
S1_ASSETS = ("vv", "vh")
"""Sentinel-1 RTC asset keys; files are ``vv.tif`` / ``vh.tif``."""

_S1_REF_ORBIT = 46629  # Synthetic absolute orbit of the first pass; S1A repeats every 175 orbits.


def mgrs_tile(grid: SampleGrid) -> str:
    """MGRS 100 km square of the grid centre (e.g. ``45QUF``) for Sentinel-2 item ids."""
    zone = grid.epsg - 32600
    x = (grid.left + grid.right) / 2.0
    y = (grid.top + grid.bottom) / 2.0
    sets = ["ABCDEFGH", "JKLMNPQR", "STUVWXYZ"]
    col = sets[(zone - 1) % 3][int(x // 100000) - 1]
    rows = "ABCDEFGHJKLMNPQRSTUV"
    row = rows[(int(y // 100000) + (5 if zone % 2 == 0 else 0)) % 20]
    bands = "CDEFGHJKLMNPQRSTUVWX"
    lat = grid.xy_to_lonlat(x, y)[1]
    band = bands[min(int((float(lat) + 80.0) // 8), 19)]
    return f"{zone}{band}{col}{row}"


def _dt(d: date, t: time) -> datetime:
    return datetime.combine(d, t, tzinfo=UTC)


def _geometry(grid: SampleGrid) -> dict[str, Any]:
    return {"type": "Polygon", "coordinates": [grid.footprint_lonlat()]}


def _proj(grid: SampleGrid, res: float) -> dict[str, Any]:
    t = grid.transform(res)
    return {
        "proj:shape": list(grid.shape(res)),
        "proj:transform": [t.a, t.b, t.c, t.d, t.e, t.f],
    }


def _s2_platform(index: int) -> str:
    return "sentinel-2a" if index % 2 == 0 else "sentinel-2b"


def s2_item_id(grid: SampleGrid, d: date, index: int) -> str:
    """Earth Search style id, e.g. ``S2A_45QUF_20230102_0_L2A``; ``index`` counts 5-day steps."""
    return f"S2{_s2_platform(index)[-1].upper()}_{mgrs_tile(grid)}_{d:%Y%m%d}_0_L2A"


def s2_item(
    grid: SampleGrid, d: date, index: int, cloud_cover: float, item_dir: Path
) -> pystac.Item:
    """The STAC item of one Sentinel-2 L2A overpass whose COGs sit in ``item_dir``."""
    platform = _s2_platform(index)
    item_id = s2_item_id(grid, d, index)
    props: dict[str, Any] = {
        "platform": platform,
        "constellation": "sentinel-2",
        "instruments": ["msi"],
        "gsd": 10,
        "eo:cloud_cover": cloud_cover,
        "s2:processing_baseline": processing_baseline(d),
        "s2:product_type": "S2MSI2A",
        "s2:mgrs_tile": mgrs_tile(grid),
        "proj:code": f"EPSG:{grid.epsg}",
        "proj:bbox": [grid.left, grid.bottom, grid.right, grid.top],
        "earthmem:synthetic": True,
        **_proj(grid, 10.0),
    }
    item = pystac.Item(
        id=item_id,
        geometry=_geometry(grid),
        bbox=list(grid.bbox_lonlat()),
        datetime=_dt(d, time(4, 56, 29, 24000)),
        properties=props,
        stac_extensions=[EO_EXT, PROJ_EXT, RASTER_EXT],
    )
    for key, (band, common, desc, cw, fwhm, res) in S2_ASSETS.items():
        item.add_asset(
            key,
            pystac.Asset(
                href=str(item_dir / f"{band}.tif"),
                media_type=COG_MEDIA_TYPE,
                title=f"{desc} - {res}m",
                roles=["data", "reflectance"],
                extra_fields={
                    "gsd": res,
                    "eo:bands": [
                        {
                            "name": band,
                            "common_name": common,
                            "description": desc,
                            "center_wavelength": cw,
                            "full_width_half_max": fwhm,
                        }
                    ],
                    **_proj(grid, float(res)),
                    "raster:bands": [
                        {
                            "nodata": 0,
                            "data_type": "uint16",
                            "bits_per_sample": 15,
                            "spatial_resolution": res,
                            "scale": 0.0001,
                            "offset": -0.1,
                        }
                    ],
                },
            ),
        )
    item.add_asset(
        "scl",
        pystac.Asset(
            href=str(item_dir / "SCL.tif"),
            media_type=COG_MEDIA_TYPE,
            title="Scene classification map (SCL)",
            roles=["data"],
            extra_fields={
                "gsd": 20,
                **_proj(grid, 20.0),
                "raster:bands": [
                    {"nodata": 0, "data_type": "uint8", "spatial_resolution": 20, "unit": "class"}
                ],
            },
        ),
    )
    return item


def s1_item_id(d: date, pass_index: int) -> str:
    """Planetary Computer style id, e.g. ``S1A_IW_GRDH_1SDV_20230105T002231_20230105T002256_046629_059698_rtc``."""
    orbit = _S1_REF_ORBIT + 175 * pass_index
    take = (0x59698 + 0x3A7 * pass_index) & 0xFFFFFF
    return f"S1A_IW_GRDH_1SDV_{d:%Y%m%d}T002231_{d:%Y%m%d}T002256_{orbit:06d}_{take:06X}_rtc"


def s1_item(grid: SampleGrid, d: date, pass_index: int, item_dir: Path) -> pystac.Item:
    """The STAC item of one Sentinel-1 RTC overpass whose COGs sit in ``item_dir``.

    Args:
        grid: the sample grid.
        d: acquisition date.
        pass_index: number of 12-day cycles since the first pass of 2023-01-05.
        item_dir: directory holding ``vv.tif`` and ``vh.tif``.
    """
    orbit = _S1_REF_ORBIT + 175 * pass_index
    start = _dt(d, time(0, 22, 31))
    item_id = s1_item_id(d, pass_index)
    props: dict[str, Any] = {
        "platform": "sentinel-1a",
        "constellation": "sentinel-1",
        "instruments": ["c-sar"],
        "gsd": 10,
        "sar:instrument_mode": "IW",
        "sar:frequency_band": "C",
        "sar:center_frequency": 5.405,
        "sar:polarizations": ["VV", "VH"],
        "sar:product_type": "GRD",
        "sar:resolution_range": 20,
        "sar:resolution_azimuth": 22,
        "sar:pixel_spacing_range": 10,
        "sar:pixel_spacing_azimuth": 10,
        "sar:looks_equivalent_number": S1_ENL,
        "sar:observation_direction": "right",
        "sat:orbit_state": "descending",
        "sat:relative_orbit": 19,
        "sat:absolute_orbit": orbit,
        "proj:code": f"EPSG:{grid.epsg}",
        "proj:bbox": [grid.left, grid.bottom, grid.right, grid.top],
        "earthmem:synthetic": True,
        **_proj(grid, 10.0),
    }
    item = pystac.Item(
        id=item_id,
        geometry=_geometry(grid),
        bbox=list(grid.bbox_lonlat()),
        datetime=start,
        properties=props,
        stac_extensions=[SAR_EXT, SAT_EXT, PROJ_EXT, RASTER_EXT],
    )
    for key in S1_ASSETS:
        item.add_asset(
            key,
            pystac.Asset(
                href=str(item_dir / f"{key}.tif"),
                media_type=COG_MEDIA_TYPE,
                title=f"{key.upper()}: terrain-corrected gamma nought, linear power",
                roles=["data"],
                extra_fields={
                    "sar:polarizations": [key.upper()],
                    "raster:bands": [
                        {
                            "nodata": S1_NODATA,
                            "data_type": "float32",
                            "spatial_resolution": 10,
                            "unit": "linear power",
                        }
                    ],
                },
            ),
        )
    return item


def tessera_item(
    grid: SampleGrid, tile: TesseraTile, year: int, embedding: Path, scales: Path, landmask: Path
) -> pystac.Item:
    """The STAC item of one Tessera tile-year."""
    t = tile.transform
    h, w = tile.shape
    left, top = t.c, t.f
    right, bottom = left + w * t.a, top + h * t.e
    footprint = grid.__class__(epsg=tile.epsg, left=left, top=top, width=w, height=h)
    props: dict[str, Any] = {
        "start_datetime": f"{year}-01-01T00:00:00Z",
        "end_datetime": f"{year}-12-31T23:59:59Z",
        "tessera:year": year,
        "tessera:tile": tile.name,
        "tessera:dim": TESSERA_DIM,
        "tessera:clipped": True,
        "tessera:full_shape": list(tile.full_shape),
        "tessera:window": [tile.row0, tile.col0],
        "proj:code": f"EPSG:{tile.epsg}",
        "proj:shape": [h, w],
        "proj:transform": [t.a, t.b, t.c, t.d, t.e, t.f],
        "proj:bbox": [left, bottom, right, top],
        "earthmem:synthetic": True,
    }
    item = pystac.Item(
        id=f"{tile.name}_{year}",
        geometry=_geometry(footprint),
        bbox=list(footprint.bbox_lonlat()),
        datetime=datetime(year, 1, 1, tzinfo=UTC),
        properties=props,
        stac_extensions=[PROJ_EXT],
    )
    item.add_asset(
        "embedding",
        pystac.Asset(
            href=str(embedding),
            media_type=NPY_MEDIA_TYPE,
            roles=["data"],
            title="Quantised embeddings (H, W, 128) int8",
            extra_fields={"tessera:dtype": "int8", "tessera:shape": [h, w, TESSERA_DIM]},
        ),
    )
    item.add_asset(
        "scales",
        pystac.Asset(
            href=str(scales),
            media_type=NPY_MEDIA_TYPE,
            roles=["data"],
            title="Per-pixel dequantisation scales (H, W) float32; NaN = water, +inf = no data",
            extra_fields={"tessera:dtype": "float32", "tessera:shape": [h, w]},
        ),
    )
    item.add_asset(
        "landmask",
        pystac.Asset(
            href=str(landmask),
            media_type=GTIFF_MEDIA_TYPE,
            roles=["metadata"],
            title="Landmask (1 = land, 0 = water) giving the tile's UTM CRS and transform",
        ),
    )
    return item


def _collection(
    cid: str, title: str, description: str, grid: SampleGrid, keywords: list[str]
) -> pystac.Collection:
    extent = pystac.Extent(
        pystac.SpatialExtent([list(grid.bbox_lonlat())]),
        pystac.TemporalExtent(
            [
                [
                    datetime.combine(PERIOD_START, time(0), tzinfo=UTC),
                    datetime.combine(PERIOD_END, time(23, 59, 59), tzinfo=UTC),
                ]
            ]
        ),
    )
    return pystac.Collection(
        id=cid,
        title=title,
        description=description,
        extent=extent,
        license="CC0-1.0",
        keywords=keywords,
        providers=[
            pystac.Provider(name="earthmem sample generator", roles=[pystac.ProviderRole.PRODUCER])
        ],
        catalog_type=pystac.CatalogType.SELF_CONTAINED,
    )


def build_catalog(
    grid: SampleGrid,
    s2: list[pystac.Item],
    s1: list[pystac.Item],
    tessera: list[pystac.Item],
    size: str,
    seed: int,
) -> pystac.Catalog:
    """Assemble the root catalog with its three collections."""
    cat = pystac.Catalog(
        id="earthmem-sample",
        title=f"earthmem sample area ({size}, seed {seed})",
        description="Synthetic but format-faithful Sentinel-2 L2A, Sentinel-1 RTC and Tessera data for an "
        "area near Kanke, Ranchi (Jharkhand, India); see manifest.json for the planted events.",
        catalog_type=pystac.CatalogType.SELF_CONTAINED,
    )
    for cid, title, desc, kws, items in [
        (
            S2_COLLECTION,
            "Sentinel-2 Level-2A (synthetic sample)",
            "Bottom-of-atmosphere reflectance COGs in the Earth Search v1 layout; DN = 10000 * reflectance + 1000.",
            ["sentinel", "copernicus", "msi", "l2a", "sample"],
            s2,
        ),
        (
            S1_COLLECTION,
            "Sentinel-1 RTC (synthetic sample)",
            "Radiometrically terrain-corrected gamma nought, VV and VH, linear power, float32.",
            ["sentinel", "copernicus", "sar", "rtc", "sample"],
            s1,
        ),
        (
            TESSERA_COLLECTION,
            "Tessera embeddings (synthetic sample)",
            "Annual 128-D int8 embeddings with float32 per-pixel scales in the geotessera tile layout, "
            "clipped to the sample area.",
            ["tessera", "embeddings", "sample"],
            tessera,
        ),
    ]:
        coll = _collection(cid, title, desc, grid, kws)
        for it in items:
            coll.add_item(it)
        cat.add_child(coll)
    return cat


class _SortedStacIO(DefaultStacIO):
    """Writes STAC JSON with sorted keys so that files are byte-stable."""

    def json_dumps(self, json_dict: dict[str, Any], *args: Any, **kwargs: Any) -> str:
        return json.dumps(json_dict, indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def save_catalog(catalog: pystac.Catalog, root: Path) -> Path:
    """Normalise hrefs under ``root`` and save self-contained with relative asset hrefs.

    Returns:
        Path of ``catalog.json``.
    """
    catalog.normalize_hrefs(str(root))
    catalog.make_all_asset_hrefs_relative()
    catalog.save(catalog_type=pystac.CatalogType.SELF_CONTAINED, stac_io=_SortedStacIO())
    return root / "catalog.json"
