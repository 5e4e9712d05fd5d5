"""Reading scene rasters onto the cell64 lattice (pure functions over arrays).

A :class:`LatticeWindow` is a half-open range of lattice rows (``lat_q``) and
columns (``lng_q``); its arrays are stored south-to-north (row 0 = ``lat_q0``),
exactly as the cube holds them. Reprojection goes through a north-up EPSG:4326
grid whose pixels are the lattice cells, then flips rows.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import numpy as np
import numpy.typing as npt
import rasterio.warp
from affine import Affine
from rasterio.crs import CRS
from rasterio.enums import Resampling

from store import address, blocks

__all__ = ["LatticeWindow", "read_onto_lattice", "reproject_onto_lattice"]

WGS84 = CRS.from_epsg(4326)


@dataclass(frozen=True, slots=True)
class LatticeWindow:
    """A rectangle of lattice cells, half-open in both axes."""

    lat_q0: int
    """First row (southmost ``lat_q``)."""
    lat_q1: int
    """One past the last row."""
    lng_q0: int
    """First column (westmost ``lng_q``)."""
    lng_q1: int
    """One past the last column."""

    @property
    def shape(self) -> tuple[int, int]:
        """``(rows, columns)``."""
        return self.lat_q1 - self.lat_q0, self.lng_q1 - self.lng_q0

    @property
    def north_up_transform(self) -> Affine:
        """Affine of the north-up EPSG:4326 grid whose pixels are these cells."""
        x0 = (self.lng_q0 - 0.5) * address.LNG_STEP - 180.0
        y0 = (self.lat_q1 - 0.5) * address.LAT_STEP - 90.0
        return Affine(address.LNG_STEP, 0.0, x0, 0.0, -address.LAT_STEP, y0)

    def bounds(self) -> tuple[float, float, float, float]:
        """``(min_lng, min_lat, max_lng, max_lat)`` of the outer cell edges."""
        t = self.north_up_transform
        h, w = self.shape
        return t.c, t.f - h * address.LAT_STEP, t.c + w * address.LNG_STEP, t.f

    def centres(self) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]:
        """Centre latitudes (rows, south to north) and longitudes (columns)."""
        lat, _ = address.q_center(np.arange(self.lat_q0, self.lat_q1), 0)
        _, lng = address.q_center(0, np.arange(self.lng_q0, self.lng_q1))
        return np.asarray(lat), np.asarray(lng)

    @classmethod
    def of_block(cls, block: blocks.Block) -> LatticeWindow:
        """The window of a store block."""
        return cls(*blocks.block_q_range(block))

    def intersect(self, other: LatticeWindow) -> LatticeWindow | None:
        """Overlap of two windows, or None."""
        w = LatticeWindow(
            max(self.lat_q0, other.lat_q0),
            min(self.lat_q1, other.lat_q1),
            max(self.lng_q0, other.lng_q0),
            min(self.lng_q1, other.lng_q1),
        )
        return w if w.lat_q1 > w.lat_q0 and w.lng_q1 > w.lng_q0 else None


def reproject_onto_lattice(
    data: npt.NDArray[Any],
    src_crs: Any,
    src_transform: Affine | tuple[float, ...],
    window: LatticeWindow,
    *,
    resampling: Resampling = Resampling.bilinear,
    src_nodata: float | None = None,
    dst_dtype: Any = np.float32,
    dst_nodata: float = np.nan,
) -> npt.NDArray[Any]:
    """Warp one band onto a lattice window (rows south to north).

    Args:
        data: 2-D source array.
        src_crs: source CRS (EPSG int, string or rasterio CRS).
        src_transform: source affine (or its 6 GDAL/rasterio coefficients).
        window: target lattice window.
        resampling: bilinear or average for reflectance/backscatter, nearest for classes.
        src_nodata: source nodata value (excluded from resampling).
        dst_dtype: output dtype.
        dst_nodata: fill for cells the source does not cover.
    """
    crs = CRS.from_user_input(src_crs)
    transform = src_transform if isinstance(src_transform, Affine) else Affine(*src_transform[:6])
    out = np.full(window.shape, dst_nodata, dtype=dst_dtype)
    rasterio.warp.reproject(
        source=data,
        destination=out,
        src_transform=transform,
        src_crs=crs,
        src_nodata=src_nodata,
        dst_transform=window.north_up_transform,
        dst_crs=WGS84,
        dst_nodata=dst_nodata,
        resampling=resampling,
    )
    return out[::-1].copy()


def read_onto_lattice(
    href: str,
    window: LatticeWindow,
    *,
    resampling: Resampling = Resampling.bilinear,
    dst_dtype: Any = np.float32,
    dst_nodata: float = np.nan,
    margin_px: int = 2,
) -> npt.NDArray[Any]:
    """Read the part of a raster covering ``window`` with rioxarray and warp it.

    Only the source pixels under the window (plus a margin) are read, so a
    100 km scene costs what the block covers, not the whole file.
    """
    import rioxarray
    import xarray as xr
    from rasterio.windows import from_bounds

    # parse_coordinates=False and an integer window: rioxarray's clip_box builds
    # coordinate arrays for the whole scene, which a window read never needs
    opened = rioxarray.open_rasterio(href, masked=False, cache=False, parse_coordinates=False)
    if not isinstance(
        opened, xr.DataArray
    ):  # a multi-subdataset file (HDF/netCDF) is not a scene band
        raise ValueError(f"{href} is not a single raster band")
    with opened as da:
        crs = da.rio.crs
        transform = da.rio.transform(recalc=False)
        nodata = da.rio.nodata
        min_lng, min_lat, max_lng, max_lat = window.bounds()
        left, bottom, right, top = rasterio.warp.transform_bounds(
            WGS84, crs, min_lng, min_lat, max_lng, max_lat, densify_pts=21
        )
        h, w = da.shape[-2:]
        if resampling == Resampling.nearest:
            gmap = _nearest_map(crs.to_wkt(), tuple(transform)[:6], (h, w), window)
            if gmap is None:
                return np.full(window.shape, dst_nodata, dtype=dst_dtype)
            rows, cols, inside, (r0, r1, c0, c1) = gmap
            band = np.asarray(da.isel(band=0, y=slice(r0, r1), x=slice(c0, c1)).values)
            out = np.full(window.shape, dst_nodata, dtype=dst_dtype)
            vals = band[rows - r0, cols - c0].astype(dst_dtype)
            if nodata is not None:
                vals[band[rows - r0, cols - c0] == nodata] = dst_nodata
            out[inside] = vals
            return out
        win = from_bounds(left, bottom, right, top, transform=transform)
        r0 = max(0, int(np.floor(win.row_off)) - margin_px)
        c0 = max(0, int(np.floor(win.col_off)) - margin_px)
        r1 = min(h, int(np.ceil(win.row_off + win.height)) + margin_px)
        c1 = min(w, int(np.ceil(win.col_off + win.width)) + margin_px)
        if r1 <= r0 or c1 <= c0:  # the scene misses the window
            return np.full(window.shape, dst_nodata, dtype=dst_dtype)
        band = np.asarray(da.isel(band=0, y=slice(r0, r1), x=slice(c0, c1)).values)
    sub_transform = transform @ Affine.translation(c0, r0)
    return reproject_onto_lattice(
        band,
        crs,
        sub_transform,
        window,
        resampling=resampling,
        src_nodata=nodata,
        dst_dtype=dst_dtype,
        dst_nodata=dst_nodata,
    )


@lru_cache(maxsize=64)
def _nearest_map(
    crs_wkt: str, transform: tuple[float, ...], shape: tuple[int, int], window: LatticeWindow
) -> (
    tuple[
        npt.NDArray[np.int64],
        npt.NDArray[np.int64],
        npt.NDArray[np.bool_],
        tuple[int, int, int, int],
    ]
    | None
):
    """Source pixel under each lattice cell centre (nearest neighbour), cached per grid.

    Every band and every date of one tile share a grid, so the coordinate
    transform runs once per (grid, window) instead of once per band read.
    """
    from pyproj import Transformer

    lat, lng = window.centres()
    lng2, lat2 = np.meshgrid(lng, lat)
    x, y = Transformer.from_crs("EPSG:4326", crs_wkt, always_xy=True).transform(lng2, lat2)
    col_f, row_f = ~Affine(*transform) @ (x, y)
    rows = np.floor(row_f).astype(np.int64)
    cols = np.floor(col_f).astype(np.int64)
    inside = (rows >= 0) & (rows < shape[0]) & (cols >= 0) & (cols < shape[1])
    if not inside.any():
        return None
    r, c = rows[inside], cols[inside]
    return r, c, inside, (int(r.min()), int(r.max()) + 1, int(c.min()), int(c.max()) + 1)
