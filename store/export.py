"""Export a band over a bbox and tslot range for GIS tools: Cloud-Optimized GeoTIFF or plain Zarr.

The cube has no full-lattice coordinate arrays and lives in icechunk, which
QGIS and GDAL do not read; an export is a small, self-describing copy of one
region: a north-up EPSG:4326 COG with one raster band per tslot (band
descriptions are the dates), or a plain Zarr store with lat/lng/tslot
coordinates and CF grid-mapping attributes.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Literal

import numpy as np

from store.cube import CubeReader, band_spec
from store.errors import StoreError

__all__ = ["MAX_EXPORT_BANDS", "ExportError", "export_band"]

MAX_EXPORT_BANDS = 4096
"""Most tslots one GeoTIFF export may hold (GeoTIFF band count is practical up to a few thousand)."""


class ExportError(StoreError, ValueError):
    """The export cannot be written as asked."""

    code = "invalid_export"


def export_band(
    data_dir: str | os.PathLike[str],
    band: str,
    bbox: tuple[float, float, float, float],
    t0: int | None,
    t1: int | None,
    out: str | os.PathLike[str],
    fmt: Literal["cog", "zarr"] = "cog",
    *,
    overwrite: bool = False,
) -> Path:
    """Write one band over ``bbox`` (``min_lat, min_lng, max_lat, max_lng``) and ``[t0, t1)``.

    Only tslots holding data are exported. Vector bands (Tessera) are refused:
    export their k-NN tables instead.

    Returns:
        The written path.

    ``overwrite`` replaces an earlier Zarr export at ``out`` (a Zarr store: ``zarr.json``
    or ``.zgroup`` at its root); without it, or when the path is anything else, an existing
    path is refused and left as it is. A GeoTIFF replaces a file of the same name.

    Raises:
        ExportError: vector band, nothing to export, too many tslots, or an output that
            cannot be written (a missing folder, an existing path it may not replace).
    """
    spec = band_spec(band)
    if spec.extra_dim:
        raise ExportError(f"{band} is a vector band; export is for raster bands")
    out_path = Path(out)
    _check_out(out_path, fmt, overwrite)  # before the read: a bad --out costs nothing
    reader = CubeReader(data_dir)
    da = reader.read_bbox(band, bbox, t0, t1)
    if da.sizes["tslot"] == 0:
        raise ExportError(f"no {band} data in bbox {bbox} and tslots [{t0}, {t1})")
    if fmt == "zarr":
        ds = da.to_dataset(name=band.replace(".", "_"))
        ds.attrs.update(
            {
                "source": "earthmem",
                "snapshot_id": reader.snapshot_id,
                "band": band,
                "crs": "EPSG:4326",
            }
        )
        try:  # "w-": never replace what is there (an earlier export only when asked)
            ds.to_zarr(out_path, mode="w" if overwrite else "w-", consolidated=False)
        except (OSError, ValueError) as exc:
            raise ExportError(f"cannot write {out_path}: {exc}") from exc
        return out_path
    if da.sizes["tslot"] > MAX_EXPORT_BANDS:
        raise ExportError(
            f"{da.sizes['tslot']} tslots exceed the GeoTIFF export cap {MAX_EXPORT_BANDS}"
        )
    import rasterio
    import rasterio.errors
    from affine import Affine

    from store import address

    lat_q = np.asarray(da["lat_q"].values)
    lng_q = np.asarray(da["lng_q"].values)
    x0 = (int(lng_q[0]) - 0.5) * address.LNG_STEP - 180.0
    y0 = (int(lat_q[-1]) + 0.5) * address.LAT_STEP - 90.0  # top edge of the northmost row
    transform = Affine(address.LNG_STEP, 0.0, x0, 0.0, -address.LAT_STEP, y0)
    values = np.asarray(da.values)[:, ::-1, :]  # cube rows run south to north; GeoTIFF north-up
    nodata = spec.fill_value
    profile = {
        "driver": "COG",
        "dtype": values.dtype.name,
        "width": values.shape[2],
        "height": values.shape[1],
        "count": values.shape[0],
        "crs": "EPSG:4326",
        "transform": transform,
        "nodata": nodata,
        "compress": "deflate",
    }
    try:
        with rasterio.open(out_path, "w", **profile) as dst:
            dst.write(values)
            dates = da["date"].values if "date" in da.coords else da["tslot"].values
            for i, d in enumerate(dates, start=1):
                dst.set_band_description(i, str(d)[:10])
            dst.update_tags(
                band=band,
                snapshot_id=reader.snapshot_id,
                tslots=",".join(str(int(t)) for t in da["tslot"].values),
            )
    except (OSError, rasterio.errors.RasterioError) as exc:
        raise ExportError(f"cannot write {out_path}: {exc}") from exc
    return out_path


def _check_out(out_path: Path, fmt: str, overwrite: bool) -> None:
    """Refuse an output that cannot be written, and never replace a directory that is not an
    earlier Zarr export: a Zarr export is a directory, and writing one over an existing path
    deletes what is there (a data directory named by mistake). A GeoTIFF replaces a file of
    the same name, as ``cp`` does.

    Raises:
        ExportError: the folder does not exist; the path exists (Zarr) and ``overwrite`` is
            false or it is not a Zarr store; or it is a directory (GeoTIFF).
    """
    parent = out_path.parent
    if not parent.is_dir():
        raise ExportError(f"cannot write {out_path}: folder {str(parent)!r} does not exist")
    if fmt == "zarr" and out_path.exists():
        if not overwrite:
            raise ExportError(
                f"{out_path} already exists: pass --overwrite to replace an earlier Zarr"
                " export, or choose another --out"
            )
        if not any((out_path / m).is_file() for m in ("zarr.json", ".zgroup")):
            raise ExportError(f"{out_path} is not a Zarr store: it is not replaced")
    if fmt != "zarr" and out_path.is_dir():
        raise ExportError(f"{out_path} is a directory; name the GeoTIFF file to write")
