"""The static STAC catalog: structure, offline schema validation, metadata of items and files."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pystac
import pytest
import rasterio
from pystac.validation.stac_validator import JsonSchemaSTACValidator

SCHEMAS = Path(__file__).parent / "schemas"
EO = "https://stac-extensions.github.io/eo/v1.1.0/schema.json"
PROJ = "https://stac-extensions.github.io/projection/v2.0.0/schema.json"
RASTER = "https://stac-extensions.github.io/raster/v1.1.0/schema.json"
SAR = "https://stac-extensions.github.io/sar/v1.0.0/schema.json"
SAT = "https://stac-extensions.github.io/sat/v1.0.0/schema.json"


def _offline_validator() -> JsonSchemaSTACValidator:
    """pystac's validator fed only local schemas: core ones shipped by pystac, sar/sat vendored."""
    v = JsonSchemaSTACValidator()
    for name, uri in [("sar-v1.0.0.json", SAR), ("sat-v1.0.0.json", SAT)]:
        v.schema_cache[uri] = json.loads((SCHEMAS / name).read_text())
    return v


def _objects(root: Path) -> list[tuple[Path, dict]]:
    return [
        (p, json.loads(p.read_text()))
        for p in sorted(root.rglob("*.json"))
        if p.name not in ("manifest.json", "landcover_classes.json")
    ]


def test_catalog_structure(tiny):
    cat = pystac.Catalog.from_file(str(tiny.info.catalog))
    colls = {c.id: c for c in cat.get_collections()}
    assert set(colls) == {"sentinel-2-l2a", "sentinel-1-rtc", "tessera-embeddings"}
    assert len(list(colls["sentinel-2-l2a"].get_items())) == tiny.info.n_s2
    assert len(list(colls["sentinel-1-rtc"].get_items())) == tiny.info.n_s1
    assert [i.id for i in colls["tessera-embeddings"].get_items()] == [
        "grid_85.35_23.35_2023",
        "grid_85.35_23.35_2024",
    ]
    # Self-contained: no absolute hrefs anywhere; every asset file exists.
    for p, obj in _objects(tiny.root):
        for link in obj.get("links", []):
            assert not link["href"].startswith(("/", "http")), (p, link)
            assert link["rel"] != "self"
        for a in obj.get("assets", {}).values():
            assert not a["href"].startswith("/")
            assert (p.parent / a["href"]).resolve().exists(), (p, a["href"])


def test_core_and_sar_sat_schemas_validate_offline(tiny):
    v = _offline_validator()
    n = 0
    for p, obj in _objects(tiny.root):
        obj_type = pystac.STACObjectType(obj["type"] if obj["type"] != "Feature" else "Feature")
        v.validate_core(obj, obj_type, obj["stac_version"], str(p))
        for ext in obj.get("stac_extensions", []):
            if ext in (SAR, SAT):
                v.validate_extension(obj, obj_type, obj["stac_version"], ext, str(p))
        n += 1
    assert n == 1 + 3 + tiny.info.n_s2 + tiny.info.n_s1 + tiny.info.n_tessera


def test_eo_raster_proj_fields_follow_the_extensions(tiny):
    """Field-level check of eo 1.1 / raster 1.1 / projection 2.0 (their schemas need the network)."""
    for coll in ("sentinel-2-l2a", "sentinel-1-rtc", "tessera-embeddings"):
        for it in tiny.items(coll):
            props = it["properties"]
            assert PROJ in it["stac_extensions"]
            assert props["proj:code"] == "EPSG:32645"
            assert "proj:epsg" not in props  # removed in projection v2.0.0
            assert len(props["proj:transform"]) == 6
            assert len(props["proj:shape"]) == 2
            assert all(isinstance(x, int) for x in props["proj:shape"])
            for key in props:
                if key.startswith("proj:"):
                    assert key in {"proj:code", "proj:shape", "proj:transform", "proj:bbox"}
            for a in it["assets"].values():
                for rb in a.get("raster:bands", []):
                    assert RASTER in it["stac_extensions"]
                    assert set(rb) <= {
                        "nodata",
                        "data_type",
                        "bits_per_sample",
                        "spatial_resolution",
                        "scale",
                        "offset",
                        "unit",
                    }
                for b in a.get("eo:bands", []):
                    assert EO in it["stac_extensions"]
                    assert b["common_name"] in {"blue", "green", "red", "nir", "swir16", "swir22"}
            if coll == "sentinel-2-l2a":
                assert 0.0 <= props["eo:cloud_cover"] <= 100.0


@pytest.mark.skipif(
    not os.environ.get("EARTHMEM_STAC_ONLINE"), reason="needs the network for extension schemas"
)
def test_full_validation_online(tiny):  # pragma: no cover - opt-in
    cat = pystac.Catalog.from_file(str(tiny.info.catalog))
    assert cat.validate_all() > 0


