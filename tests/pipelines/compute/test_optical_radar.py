"""Index formulas, SCL masking, merge and lattice warping (pure functions)."""

from __future__ import annotations

import numpy as np
import pytest
import spyndex
from affine import Affine

from pipelines.lattice import LatticeWindow, reproject_onto_lattice
from pipelines.sentinel1.compute import backscatter_bands, to_db
from pipelines.sentinel2 import compute as s2
from store import address


def _refl(seed: int = 0, n: int = 500) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {
        k: rng.uniform(0.01, 0.6, n).astype(np.float32)
        for k in ("blue", "green", "red", "nir", "swir16")
    }


def test_indices_match_spyndex_within_1e_6() -> None:
    r = _refl()
    ours = s2.compute_indices(r)
    params = {"B": r["blue"], "G": r["green"], "R": r["red"], "N": r["nir"], "S1": r["swir16"]}
    ref = {
        "ndvi": spyndex.computeIndex("NDVI", params={k: params[k] for k in ("N", "R")}),
        "ndwi": spyndex.computeIndex("NDWI", params={k: params[k] for k in ("G", "N")}),
        "ndmi": spyndex.computeIndex("NDMI", params={k: params[k] for k in ("N", "S1")}),
        "lswi": spyndex.computeIndex("LSWI", params={k: params[k] for k in ("N", "S1")}),
        "evi": spyndex.computeIndex(
            "EVI",
            params={
                "N": r["nir"],
                "R": r["red"],
                "B": r["blue"],
                "g": 2.5,
                "C1": 6.0,
                "C2": 7.5,
                "L": 1.0,
            },
        ),
    }
    for name in s2.INDEX_NAMES:
        np.testing.assert_allclose(
            ours[name], np.asarray(ref[name], dtype=np.float64), atol=1e-6, rtol=0
        )


def test_baseline_offset_and_nodata() -> None:
    dn = np.array([0, 1000, 3000, 11000], dtype=np.uint16)
    r = s2.dn_to_reflectance(dn, 1e-4, -0.1)
    assert np.isnan(r[0])
    np.testing.assert_allclose(r[1:], [0.0, 0.2, 1.0], atol=1e-6)


def test_scl_mask_drops_cloud_shadow_cirrus_keeps_dark_and_snow() -> None:
    scl = np.arange(12)
    clear = s2.scl_clear(scl)
    assert [int(c) for c in np.flatnonzero(~clear)] == [0, 1, 3, 8, 9, 10]
    assert clear[2]
    assert clear[11]


def test_merge_same_day_prefers_clear_and_records_masked() -> None:
    shape = (2, 2)
    a = {k: np.full(shape, 0.1, np.float32) for k in s2.INDEX_NAMES}
    b = {k: np.full(shape, 0.7, np.float32) for k in s2.INDEX_NAMES}
    obs_a = np.array([[True, True], [False, False]])
    clear_a = np.array([[True, False], [False, False]])
    obs_b = np.array([[True, True], [True, False]])
    clear_b = np.array([[True, True], [False, False]])
    day = s2.merge_same_day([("A", a, obs_a, clear_a), ("B", b, obs_b, clear_b)])
    assert day.indices["ndvi"][0, 0] == pytest.approx(0.1)  # first clear scene wins
    assert day.indices["ndvi"][0, 1] == pytest.approx(0.7)  # masked in A, clear in B
    assert day.clear.tolist() == [[2, 2], [1, 0]]
    assert np.isnan(day.indices["ndvi"][1, 0])
    assert day.item_ids == ("A", "B")
    assert day.n_clear == 2
    assert day.n_observed == 3


def test_backscatter_ratio_linear_and_db() -> None:
    vv = np.array([0.1, 0.02, 0.0, np.nan], np.float32)
    vh = np.array([0.02, 0.01, 0.01, 0.01], np.float32)
    out = backscatter_bands(vv, vh)
    np.testing.assert_allclose(out["vh_vv"][:2], [0.2, 0.5], rtol=1e-6)
    assert np.isnan(out["vv"][2])
    assert np.isnan(out["vh_vv"][3])
    np.testing.assert_allclose(to_db([0.1, 1.0]), [-10.0, 0.0])


def test_reproject_places_values_on_the_right_cells() -> None:
    # a source grid in EPSG:4326 whose pixels are exactly the lattice cells, south-up rows
    lat_q0, lng_q0 = address.encode_q(23.36, 85.33)
    win = LatticeWindow(lat_q0, lat_q0 + 8, lng_q0, lng_q0 + 8)
    src = np.arange(64, dtype=np.float32).reshape(8, 8)  # north-up rows
    t = win.north_up_transform
    out = reproject_onto_lattice(
        src, 4326, t, win, resampling=__import__("rasterio").enums.Resampling.nearest
    )
    np.testing.assert_array_equal(out, src[::-1])  # row 0 = southmost = last source row
    assert isinstance(t, Affine)
    lat, lng = win.centres()
    assert lat[0] == pytest.approx(address.q_center(lat_q0, 0)[0])
    assert lat[1] > lat[0]
    assert lng[1] > lng[0]
