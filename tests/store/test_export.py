"""Exports land in the right place: a COG pixel equals the cube cell under it."""

from __future__ import annotations

import numpy as np
import pytest
import rasterio
import xarray as xr

from store import address
from store.cube import CubeReader
from store.export import ExportError, export_band


def test_cog_and_zarr_exports_match_the_cube(tiny_store, tmp_path) -> None:
    min_lng, min_lat, max_lng, max_lat = tiny_store.manifest["bbox"]
    bbox = (min_lat, min_lng, max_lat, max_lng)
    ev = tiny_store.event("forest_clearing")
    lat, lng = ev["centre"]["lat"], ev["centre"]["lng"]
    lat_q, lng_q = address.encode_q(lat, lng)
    tslots, values = CubeReader(tiny_store.data).cell_series("indices.ndvi", lat_q, lng_q)
    t = int(tslots[0])
    path = export_band(tiny_store.data, "indices.ndvi", bbox, t, t + 1, tmp_path / "ndvi.tif")
    with rasterio.open(path) as src:
        assert src.crs.to_epsg() == 4326
        assert src.count == 1
        row, col = src.index(lng, lat)
        assert src.read(1)[row, col] == pytest.approx(float(values[0]))
        assert src.descriptions[0] == str(np.datetime64("1970-01-01") + np.timedelta64(t, "D"))
    zpath = export_band(
        tiny_store.data, "indices.ndvi", bbox, t, t + 1, tmp_path / "ndvi.zarr", fmt="zarr"
    )
    ds = xr.open_zarr(zpath, consolidated=False)
    v = ds["indices_ndvi"].sel(lat=lat, lng=lng, method="nearest").isel(tslot=0)
    assert float(v) == pytest.approx(float(values[0]))


def test_export_refuses_vector_bands_and_empty_ranges(tiny_store, tmp_path) -> None:
    min_lng, min_lat, max_lng, max_lat = tiny_store.manifest["bbox"]
    with pytest.raises(ExportError, match="vector band"):
        export_band(
            tiny_store.data,
            "geotessera",
            (min_lat, min_lng, max_lat, max_lng),
            None,
            None,
            tmp_path / "x.tif",
        )
    with pytest.raises(ExportError, match=r"no indices\.ndvi data"):
        export_band(
            tiny_store.data,
            "indices.ndvi",
            (min_lat, min_lng, max_lat, max_lng),
            10,
            11,
            tmp_path / "y.tif",
        )


def test_export_never_replaces_a_directory_and_names_what_it_cannot_write(
    tiny_store, tmp_path
) -> None:
    """A Zarr export over an existing path would have deleted it (zarr's mode "w": a data
    directory named by mistake went with it); it is refused and the path is untouched. A
    missing folder, or a directory named as the GeoTIFF, is a typed error, not a traceback."""
    min_lng, min_lat, max_lng, max_lat = tiny_store.manifest["bbox"]
    bbox = (min_lat, min_lng, max_lat, max_lng)
    kept = tmp_path / "precious"
    kept.mkdir()
    (kept / "notes.txt").write_text("mine")
    with pytest.raises(ExportError, match="already exists"):
        export_band(tiny_store.data, "indices.ndvi", bbox, None, None, kept, fmt="zarr")
    assert (kept / "notes.txt").read_text() == "mine"
    assert [p.name for p in kept.iterdir()] == ["notes.txt"]
    with pytest.raises(ExportError, match="does not exist"):
        export_band(tiny_store.data, "indices.ndvi", bbox, None, None, tmp_path / "no" / "x.tif")
    with pytest.raises(ExportError, match="is a directory"):
        export_band(tiny_store.data, "indices.ndvi", bbox, None, None, kept)
    # --overwrite replaces an earlier Zarr export, and still nothing that is not one
    with pytest.raises(ExportError, match="not a Zarr store"):
        export_band(
            tiny_store.data, "indices.ndvi", bbox, None, None, kept, fmt="zarr", overwrite=True
        )
    assert [p.name for p in kept.iterdir()] == ["notes.txt"]
    z = tmp_path / "ndvi.zarr"
    export_band(tiny_store.data, "indices.ndvi", bbox, None, None, z, fmt="zarr")
    with pytest.raises(ExportError, match="--overwrite"):
        export_band(tiny_store.data, "indices.ndvi", bbox, None, None, z, fmt="zarr")
    export_band(tiny_store.data, "indices.ndvi", bbox, None, None, z, fmt="zarr", overwrite=True)
    assert ExportError.code == "invalid_export"
