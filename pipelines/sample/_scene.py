"""The sample area's land cover, planted events and named features (pure computation)."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import date
from enum import IntEnum
from typing import Any

import numpy as np
import rasterio.features
import shapely
from numpy.typing import NDArray
from scipy.ndimage import gaussian_filter
from scipy.spatial import cKDTree
from shapely.geometry import MultiPolygon, Polygon, mapping, shape
from shapely.ops import unary_union

from pipelines.sample._geo import SampleGrid

__all__ = [
    "CLEARING_DATE",
    "CONSTRUCTION_DATE",
    "FLOOD_END",
    "FLOOD_START",
    "PERIOD_END",
    "PERIOD_START",
    "LandClass",
    "Scene",
    "build_scene",
    "class_table",
    "smooth_noise",
]

PERIOD_START = date(2023, 1, 1)
"""First day covered by the sample time series."""
PERIOD_END = date(2024, 12, 31)
"""Last day covered by the sample time series."""
CLEARING_DATE = date(2024, 3, 15)
"""Day the forest patch is cleared (bare soil from the next day on)."""
FLOOD_START = date(2024, 8, 1)
"""First day of the monsoon flood (inclusive)."""
FLOOD_END = date(2024, 8, 25)
"""Last day of the monsoon flood (inclusive)."""
CONSTRUCTION_DATE = date(2023, 10, 1)
"""Day the construction site is stripped bare."""


class LandClass(IntEnum):
    """Codes of the land-cover map (``landcover.tif``); 0 is nodata."""

    FARMLAND = 1
    FOREST = 2
    LAKE = 3
    RIVER = 4
    TOWN = 5


_CLASS_INFO: dict[LandClass, tuple[str, str, str]] = {
    LandClass.FARMLAND: (
        "farmland",
        "Rain-fed and irrigated fields: kharif rice Jul-Oct, rabi wheat/mustard Dec-Mar",
        "#e6c84f",
    ),
    LandClass.FOREST: ("forest", "Dry deciduous sal forest (partial leaf-fall Mar-May)", "#1b7a2e"),
    LandClass.LAKE: ("lake", "Permanent open water (reservoir)", "#2b6cd4"),
    LandClass.RIVER: ("river", "Permanent river channel, turbid in the monsoon", "#4fa3e0"),
    LandClass.TOWN: ("town", "Dense built-up area with scattered trees", "#c0392b"),
}


def class_table() -> list[dict[str, Any]]:
    """The land-cover class table written to ``landcover_classes.json``."""
    return [
        {"code": int(c), "name": n, "description": d, "color": col}
        for c, (n, d, col) in _CLASS_INFO.items()
    ]


def smooth_noise(
    rng: np.random.Generator, shape: tuple[int, int], sigma: float
) -> NDArray[np.float64]:
    """Spatially smooth Gaussian noise with unit standard deviation.

    Args:
        rng: source of randomness.
        shape: (rows, cols).
        sigma: correlation length in pixels.

    Returns:
        float64 array of ``shape``.
    """
    f = gaussian_filter(rng.standard_normal(shape), sigma=max(sigma, 0.5), mode="reflect")
    sd = float(f.std())
    return f / sd if sd > 0 else f


@dataclass(frozen=True, eq=False)
class Scene:
    """Static description of the sample area on its 10 m grid."""

    grid: SampleGrid
    """The pixel grid."""
    landcover: NDArray[np.uint8]
    """Baseline land cover (LandClass codes) as of PERIOD_START."""
    clearing: NDArray[np.bool_]
    """Forest patch cleared on CLEARING_DATE."""
    construction: NDArray[np.bool_]
    """Farmland turned into a construction site on CONSTRUCTION_DATE."""
    flood: NDArray[np.bool_]
    """Normally dry land flooded FLOOD_START..FLOOD_END (river channel excluded)."""
    ref_field: NDArray[np.bool_]
    """A reference farm field that grows both crop seasons every year."""
    crop_offset: NDArray[np.float64]
    """Per-pixel (per parcel) shift of the crop calendar, days."""
    kharif_amp: NDArray[np.float64]
    """Per-pixel peak green fraction of the kharif crop."""
    rabi_amp: NDArray[np.float64]
    """Per-pixel peak green fraction of the rabi crop (0 for rain-fed parcels)."""
    texture: NDArray[np.float64]
    """Smooth unit-variance texture used to vary brightness within classes."""
    features: list[dict[str, Any]] = field(default_factory=list)
    """Named features (gazetteer entries)."""
    events: list[dict[str, Any]] = field(default_factory=list)
    """Planted events (ground truth)."""

    def mask(self, cls: LandClass) -> NDArray[np.bool_]:
        """Boolean mask of a baseline land-cover class."""
        return self.landcover == int(cls)


def _rect(
    u: NDArray[np.float64], v: NDArray[np.float64], u0: float, u1: float, v0: float, v1: float
) -> NDArray[np.bool_]:
    return (u >= u0) & (u < u1) & (v >= v0) & (v < v1)


def _round_coords(geom: Any) -> dict[str, Any]:
    def rnd(obj: Any) -> Any:
        if isinstance(obj, (list, tuple)):
            if obj and isinstance(obj[0], float):
                return [round(float(c), 7) for c in obj]
            return [rnd(o) for o in obj]
        return obj

    g = mapping(geom)
    return {"type": g["type"], "coordinates": rnd(g["coordinates"])}


def _mask_geometry(
    mask: NDArray[np.bool_], grid: SampleGrid, largest: bool = False
) -> Polygon | MultiPolygon:
    """Vectorise a pixel mask into a lon/lat (Multi)Polygon along pixel edges."""
    polys = [
        shape(geom)
        for geom, val in rasterio.features.shapes(
            mask.astype(np.uint8), mask=mask, transform=grid.transform(), connectivity=4
        )
        if val == 1
    ]
    if not polys:
        raise ValueError("empty mask")
    merged = unary_union(polys)
    if largest and isinstance(merged, MultiPolygon):
        merged = max(merged.geoms, key=lambda p: p.area)

    def proj(xy: NDArray[np.float64]) -> NDArray[np.float64]:
        lon, lat = grid.xy_to_lonlat(xy[:, 0], xy[:, 1])
        return np.stack([lon, lat], axis=1)

    out = shapely.transform(merged, proj)
    assert isinstance(out, (Polygon, MultiPolygon))
    return out


def _centre(geom: Polygon | MultiPolygon) -> dict[str, float]:
    if isinstance(geom, MultiPolygon):
        geom = max(geom.geoms, key=lambda p: p.area)
    p = geom.representative_point()
    return {"lat": round(p.y, 7), "lng": round(p.x, 7)}


def _rect_geometry(mask: NDArray[np.bool_], grid: SampleGrid) -> Polygon:
    rows, cols = np.nonzero(mask)
    x0, y0 = grid.pixel_to_xy(float(cols.min()), float(rows.max() + 1))
    x1, y1 = grid.pixel_to_xy(float(cols.max() + 1), float(rows.min()))
    lon, lat = grid.xy_to_lonlat(np.array([x0, x1, x1, x0]), np.array([y0, y0, y1, y1]))
    return Polygon(list(zip(lon.tolist(), lat.tolist(), strict=True)))


def build_scene(grid: SampleGrid, seed: int) -> Scene:
    """Generate the land cover, events and features for ``grid``.

    The layout is defined in fractional coordinates, so the tiny and demo sizes
    share the same arrangement (tiny is the demo layout scaled down, not a crop).

    Args:
        grid: the sample grid.
        seed: random seed; the same seed gives the same scene.

    Returns:
        The scene.
    """
    rng = np.random.default_rng([seed, 1])
    h, w = grid.height, grid.width
    rows, cols = np.mgrid[0:h, 0:w].astype(np.float64)
    u = (cols + 0.5) / w
    v = (rows + 0.5) / h
    px = 1.0 / w

    n_forest = smooth_noise(rng, (h, w), 0.06 * w)
    n_town = smooth_noise(rng, (h, w), 0.08 * w)
    n_lake = smooth_noise(rng, (h, w), 0.05 * w)
    texture = smooth_noise(rng, (h, w), 1.5)
    meander = smooth_noise(rng, (h, 1), 0.15 * h)[:, 0]

    u_river = 0.47 + 0.05 * np.sin(2 * np.pi * (1.2 * v + 0.15)) + 0.01 * meander[:, None]
    hw = max(0.022, 1.6 * px)
    dist_river = np.abs(u - u_river)
    river = dist_river < hw
    flood_reach = max(4.0 * hw, hw + 2.5 * px)
    flood_zone = (dist_river < flood_reach) & (v >= 0.40) & ~river

    lake = (((u - 0.80) / 0.12) ** 2 + ((v - 0.22) / 0.085) ** 2) < 1.0 + 0.25 * np.clip(
        n_lake, -1.5, 1.5
    )
    town = (((u - 0.80) / 0.17) ** 2 + ((v - 0.80) / 0.15) ** 2) < 1.0 + 0.3 * np.clip(
        n_town, -1.5, 1.5
    )
    town &= dist_river > flood_reach + 2 * px
    forest = ((u + 0.8 * v) < 0.55 + 0.08 * n_forest) & (u < u_river - flood_reach)

    clearing = _rect(u, v, 0.08, 0.26, 0.10, 0.28)
    clearing_buffer = _rect(u, v, 0.08 - 3 * px, 0.26 + 3 * px, 0.10 - 3 * px, 0.28 + 3 * px)
    construction = _rect(u, v, 0.60, 0.70, 0.50, 0.60)
    ref_field = _rect(u, v, 0.14, 0.28, 0.66, 0.80)

    lc = np.full((h, w), int(LandClass.FARMLAND), dtype=np.uint8)
    lc[forest | clearing_buffer] = LandClass.FOREST
    lc[lake] = LandClass.LAKE
    lc[town] = LandClass.TOWN
    lc[construction | ref_field] = LandClass.FARMLAND
    lc[river] = LandClass.RIVER
    flood = flood_zone & (lc == LandClass.FARMLAND) & ~construction & ~ref_field

    # Farm parcels: Voronoi cells of jittered seed points, each with its own calendar.
    cell = max(round(0.07 * w), 4)
    gy, gx = np.mgrid[0 : h + cell : cell, 0 : w + cell : cell].astype(np.float64)
    seeds = np.stack([gy.ravel(), gx.ravel()], axis=1) + rng.uniform(-0.4, 0.4, (gy.size, 2)) * cell
    _, parcel = cKDTree(seeds).query(np.stack([rows.ravel(), cols.ravel()], axis=1))
    parcel = parcel.reshape(h, w)
    n_parcels = seeds.shape[0]
    p_off: NDArray[np.float64] = rng.uniform(-10.0, 10.0, size=(n_parcels,))
    p_kh: NDArray[np.float64] = rng.uniform(0.85, 1.0, size=(n_parcels,))
    p_rabi = np.where(rng.uniform(size=n_parcels) < 0.65, rng.uniform(0.75, 0.95, n_parcels), 0.0)
    crop_offset = p_off[parcel]
    kharif_amp = p_kh[parcel]
    rabi_amp = p_rabi[parcel]
    crop_offset[ref_field] = 0.0
    kharif_amp[ref_field] = 0.95
    rabi_amp[ref_field] = 0.9

    scene = Scene(
        grid=grid,
        landcover=lc,
        clearing=clearing,
        construction=construction,
        flood=flood,
        ref_field=ref_field,
        crop_offset=crop_offset,
        kharif_amp=kharif_amp,
        rabi_amp=rabi_amp,
        texture=texture,
    )
    scene.features.extend(_features(scene))
    scene.events.extend(_events(scene))
    return scene


def _features(scene: Scene) -> list[dict[str, Any]]:
    grid = scene.grid
    out = []
    for fid, name, kind, cls, desc in [
        ("kanke-lake", "Kanke Lake", "lake", LandClass.LAKE, "Reservoir north-east of the town"),
        (
            "jumar-river",
            "Jumar River",
            "river",
            LandClass.RIVER,
            "River crossing the area north to south",
        ),
        (
            "pithoria-forest",
            "Pithoria Sal Forest",
            "forest",
            LandClass.FOREST,
            "Sal forest in the north-west",
        ),
        ("kanke-bazar", "Kanke Bazar", "town", LandClass.TOWN, "Market town in the south-east"),
    ]:
        geom = _mask_geometry(scene.mask(cls), grid, largest=True)
        out.append(
            {
                "id": fid,
                "name": name,
                "kind": kind,
                "landcover_code": int(cls),
                "description": desc,
                "centre": _centre(geom),
                "geometry": _round_coords(geom),
            }
        )
    ref = _rect_geometry(scene.ref_field, grid)
    out.append(
        {
            "id": "kanke-reference-field",
            "name": "Kanke Reference Field",
            "kind": "farmland",
            "landcover_code": int(LandClass.FARMLAND),
            "description": "Irrigated field that grows both a kharif and a rabi crop every year",
            "centre": _centre(ref),
            "geometry": _round_coords(ref),
        }
    )
    return out


def _events(scene: Scene) -> list[dict[str, Any]]:
    grid = scene.grid
    clear_g = _rect_geometry(scene.clearing, grid)
    cons_g = _rect_geometry(scene.construction, grid)
    flood_g = _mask_geometry(scene.flood, grid)
    ref_g = _rect_geometry(scene.ref_field, grid)
    events: list[dict[str, Any]] = [
        {
            "id": "forest-clearing-2024",
            "kind": "forest_clearing",
            "start": CLEARING_DATE.isoformat(),
            "end": CLEARING_DATE.isoformat(),
            "before": "forest",
            "after": "bare_soil",
            "description": "A patch of Pithoria Sal Forest is clear-felled; bare laterite soil afterwards, "
            "with weak regrowth in the monsoon.",
            "geometry": _round_coords(clear_g),
            "centre": _centre(clear_g),
            "expected": [
                {
                    "source": "sentinel-2-l2a",
                    "index": "ndvi",
                    "change": "decrease",
                    "min_change": 0.3,
                    "text": "median NDVI of clear observations drops by > 0.3 after the date",
                },
                {
                    "source": "sentinel-1-rtc",
                    "band": "vh",
                    "change": "decrease",
                    "min_ratio": 2.0,
                    "text": "VH backscatter falls by more than half (about -3 dB or more)",
                },
                {
                    "source": "tessera-embeddings",
                    "change": "years_differ",
                    "years": [2023, 2024],
                    "text": "Tessera vectors of 2023 (forest) and 2024 (mostly bare) differ: cosine < 0.5",
                },
            ],
        },
        {
            "id": "monsoon-flood-2024",
            "kind": "flood",
            "start": FLOOD_START.isoformat(),
            "end": FLOOD_END.isoformat(),
            "before": "farmland",
            "after": "farmland",
            "description": "The Jumar River overtops its banks and floods the low fields beside it "
            "for about three and a half weeks.",
            "geometry": _round_coords(flood_g),
            "centre": _centre(flood_g),
            "expected": [
                {
                    "source": "sentinel-2-l2a",
                    "index": "ndwi",
                    "change": "above",
                    "threshold": 0.2,
                    "text": "NDWI (green-nir) > 0.2 on clear dates inside the window, < 0 before and after",
                },
                {
                    "source": "sentinel-1-rtc",
                    "band": "vv",
                    "change": "below",
                    "threshold": 0.03,
                    "text": "VV gamma0 < 0.03 (about -15 dB) inside the window",
                },
            ],
        },
        {
            "id": "construction-site-2023",
            "kind": "construction",
            "start": CONSTRUCTION_DATE.isoformat(),
            "end": PERIOD_END.isoformat(),
            "before": "farmland",
            "after": "construction",
            "description": "Fields at the north-west edge of Kanke Bazar are stripped for a building site.",
            "geometry": _round_coords(cons_g),
            "centre": _centre(cons_g),
            "expected": [
                {
                    "source": "sentinel-2-l2a",
                    "index": "ndvi",
                    "change": "decrease",
                    "min_change": 0.3,
                    "text": "kharif-season NDVI (September) drops by > 0.3 from 2023 to 2024; NDVI < 0.2 afterwards",
                },
                {
                    "source": "tessera-embeddings",
                    "change": "years_differ",
                    "years": [2023, 2024],
                    "text": "Tessera vectors of 2023 (mostly farmland) and 2024 (construction) differ",
                },
            ],
        },
    ]
    seasons = [
        ("rabi-2022-23", "rabi", date(2023, 1, 1), date(2023, 3, 31)),
        ("kharif-2023", "kharif", date(2023, 7, 1), date(2023, 10, 31)),
        ("rabi-2023-24", "rabi", date(2023, 12, 1), date(2024, 3, 31)),
        ("kharif-2024", "kharif", date(2024, 7, 1), date(2024, 10, 31)),
        ("rabi-2024-25", "rabi", date(2024, 12, 1), date(2025, 3, 31)),
    ]
    for sid, season, start, end in seasons:
        events.append(
            {
                "id": f"crop-{sid}",
                "kind": "crop_season",
                "season": season,
                "start": start.isoformat(),
                "end": end.isoformat(),
                "before": "fallow",
                "after": "fallow",
                "description": f"{season} crop on the farmland (shown on Kanke Reference Field); peak green "
                + ("late August to September" if season == "kharif" else "January to February"),
                "geometry": _round_coords(ref_g),
                "centre": _centre(ref_g),
                "expected": [
                    {
                        "source": "sentinel-2-l2a",
                        "index": "ndvi",
                        "change": "peak",
                        "threshold": 0.6,
                        "text": "NDVI > 0.6 at the season's peak; < 0.35 in the fallow months (April-June)",
                    },
                ],
            }
        )
    return events
