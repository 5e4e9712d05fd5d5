"""Geometry of the sample area: the UTM pixel grid and lon/lat conversions."""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property
from typing import Literal

import numpy as np
from numpy.typing import NDArray
from pyproj import Transformer
from rasterio.transform import Affine

__all__ = [
    "CENTER_LAT",
    "CENTER_LNG",
    "EPSG",
    "SIZES",
    "SampleGrid",
    "SampleSize",
    "make_grid",
]

SampleSize = Literal["tiny", "demo"]

CENTER_LAT = 23.36
"""Latitude of the sample area's centre (near Kanke, north of Ranchi, Jharkhand)."""
CENTER_LNG = 85.33
"""Longitude of the sample area's centre."""
EPSG = 32645
"""WGS 84 / UTM zone 45N: the Sentinel-2 / Sentinel-1 / Tessera CRS at this place."""

SIZES: dict[str, int] = {"tiny": 40, "demo": 200}
"""Side of the square area in 10 m pixels per size (tiny = 400 m, demo = 2 km)."""


@dataclass(frozen=True)
class SampleGrid:
    """The 10 m UTM pixel grid of the sample area (north-up, square pixels)."""

    epsg: int
    """EPSG code of the projected CRS."""
    left: float
    """Easting of the west edge, metres (a multiple of 20 so 20 m pixels nest)."""
    top: float
    """Northing of the north edge, metres (a multiple of 20)."""
    width: int
    """Number of 10 m columns."""
    height: int
    """Number of 10 m rows."""

    @property
    def res(self) -> float:
        """Pixel size of the fine grid in metres."""
        return 10.0

    def transform(self, res: float = 10.0) -> Affine:
        """Affine transform of the grid at resolution ``res`` (10 or 20 m)."""
        return Affine(res, 0.0, self.left, 0.0, -res, self.top)

    def shape(self, res: float = 10.0) -> tuple[int, int]:
        """(rows, cols) of the grid at resolution ``res``."""
        f = round(res / 10.0)
        return self.height // f, self.width // f

    @property
    def right(self) -> float:
        """Easting of the east edge."""
        return self.left + self.width * 10.0

    @property
    def bottom(self) -> float:
        """Northing of the south edge."""
        return self.top - self.height * 10.0

    @cached_property
    def _to_lonlat(self) -> Transformer:
        return Transformer.from_crs(self.epsg, 4326, always_xy=True)

    @cached_property
    def _from_lonlat(self) -> Transformer:
        return Transformer.from_crs(4326, self.epsg, always_xy=True)

    def xy_to_lonlat(
        self, x: NDArray[np.float64] | float, y: NDArray[np.float64] | float
    ) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
        """Project UTM coordinates to (lon, lat) degrees."""
        lon, lat = self._to_lonlat.transform(x, y)
        return np.asarray(lon, dtype=np.float64), np.asarray(lat, dtype=np.float64)

    def lonlat_to_xy(
        self, lon: NDArray[np.float64] | float, lat: NDArray[np.float64] | float
    ) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
        """Project (lon, lat) degrees to UTM metres."""
        x, y = self._from_lonlat.transform(lon, lat)
        return np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)

    def pixel_to_xy(self, col: float, row: float) -> tuple[float, float]:
        """UTM coordinates of fractional pixel position (col, row) on the 10 m grid."""
        return self.left + col * 10.0, self.top - row * 10.0

    def bbox_lonlat(self) -> tuple[float, float, float, float]:
        """(west, south, east, north) in degrees, densified along the edges."""
        n = 21
        t = np.linspace(0.0, 1.0, n)
        xs = np.concatenate(
            [
                self.left + t * (self.right - self.left),
                np.full(n, self.right),
                self.right - t * (self.right - self.left),
                np.full(n, self.left),
            ]
        )
        ys = np.concatenate(
            [
                np.full(n, self.top),
                self.top - t * (self.top - self.bottom),
                np.full(n, self.bottom),
                self.bottom + t * (self.top - self.bottom),
            ]
        )
        lon, lat = self.xy_to_lonlat(xs, ys)
        return (
            round(float(lon.min()), 7),
            round(float(lat.min()), 7),
            round(float(lon.max()), 7),
            round(float(lat.max()), 7),
        )

    def footprint_lonlat(self) -> list[list[float]]:
        """Closed ring (lon, lat) of the four grid corners, counter-clockwise."""
        xs = [self.left, self.right, self.right, self.left, self.left]
        ys = [self.bottom, self.bottom, self.top, self.top, self.bottom]
        lon, lat = self.xy_to_lonlat(np.array(xs), np.array(ys))
        return [[round(float(a), 7), round(float(b), 7)] for a, b in zip(lon, lat, strict=True)]


def make_grid(size: SampleSize) -> SampleGrid:
    """Build the sample grid for ``size``, centred on (CENTER_LAT, CENTER_LNG).

    Args:
        size: ``"tiny"`` (40 x 40 pixels) or ``"demo"`` (200 x 200 pixels).

    Returns:
        The grid, with its corners snapped to multiples of 20 m.

    Raises:
        ValueError: for an unknown size.
    """
    if size not in SIZES:
        raise ValueError(f"unknown sample size {size!r}; expected one of {sorted(SIZES)}")
    n = SIZES[size]
    tr = Transformer.from_crs(4326, EPSG, always_xy=True)
    xc, yc = tr.transform(CENTER_LNG, CENTER_LAT)
    half = n * 10.0 / 2.0
    left = math.floor((xc - half) / 20.0 + 0.5) * 20.0
    top = math.floor((yc + half) / 20.0 + 0.5) * 20.0
    return SampleGrid(epsg=EPSG, left=left, top=top, width=n, height=n)