def test_s2_item_metadata_matches_files(tiny):
    for date_s, it in tiny.s2_by_date().items():
        p = it["properties"]
        assert it["id"].endswith(f"_{date_s.replace('-', '')}_0_L2A")
        assert it["id"][:3] in ("S2A", "S2B")
        assert p["platform"] in ("sentinel-2a", "sentinel-2b")
        assert p["constellation"] == "sentinel-2"
        assert float(p["s2:processing_baseline"]) >= 4.0
        assert set(it["assets"]) == {"blue", "green", "red", "nir", "swir16", "swir22", "scl"}
        for key, a in it["assets"].items():
            rb = a["raster:bands"][0]
            assert rb["nodata"] == 0
            if key != "scl":
                assert rb["scale"] == 0.0001
                assert rb["offset"] == -0.1
                assert rb["data_type"] == "uint16"
            path = tiny.item_dir("sentinel-2-l2a", it["id"]) / a["href"]
            with rasterio.open(path) as ds:
                assert ds.tags(ns="IMAGE_STRUCTURE")["LAYOUT"] == "COG"
                assert ds.tags(ns="IMAGE_STRUCTURE")["COMPRESSION"] == "DEFLATE"
                assert ds.crs.to_epsg() == 32645
                assert ds.nodata == 0
                assert ds.dtypes[0] == rb["data_type"]
                assert [ds.height, ds.width] == a["proj:shape"]
                assert list(ds.transform)[:6] == a["proj:transform"]
                assert ds.res[0] == rb["spatial_resolution"]


def test_s2_dn_follows_the_baseline_rule(tiny):
    it = tiny.s2_by_date()["2023-01-12"]
    dn = tiny.read("sentinel-2-l2a", it, "red")
    assert dn.min() > 1000  # reflectance > 0 => DN > 1000 with the +1000 offset
    refl = tiny.reflectance(it, "red")
    assert np.allclose(refl, dn * 1e-4 - 0.1)
    assert 0.0 < np.nanmedian(refl) < 0.3


def test_s1_items(tiny):
    for it in tiny.items("sentinel-1-rtc"):
        p = it["properties"]
        assert p["sar:instrument_mode"] == "IW"
        assert p["sar:polarizations"] == ["VV", "VH"]
        assert p["sat:orbit_state"] in ("ascending", "descending")
        assert set(it["assets"]) == {"vv", "vh"}
        for a in it["assets"].values():
            assert a["raster:bands"][0]["nodata"] == -32768
            with rasterio.open(tiny.item_dir("sentinel-1-rtc", it["id"]) / a["href"]) as ds:
                assert ds.dtypes[0] == "float32"
                assert ds.nodata == -32768
                assert ds.tags(ns="IMAGE_STRUCTURE")["LAYOUT"] == "COG"
                assert ds.crs.to_epsg() == 32645


def test_tessera_items_point_at_geotessera_files(tiny):
    for it in tiny.items("tessera-embeddings"):
        p = it["properties"]
        year = p["tessera:year"]
        assert it["properties"]["datetime"] == f"{year}-01-01T00:00:00Z"
        d = tiny.item_dir("tessera-embeddings", it["id"])
        emb = np.load(d / it["assets"]["embedding"]["href"])
        sc = np.load(d / it["assets"]["scales"]["href"])
        assert emb.dtype == np.int8
        assert emb.shape == (*p["proj:shape"], 128)
        assert sc.dtype == np.float32
        assert sc.shape == tuple(p["proj:shape"])
        assert it["assets"]["embedding"]["href"].endswith(
            f"tessera/global_0.1_degree_representation/{year}/grid_85.35_23.35/grid_85.35_23.35.npy"
        )
        with rasterio.open(d / it["assets"]["landmask"]["href"]) as ds:
            assert ds.crs.to_epsg() == 32645
            assert list(ds.transform)[:6] == p["proj:transform"]
            assert [ds.height, ds.width] == p["proj:shape"]
            lm = ds.read(1)
        assert ((lm == 0) == np.isnan(sc)).all()


def test_tessera_window_is_on_the_full_tile_grid(tiny):
    from rasterio.crs import CRS
    from rasterio.warp import transform_bounds

    left, _, _, top = transform_bounds(
        CRS.from_epsg(4326), CRS.from_epsg(32645), 85.3, 23.3, 85.4, 23.4
    )
    it = tiny.items("tessera-embeddings")[0]
    t = it["properties"]["proj:transform"]
    col0, row0 = (t[2] - left) / 10.0, (top - t[5]) / 10.0
    assert abs(col0 - round(col0)) < 1e-6
    assert abs(row0 - round(row0)) < 1e-6
    assert [round(row0), round(col0)] == it["properties"]["tessera:window"]
