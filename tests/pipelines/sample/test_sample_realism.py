"""Realism of the generated data, measured from the written files the way a pipeline reads them."""

from __future__ import annotations

import numpy as np
import pytest
import rasterio

FARMLAND, FOREST, LAKE, RIVER, TOWN = 1, 2, 3, 4, 5
CLEAR_SCL = (4, 5, 6)


def _indices(tiny, date_s):
    it = tiny.s2_by_date()[date_s]
    g, r, n = (tiny.reflectance(it, k) for k in ("green", "red", "nir"))
    scl = tiny.read("sentinel-2-l2a", it, "scl")
    clear = np.isin(np.repeat(np.repeat(scl, 2, 0), 2, 1), CLEAR_SCL)
    ndvi = (n - r) / (n + r)
    ndwi = (g - n) / (g + n)
    ndvi[~clear] = np.nan
    ndwi[~clear] = np.nan
    return ndvi, ndwi


def _median(a, mask):
    vals = a[mask]
    vals = vals[np.isfinite(vals)]
    assert vals.size >= 5
    return float(np.median(vals))


@pytest.mark.parametrize(
    ("date_s", "cls", "index", "lo", "hi"),
    [
        ("2023-09-09", FARMLAND, "ndvi", 0.6, 0.85),  # kharif peak
        ("2024-09-08", FARMLAND, "ndvi", 0.6, 0.85),
        ("2024-02-06", FARMLAND, "ndvi", 0.5, 0.85),  # rabi (irrigated parcels only)
        ("2023-01-12", FARMLAND, "ndvi", 0.5, 0.85),
        ("2023-04-22", FARMLAND, "ndvi", 0.1, 0.35),  # fallow, dry season
        ("2023-09-09", FOREST, "ndvi", 0.65, 0.85),
        ("2023-04-22", FOREST, "ndvi", 0.5, 0.75),  # partial leaf-fall
        ("2023-09-09", TOWN, "ndvi", 0.05, 0.3),
        ("2023-01-12", LAKE, "ndwi", 0.3, 0.6),
        ("2023-09-09", LAKE, "ndwi", 0.2, 0.5),  # turbid monsoon water
        ("2023-09-09", RIVER, "ndwi", 0.2, 0.5),
    ],
)
def test_index_medians_per_class_and_season(tiny, date_s, cls, index, lo, hi):
    ndvi, ndwi = _indices(tiny, date_s)
    a = ndvi if index == "ndvi" else ndwi
    lc = tiny.landcover()
    mask = lc == cls
    if cls in (LAKE, RIVER):  # edge pixels mix with land at 10 m
        from scipy.ndimage import binary_erosion

        mask = binary_erosion(mask) if binary_erosion(mask).sum() >= 5 else mask
    assert lo <= _median(a, mask) <= hi


def test_cleared_patch_ndvi_drops_after_the_date(tiny):
    m = tiny.mask(tiny.event("forest-clearing-2024")["geometry"])
    before = _median(_indices(tiny, "2024-03-02")[0], m)
    after = _median(_indices(tiny, "2024-03-27")[0], m)
    assert before - after > 0.3
    assert 0.05 <= after <= 0.25  # bare soil


def test_flood_raises_ndwi_only_inside_the_window(tiny):
    m = tiny.mask(tiny.event("monsoon-flood-2024")["geometry"])
    for d in ("2024-08-09", "2024-08-19"):
        assert _median(_indices(tiny, d)[1], m) > 0.2
    for d in ("2024-07-25", "2024-09-08"):
        assert _median(_indices(tiny, d)[1], m) < 0.0


def test_construction_site_loses_its_crop(tiny):
    m = tiny.mask(tiny.event("construction-site-2023")["geometry"])
    k23 = _median(_indices(tiny, "2023-09-09")[0], m)
    k24 = _median(_indices(tiny, "2024-09-08")[0], m)
    assert k23 - k24 > 0.3
    assert k24 < 0.2


def test_reference_field_has_two_seasons(tiny):
    m = tiny.mask(tiny.event("crop-kharif-2023")["geometry"])
    series = {
        d: _median(_indices(tiny, d)[0], m)
        for d in ("2023-01-12", "2023-04-22", "2023-09-09", "2024-02-06")
    }
    assert series["2023-01-12"] > 0.6
    assert series["2024-02-06"] > 0.6
    assert series["2023-09-09"] > 0.6  # kharif
    assert series["2023-04-22"] < 0.35  # fallow between


def test_cloud_cover_matches_scl(tiny):
    covers = []
    for it in tiny.items("sentinel-2-l2a"):
        scl = tiny.read("sentinel-2-l2a", it, "scl")
        valid = scl != 0
        frac = 100.0 * np.isin(scl[valid], (8, 9, 10)).mean()
        assert abs(frac - it["properties"]["eo:cloud_cover"]) < 0.01, it["id"]
        covers.append(it["properties"]["eo:cloud_cover"])
    assert any(c == 100.0 for c in covers)  # at least one fully cloudy scene
    assert any(0.0 < c < 100.0 for c in covers)  # and a partly cloudy one
    assert sum(c == 0.0 for c in covers) >= 10


