"""Tessera (geotessera) embedding synthesis in the published tile format."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import rasterio.warp
from numpy.typing import NDArray
from rasterio.crs import CRS
from rasterio.transform import Affine
from scipy.ndimage import gaussian_filter

from pipelines.sample._geo import SampleGrid
from pipelines.sample._scene import LandClass, Scene, smooth_noise

__all__ = [
    "EMBEDDINGS_DIR",
    "LANDMASKS_DIR",
    "TESSERA_CLASSES",
    "TESSERA_DIM",
    "TesseraTile",
    "TesseraVintage",
    "prototypes",
    "render_tessera",
    "tessera_tile",
    "tile_name",
]

TESSERA_DIM = 128
"""Channels of a Tessera embedding."""
EMBEDDINGS_DIR = "global_0.1_degree_representation"
"""geotessera folder of the per-year embedding tiles."""
LANDMASKS_DIR = "global_0.1_degree_tiff_all"
"""geotessera folder of the per-tile landmask GeoTIFFs (CRS + transform)."""
TESSERA_CLASSES = ("farmland", "forest", "water", "town", "bare", "construction")
"""Surface types with their own prototype direction in embedding space."""


def tile_name(lon: float, lat: float) -> str:
    """geotessera name of the 0.1-degree tile containing (lon, lat): ``grid_{lon}_{lat}`` of its centre."""
    clon = math.floor(lon * 10.0) / 10.0 + 0.05
    clat = math.floor(lat * 10.0) / 10.0 + 0.05
    return f"grid_{clon:.2f}_{clat:.2f}"


@dataclass(frozen=True)
class TesseraTile:
    """The 0.1-degree tile, and the window of it that the sample writes."""

    name: str
    """Tile name, e.g. ``grid_85.35_23.35``."""
    lon: float
    """Tile centre longitude."""
    lat: float
    """Tile centre latitude."""
    epsg: int
    """UTM zone of the tile centre."""
    full_transform: Affine
    """Transform of the full published tile (origin = the cell's UTM bounds' north-west corner)."""
    full_shape: tuple[int, int]
    """(rows, cols) of the full published tile."""
    row0: int
    """First row of the clipped window in the full tile."""
    col0: int
    """First column of the clipped window in the full tile."""
    shape: tuple[int, int]
    """(rows, cols) of the clipped window written by the sample."""

    @property
    def transform(self) -> Affine:
        """Transform of the clipped window."""
        return self.full_transform @ Affine.translation(self.col0, self.row0)


def tessera_tile(grid: SampleGrid, lon: float, lat: float) -> TesseraTile:
    """Locate the Tessera tile of (lon, lat) and the window covering ``grid``."""
    name = tile_name(lon, lat)
    clon, clat = (float(p) for p in name.removeprefix("grid_").split("_"))
    epsg = (32600 if clat >= 0 else 32700) + int((clon + 180.0) // 6) + 1
    left, bottom, right, top = rasterio.warp.transform_bounds(
        CRS.from_epsg(4326), CRS.from_epsg(epsg), clon - 0.05, clat - 0.05, clon + 0.05, clat + 0.05
    )
    full_shape = (round((top - bottom) / 10.0), round((right - left) / 10.0))
    col0 = math.floor((grid.left - left) / 10.0)
    col1 = math.ceil((grid.right - left) / 10.0)
    row0 = math.floor((top - grid.top) / 10.0)
    row1 = math.ceil((top - grid.bottom) / 10.0)
    return TesseraTile(
        name=name,
        lon=clon,
        lat=clat,
        epsg=epsg,
        full_transform=Affine(10.0, 0.0, left, 0.0, -10.0, top),
        full_shape=full_shape,
        row0=row0,
        col0=col0,
        shape=(row1 - row0, col1 - col0),
    )


@dataclass(frozen=True, eq=False)
class TesseraVintage:
    """One year of quantised embeddings for the clipped tile."""

    year: int
    """The vintage year."""
    embedding: NDArray[np.int8]
    """Quantised embeddings (H, W, 128)."""
    scales: NDArray[np.float32]
    """Per-pixel scales (H, W); NaN = water, +inf = no data."""
    classes: NDArray[np.int8]
    """Dominant surface type per pixel (index into TESSERA_CLASSES) - ground truth, not published."""


def prototypes(seed: int) -> NDArray[np.float64]:
    """Orthonormal prototype directions, one row per TESSERA_CLASSES entry."""
    rng = np.random.default_rng([seed, 5])
    q, _ = np.linalg.qr(rng.standard_normal((TESSERA_DIM, len(TESSERA_CLASSES))))
    return np.asarray(q.T)


def _common_direction(seed: int, protos: NDArray[np.float64]) -> NDArray[np.float64]:
    rng = np.random.default_rng([seed, 8])
    v = rng.standard_normal(TESSERA_DIM)
    v -= protos.T @ (protos @ v)  # orthogonal to every prototype
    return np.asarray(v / np.linalg.norm(v))


def _nearest_scene_index(
    scene: Scene, tile: TesseraTile
) -> tuple[NDArray[np.intp], NDArray[np.intp]]:
    h, w = tile.shape
    t = tile.transform
    xs = t.c + (np.arange(w) + 0.5) * t.a
    ys = t.f + (np.arange(h) + 0.5) * t.e
    g = scene.grid
    cols = np.clip(np.floor((xs - g.left) / 10.0).astype(np.intp), 0, g.width - 1)
    rows = np.clip(np.floor((g.top - ys) / 10.0).astype(np.intp), 0, g.height - 1)
    return np.meshgrid(rows, cols, indexing="ij")


def land_mask(scene: Scene, tile: TesseraTile) -> NDArray[np.uint8]:
    """Landmask of the clipped tile: 1 = land, 0 = permanent water."""
    rr, cc = _nearest_scene_index(scene, tile)
    lc = scene.landcover[rr, cc]
    return np.asarray(~np.isin(lc, [LandClass.LAKE, LandClass.RIVER])).astype(np.uint8)


def render_tessera(scene: Scene, tile: TesseraTile, year: int, seed: int) -> TesseraVintage:
    """Synthesise the ``year`` vintage: prototypes + smooth noise, quantised to int8.

    Args:
        scene: the sample scene.
        tile: the Tessera tile window.
        year: 2023 or 2024.
        seed: random seed.

    Returns:
        The vintage.
    """
    rr, cc = _nearest_scene_index(scene, tile)
    lc = scene.landcover[rr, cc]
    clearing = scene.clearing[rr, cc]
    construction = scene.construction[rr, cc]
    flood = scene.flood[rr, cc]
    h, w = tile.shape
    k = {n: i for i, n in enumerate(TESSERA_CLASSES)}
    wts = np.zeros((len(TESSERA_CLASSES), h, w))
    wts[k["farmland"]][lc == LandClass.FARMLAND] = 1.0
    wts[k["forest"]][lc == LandClass.FOREST] = 1.0
    wts[k["water"]][(lc == LandClass.LAKE) | (lc == LandClass.RIVER)] = 1.0
    wts[k["town"]][lc == LandClass.TOWN] = 1.0
    if year == 2023:
        wts[:, construction] = 0.0
        wts[k["farmland"]][construction] = 0.75
        wts[k["construction"]][construction] = 0.25
    elif year >= 2024:
        wts[:, clearing] = 0.0
        wts[k["forest"]][clearing] = 0.2
        wts[k["bare"]][clearing] = 0.8
        wts[:, construction] = 0.0
        wts[k["construction"]][construction] = 1.0
        if year == 2024:
            wts[k["farmland"]][flood] = 0.93
            wts[k["water"]][flood] = 0.07
    # Mixed pixels at boundaries, as a 10 m sensor sees them.
    wts = np.stack([gaussian_filter(wi, 0.5, mode="nearest") for wi in wts])
    wts /= np.maximum(wts.sum(axis=0, keepdims=True), 1e-9)
    classes = np.argmax(wts, axis=0).astype(np.int8)

    protos = prototypes(seed)
    vec = 4.0 * np.einsum("chw,cd->hwd", wts, protos)
    # Real embeddings are not zero-mean: a shared component gives unrelated classes a
    # small positive cosine (about 0.15) instead of exactly 0.
    vec += 2.0 * _common_direction(seed, protos)
    # Spatially smooth variation shared by both years (soil, terrain), plus per-year noise.
    rng_shared = np.random.default_rng([seed, 6])
    dirs = rng_shared.standard_normal((8, TESSERA_DIM)) / math.sqrt(TESSERA_DIM)
    fields = np.stack([smooth_noise(rng_shared, (h, w), 3.0) for _ in range(8)])
    vec += 0.35 * np.einsum("khw,kd->hwd", fields, dirs)
    rng_year = np.random.default_rng([seed, 7, year])
    drift = rng_year.standard_normal(TESSERA_DIM)
    vec += 0.3 * drift / np.linalg.norm(drift)
    vec += 0.15 * rng_year.standard_normal((h, w, TESSERA_DIM))

    scales = (np.abs(vec).max(axis=2) / 127.0).astype(np.float32)
    q = np.clip(np.rint(vec / scales[..., None]), -127, 127).astype(np.int8)
    water = np.isin(lc, [LandClass.LAKE, LandClass.RIVER])
    scales[water] = np.nan
    q[water] = 0
    if year == 2023:
        n = max(2, h // 50)
        scales[h - n :, :n] = np.inf
        q[h - n :, :n] = 0
    return TesseraVintage(year=year, embedding=q, scales=scales, classes=classes)
