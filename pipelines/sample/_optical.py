"""Sentinel-2 L2A scene synthesis: surface reflectance, clouds, shadows and SCL."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date, timedelta

import numpy as np
from numpy.typing import NDArray

from pipelines.sample._geo import SampleSize
from pipelines.sample._scene import (
    CLEARING_DATE,
    CONSTRUCTION_DATE,
    FLOOD_END,
    FLOOD_START,
    PERIOD_END,
    LandClass,
    Scene,
    smooth_noise,
)

__all__ = [
    "BANDS_10M",
    "BANDS_20M",
    "BOA_ADD_OFFSET",
    "QUANTIFICATION",
    "SCL_CLOUD",
    "S2Scene",
    "S2Weather",
    "crop_green",
    "forest_green",
    "processing_baseline",
    "render_s2",
    "s2_dates",
    "s2_weather",
    "surface_reflectance",
]

BANDS_10M = ("B02", "B03", "B04", "B08")
"""10 m bands in file order."""
BANDS_20M = ("B11", "B12")
"""20 m reflectance bands (SCL is also 20 m)."""
_BANDS = BANDS_10M + BANDS_20M
QUANTIFICATION = 10000.0
"""BOA quantification value: reflectance = (DN + BOA_ADD_OFFSET) / QUANTIFICATION."""
BOA_ADD_OFFSET = -1000.0
"""Radiometric offset of processing baseline >= 04.00 (from 2022-01-25)."""
SCL_CLOUD = (8, 9, 10)
"""SCL classes counted as cloud in eo:cloud_cover (medium, high probability, thin cirrus)."""

# Reflectance spectra (B02, B03, B04, B08, B11, B12).
_CROP = np.array([0.030, 0.070, 0.040, 0.380, 0.190, 0.090])
_FOREST = np.array([0.025, 0.055, 0.030, 0.320, 0.150, 0.065])
_SOIL = np.array([0.080, 0.110, 0.150, 0.210, 0.300, 0.240])
_FALLOW = np.array([0.065, 0.090, 0.110, 0.200, 0.280, 0.200])
_LITTER = np.array([0.060, 0.085, 0.100, 0.220, 0.270, 0.180])
_WATER = np.array([0.055, 0.065, 0.045, 0.025, 0.012, 0.008])
_TURBID = np.array([0.080, 0.105, 0.095, 0.060, 0.030, 0.020])
_URBAN = np.array([0.100, 0.110, 0.120, 0.160, 0.220, 0.190])
_BUILD = np.array([0.120, 0.150, 0.190, 0.240, 0.330, 0.280])
_CLOUD = np.array([0.450, 0.440, 0.440, 0.460, 0.340, 0.240])
_CIRRUS = np.array([0.060, 0.060, 0.060, 0.070, 0.050, 0.030])

_S2_START = date(2023, 1, 2)
_S2_STEP = 5
_TINY_TARGETS = [
    date(2023, 1, 12),
    date(2023, 4, 22),
    date(2023, 7, 21),
    date(2023, 9, 9),
    date(2023, 11, 18),
    date(2024, 2, 6),
    date(2024, 3, 2),
    date(2024, 3, 27),
    date(2024, 5, 11),
    date(2024, 7, 25),
    date(2024, 8, 9),
    date(2024, 8, 19),
    date(2024, 9, 8),
    date(2024, 12, 12),
]
_FULLY_CLOUDY = {date(2023, 7, 21), date(2023, 8, 5), date(2024, 7, 10), date(2024, 9, 3)}
_PARTLY_CLOUDY = {date(2024, 5, 11): 0.3}


def _snap(d: date, start: date, step: int) -> date:
    k = round((d - start).days / step)
    return start + timedelta(days=step * k)


def s2_dates(size: SampleSize) -> list[date]:
    """Overpass dates: every 5 days for demo, 14 event-bracketing dates for tiny."""
    if size == "tiny":
        return sorted({_snap(d, _S2_START, _S2_STEP) for d in _TINY_TARGETS})
    out, d = [], _S2_START
    while d <= PERIOD_END:
        out.append(d)
        d += timedelta(days=_S2_STEP)
    return out


def processing_baseline(d: date) -> str:
    """Sentinel-2 processing baseline in force on ``d`` (2023-2024)."""
    if d >= date(2024, 7, 23):
        return "05.11"
    if d >= date(2023, 12, 13):
        return "05.10"
    if d >= date(2022, 12, 6):
        return "05.09"
    if d >= date(2022, 1, 25):
        return "04.00"
    return "03.01"


@dataclass(frozen=True)
class S2Weather:
    """Cloud situation of one overpass."""

    cloud_fraction: float
    """Target fraction of the area under cloud (alpha > 0.3); 1.0 = fully cloudy."""
    cirrus: float
    """Target fraction under thin cirrus (0 = none)."""


def s2_weather(d: date, seed: int) -> S2Weather:
    """Deterministic, season-dependent cloudiness of the overpass on ``d``.

    The tiny-size dates are kept clear (they bracket the events), except the
    fixed fully-cloudy and partly-cloudy dates.
    """
    if d in _FULLY_CLOUDY:
        return S2Weather(1.0, 0.0)
    if d in _PARTLY_CLOUDY:
        return S2Weather(_PARTLY_CLOUDY[d], 0.2)
    if d in {_snap(t, _S2_START, _S2_STEP) for t in _TINY_TARGETS}:
        return S2Weather(0.0, 0.0)
    rng = np.random.default_rng([seed, 2, d.toordinal()])
    m = d.month
    if 6 <= m <= 9:
        p_clear, lo, hi = 0.1, 0.3, 1.0
    elif m in (5, 10):
        p_clear, lo, hi = 0.5, 0.05, 0.5
    else:
        p_clear, lo, hi = 0.75, 0.02, 0.3
    clear = rng.uniform() < p_clear
    frac = 0.0 if clear else float(rng.uniform(lo, hi))
    if frac > 0.92:
        frac = 1.0
    cirrus = float(rng.uniform(0.05, 0.4)) if rng.uniform() < 0.3 and frac < 1.0 else 0.0
    return S2Weather(round(frac, 3), round(cirrus, 3))


def _logistic(x: NDArray[np.float64] | float) -> NDArray[np.float64]:
    return np.asarray(1.0 / (1.0 + np.exp(-np.asarray(x, dtype=np.float64))))


def crop_green(
    doy: int, offset: NDArray[np.float64], kharif: NDArray[np.float64], rabi: NDArray[np.float64]
) -> NDArray[np.float64]:
    """Green fraction of farmland on day-of-year ``doy`` (kharif Jul-Oct, rabi Dec-Mar)."""
    g_k = _logistic((doy - (196.0 + offset)) / 6.0) * (
        1.0 - _logistic((doy - (290.0 + offset)) / 6.0)
    )
    t = doy - 335.0 if doy >= 200 else doy + 30.0
    g_r = _logistic((t - (25.0 + offset)) / 6.0) * (1.0 - _logistic((t - (108.0 + offset)) / 6.0))
    return np.asarray(np.maximum(g_k * kharif, g_r * rabi) * 0.95)


def forest_green(doy: int) -> float:
    """Green fraction of the sal forest (partial leaf-fall around mid-April)."""
    return 0.92 - 0.30 * float(np.exp(-(((doy - 105.0) / 28.0) ** 2)))


def _mix(
    g: NDArray[np.float64] | float, a: NDArray[np.float64], b: NDArray[np.float64]
) -> NDArray[np.float64]:
    """Linear mixture g*a + (1-g)*b; shape (6, *g.shape), or (6, 1, 1) for a scalar g."""
    ga = np.asarray(g, dtype=np.float64)
    if ga.ndim == 0:
        ga = ga.reshape(1, 1)
    return np.asarray(ga[None] * a[:, None, None] + (1.0 - ga[None]) * b[:, None, None])


def surface_reflectance(scene: Scene, d: date) -> tuple[NDArray[np.float64], NDArray[np.bool_]]:
    """Cloud-free bottom-of-atmosphere reflectance on ``d``.

    Args:
        scene: the sample scene.
        d: the date.

    Returns:
        (reflectance of shape (6, H, W) in band order B02 B03 B04 B08 B11 B12,
        water mask of shape (H, W)).
    """
    h, w = scene.grid.height, scene.grid.width
    doy = d.timetuple().tm_yday
    lc = scene.landcover
    refl = np.zeros((6, h, w))
    water = np.zeros((h, w), dtype=bool)

    g = crop_green(doy, scene.crop_offset, scene.kharif_amp, scene.rabi_amp)
    farm = _mix(g, _CROP, 0.5 * (_SOIL + _FALLOW))
    m = lc == LandClass.FARMLAND
    refl[:, m] = farm[:, m]

    gf = forest_green(doy)
    m = lc == LandClass.FOREST
    refl[:, m] = np.broadcast_to(_mix(gf, _FOREST, _LITTER), (6, h, w))[:, m]

    monsoon = 1.0 if 7 <= d.month <= 9 else 0.0
    m = lc == LandClass.LAKE
    refl[:, m] = (0.5 * monsoon * _TURBID + (1 - 0.5 * monsoon) * _WATER)[:, None]
    water |= m
    river_turbid = 1.0 if 6 <= d.month <= 10 else 0.4
    m = lc == LandClass.RIVER
    refl[:, m] = (river_turbid * _TURBID + (1 - river_turbid) * _WATER)[:, None]
    water |= m
    m = lc == LandClass.TOWN
    refl[:, m] = (0.88 * _URBAN + 0.12 * _FOREST)[:, None]

    if d > CLEARING_DATE:
        regrow = 0.15 * float(np.exp(-(((doy - 240.0) / 45.0) ** 2)))
        refl[:, scene.clearing] = (regrow * _CROP + (1 - regrow) * _SOIL)[:, None]
    if d >= CONSTRUCTION_DATE:
        refl[:, scene.construction] = _BUILD[:, None]
    if FLOOD_START <= d <= FLOOD_END:
        refl[:, scene.flood] = _TURBID[:, None]
        water |= scene.flood

    refl *= 1.0 + 0.05 * np.clip(scene.texture, -3, 3)[None]
    return refl, water


@dataclass(frozen=True, eq=False)
class S2Scene:
    """One synthetic Sentinel-2 L2A overpass, ready to write."""

    day: date
    """Acquisition date."""
    dn: dict[str, NDArray[np.uint16]]
    """Digital numbers per band name (B02..B12); 10 m or 20 m arrays, 0 = nodata."""
    scl: NDArray[np.uint8]
    """Scene classification at 20 m (0 = nodata)."""
    cloud_cover: float
    """Percentage of valid 20 m pixels with SCL 8, 9 or 10."""
    weather: S2Weather
    """The cloud situation the scene was rendered with."""


def _block_mean(a: NDArray[np.float64]) -> NDArray[np.float64]:
    h, w = a.shape[-2:]
    b = a[..., : h - h % 2, : w - w % 2]
    return np.asarray(b.reshape(*b.shape[:-2], h // 2, 2, w // 2, 2).mean(axis=(-3, -1)))


def render_s2(scene: Scene, d: date, seed: int, nodata_edge: bool = False) -> S2Scene:
    """Render the L2A overpass of ``d``: reflectance, clouds, shadows, SCL and DN.

    Args:
        scene: the sample scene.
        d: overpass date.
        seed: random seed.
        nodata_edge: blank a wedge at the west edge (a swath border) with nodata.

    Returns:
        The rendered scene.
    """
    h, w = scene.grid.height, scene.grid.width
    rng = np.random.default_rng([seed, 3, d.toordinal()])
    weather = s2_weather(d, seed)
    surf, water = surface_reflectance(scene, d)
    surf = surf * (1.0 + 0.015 * rng.standard_normal(surf.shape))

    # Clouds live on a padded canvas so shadows of clouds outside the frame fall inside.
    pad = 42  # ~600 m; sun in the south-east at 10:20 local time, shadows fall to the north-west
    alpha_c = np.zeros((h + pad, w + pad))
    if weather.cloud_fraction >= 1.0:
        f = smooth_noise(rng, alpha_c.shape, 10.0)
        alpha_c = np.clip(0.85 + 0.15 * f, 0.45, 1.0)
    elif weather.cloud_fraction > 0.0:
        f = smooth_noise(rng, alpha_c.shape, 10.0)
        t = float(np.quantile(f[:h, :w], 1.0 - weather.cloud_fraction))
        alpha_c = np.clip(0.3 + (f - t) / 0.8, 0.0, 1.0)
    beta = np.zeros((h, w))
    if weather.cirrus > 0.0:
        f2 = smooth_noise(rng, (h, w), 25.0)
        t2 = float(np.quantile(f2, 1.0 - weather.cirrus))
        beta = np.clip(0.3 + (f2 - t2) / 1.5, 0.0, 0.5)
    alpha = alpha_c[:h, :w]
    shadow_src = alpha_c[pad:, pad:]
    shade = 1.0 - 0.6 * np.clip(shadow_src / 0.6, 0.0, 1.0)

    obs = (
        surf * shade[None] * (1.0 - alpha[None])
        + alpha[None] * _CLOUD[:, None, None]
        + beta[None] * _CIRRUS[:, None, None]
    )
    obs = np.clip(obs, 0.0, 6.0)

    valid = np.ones((h, w), dtype=bool)
    if nodata_edge:
        rows = np.arange(h)[:, None]
        cols = np.arange(w)[None, :]
        valid = cols >= (0.12 * w + 0.1 * rows)

    # 20 m products by 2 x 2 aggregation.
    obs20 = _block_mean(obs[4:6])
    full20 = _block_mean(obs)
    a20, b20, s20 = _block_mean(alpha), _block_mean(beta), _block_mean(shadow_src)
    water20 = _block_mean(water.astype(np.float64)) > 0.5
    town20 = _block_mean((scene.landcover == LandClass.TOWN).astype(np.float64)) > 0.5
    valid20 = _block_mean(valid.astype(np.float64)) >= 1.0
    green, red, nir = full20[1], full20[2], full20[3]
    ndvi = (nir - red) / np.maximum(nir + red, 1e-6)
    ndwi = (green - nir) / np.maximum(green + nir, 1e-6)
    scl = np.full(a20.shape, 5, dtype=np.uint8)
    scl[ndvi > 0.4] = 4
    scl[town20 & (rng.uniform(size=a20.shape) < 0.12)] = 7
    scl[(ndwi > 0.1) & (nir < 0.12)] = 6
    scl[water20 & (a20 <= 0.15)] = 6
    scl[a20 > 0.15] = 7
    scl[s20 > 0.3] = 3
    scl[b20 > 0.3] = 10
    scl[a20 > 0.3] = 8
    scl[a20 > 0.6] = 9
    scl[~valid20] = 0
    n_valid = int(valid20.sum())
    cloud_cover = 100.0 * float(np.isin(scl, SCL_CLOUD).sum()) / max(n_valid, 1)

    def to_dn(r: NDArray[np.float64], ok: NDArray[np.bool_]) -> NDArray[np.uint16]:
        dn = np.clip(np.rint(r * QUANTIFICATION - BOA_ADD_OFFSET), 1, 65535).astype(np.uint16)
        dn[~ok] = 0
        return dn

    dn: dict[str, NDArray[np.uint16]] = {}
    for i, b in enumerate(BANDS_10M):
        dn[b] = to_dn(obs[i], valid)
    for i, b in enumerate(BANDS_20M):
        dn[b] = to_dn(obs20[i], valid20)
    return S2Scene(day=d, dn=dn, scl=scl, cloud_cover=round(cloud_cover, 4), weather=weather)