def test_clouds_are_bright_and_shadows_dark(tiny):
    full = next(
        it for it in tiny.items("sentinel-2-l2a") if it["properties"]["eo:cloud_cover"] == 100.0
    )
    scl = tiny.read("sentinel-2-l2a", full, "scl")
    assert set(np.unique(scl).tolist()) <= {8, 9}
    assert np.nanmedian(tiny.reflectance(full, "blue")) > 0.3
    part = next(
        it for it in tiny.items("sentinel-2-l2a") if 0 < it["properties"]["eo:cloud_cover"] < 100
    )
    scl = tiny.read("sentinel-2-l2a", part, "scl")
    assert {3, 8, 9} <= set(np.unique(scl).tolist())
    blue20 = (
        tiny.reflectance(part, "blue").reshape(scl.shape[0], 2, scl.shape[1], 2).mean(axis=(1, 3))
    )
    nir20 = (
        tiny.reflectance(part, "nir").reshape(scl.shape[0], 2, scl.shape[1], 2).mean(axis=(1, 3))
    )
    assert np.median(blue20[scl == 9]) > 2 * np.median(blue20[np.isin(scl, (4, 5))])
    assert np.median(nir20[scl == 3]) < np.median(nir20[np.isin(scl, (4, 5))])


def test_s1_backscatter_levels_and_flood(tiny):
    lc = tiny.landcover()
    flood = tiny.mask(tiny.event("monsoon-flood-2024")["geometry"])
    by_date = tiny.s1_by_date()
    vv = {d: tiny.read("sentinel-1-rtc", it, "vv") for d, it in by_date.items()}
    for d in ("2024-08-03", "2024-08-15"):
        assert np.median(vv[d][flood]) < 0.03
    for d in ("2024-07-22", "2024-08-27"):
        assert np.median(vv[d][flood]) > 0.05
    a = vv["2023-02-10"]
    assert 0.005 <= np.median(a[lc == LAKE]) <= 0.02
    assert np.median(a[lc == TOWN]) > np.median(a[lc == FOREST]) > np.median(a[lc == LAKE])
    # Speckle: gamma-distributed, coefficient of variation ~ 1/sqrt(ENL) over a homogeneous area.
    town = a[lc == TOWN]
    assert 0.3 < town.std() / town.mean() < 0.7
    vh = {d: tiny.read("sentinel-1-rtc", it, "vh") for d, it in by_date.items()}
    clearing = tiny.mask(tiny.event("forest-clearing-2024")["geometry"])
    assert np.median(vh["2024-02-29"][clearing]) > 2 * np.median(vh["2024-04-05"][clearing])


def _tessera(tiny, year):
    it = next(
        i for i in tiny.items("tessera-embeddings") if i["properties"]["tessera:year"] == year
    )
    d = tiny.item_dir("tessera-embeddings", it["id"])
    q = np.load(d / it["assets"]["embedding"]["href"]).astype(np.float32)
    s = np.load(d / it["assets"]["scales"]["href"])
    with rasterio.open(d / it["assets"]["landmask"]["href"]) as ds:
        t = ds.transform
    with np.errstate(invalid="ignore"):
        return q * s[..., None], s, t


def _tessera_classes(tiny, transform, shape):
    """Land-cover class under each Tessera pixel centre (the grids are offset by a sub-pixel shift)."""
    lc = tiny.landcover()
    g = tiny.manifest["grid"]["transform"]
    h, w = shape
    xs = transform.c + (np.arange(w) + 0.5) * transform.a
    ys = transform.f + (np.arange(h) + 0.5) * transform.e
    cols = np.clip(((xs - g[2]) // 10).astype(int), 0, lc.shape[1] - 1)
    rows = np.clip(((g[5] - ys) // 10).astype(int), 0, lc.shape[0] - 1)
    return lc[np.ix_(rows, cols)], rows, cols


def _unit(v):
    return v / np.linalg.norm(v, axis=-1, keepdims=True)


def test_tessera_same_class_closer_than_cross_class(tiny):
    emb, scales, t = _tessera(tiny, 2023)
    classes, _, _ = _tessera_classes(tiny, t, scales.shape)
    valid = np.isfinite(scales)
    assert np.isnan(scales).sum() > 0
    assert np.isposinf(scales).sum() > 0
    q = np.load(next((tiny.root / "tessera").rglob("grid_85.35_23.35.npy")))
    assert (q[~np.isfinite(scales)] == 0).all()
    means = {}
    rng = np.random.default_rng(0)
    for c in (FARMLAND, FOREST, TOWN):
        v = _unit(emb[valid & (classes == c)])
        means[c] = v
    for c, v in means.items():
        idx = rng.choice(len(v), size=min(len(v), 60), replace=False)
        same = v[idx] @ v[idx].T
        same_mean = same[~np.eye(len(idx), dtype=bool)].mean()
        for c2, v2 in means.items():
            if c2 == c:
                continue
            idx2 = rng.choice(len(v2), size=min(len(v2), 60), replace=False)
            cross = (v[idx] @ v2[idx2].T).mean()
            assert same_mean > cross + 0.3, (c, c2, same_mean, cross)


def test_tessera_cleared_patch_changes_between_years(tiny):
    from scipy.ndimage import binary_dilation, binary_erosion

    e23, s23, t = _tessera(tiny, 2023)
    e24, _, _ = _tessera(tiny, 2024)
    classes, rows, cols = _tessera_classes(tiny, t, s23.shape)
    cos = np.sum(_unit(e23) * _unit(e24), axis=-1)
    clearing = tiny.mask(tiny.event("forest-clearing-2024")["geometry"])[np.ix_(rows, cols)]
    assert np.median(cos[binary_erosion(clearing)]) < 0.5
    stable_forest = (classes == FOREST) & ~binary_dilation(clearing, iterations=2)
    assert stable_forest.sum() >= 5
    assert np.median(cos[stable_forest]) > 0.8
    cons = tiny.mask(tiny.event("construction-site-2023")["geometry"])[np.ix_(rows, cols)]
    core = binary_erosion(cons)
    assert np.median(cos[core if core.any() else cons]) < 0.6
