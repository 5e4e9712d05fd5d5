"""Deterministic raster and JSON writers."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import rasterio
from numpy.typing import NDArray
from rasterio.crs import CRS
from rasterio.transform import Affine

__all__ = ["COG_MEDIA_TYPE", "GTIFF_MEDIA_TYPE", "write_cog", "write_gtiff", "write_json"]

COG_MEDIA_TYPE = "image/tiff; application=geotiff; profile=cloud-optimized"
"""Media type of Cloud-Optimized GeoTIFF assets."""
GTIFF_MEDIA_TYPE = "image/tiff; application=geotiff"
"""Media type of plain GeoTIFF assets."""


def _profile(
    data: NDArray[Any], transform: Affine, epsg: int, nodata: float | None
) -> dict[str, Any]:
    return {
        "width": data.shape[1],
        "height": data.shape[0],
        "count": 1,
        "dtype": data.dtype.name,
        "crs": CRS.from_epsg(epsg),
        "transform": transform,
        "nodata": nodata,
        "compress": "DEFLATE",
        "predictor": 3 if data.dtype.kind == "f" else 2,
    }


def write_cog(
    path: Path, data: NDArray[Any], transform: Affine, epsg: int, nodata: float | None
) -> int:
    """Write a single-band Cloud-Optimized GeoTIFF (deflate, 256 px blocks, no timestamps).

    Returns:
        The file size in bytes.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    with rasterio.open(
        path, "w", driver="COG", blocksize=256, **_profile(data, transform, epsg, nodata)
    ) as ds:
        ds.write(data, 1)
    return path.stat().st_size


def write_gtiff(
    path: Path, data: NDArray[Any], transform: Affine, epsg: int, nodata: float | None
) -> int:
    """Write a single-band tiled GeoTIFF (deflate).

    Returns:
        The file size in bytes.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    prof = _profile(data, transform, epsg, nodata)
    with rasterio.open(
        path, "w", driver="GTiff", tiled=True, blockxsize=256, blockysize=256, **prof
    ) as ds:
        ds.write(data, 1)
    return path.stat().st_size


def write_json(path: Path, obj: Any) -> int:
    """Write JSON with sorted keys and a trailing newline (byte-stable).

    Returns:
        The file size in bytes.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps(obj, indent=2, sort_keys=True, ensure_ascii=False, allow_nan=False) + "\n"
    path.write_text(text, encoding="utf-8")
    return path.stat().st_size


def as_float_list(values: Any) -> list[float]:
    """Plain Python floats (for JSON) from an array-like."""
    return [float(v) for v in np.asarray(values, dtype=np.float64).ravel()]
