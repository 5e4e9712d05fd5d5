"""The cube's on-disk layout: groups, arrays, chunking, CF metadata and layout creation.

One icechunk repository (``<data_dir>/cube.icechunk`` by default, or any
``s3://bucket/prefix``) holds one group per band family and one array per band
(see :data:`store.cube.bands.BANDS`)::

    indices/{ndvi,ndwi,ndmi,lswi,evi,vh_vv}  float32 (tslot, y, x)   NaN = no value
    s2/clear                                uint8   (tslot, y, x)   0 none, 1 masked, 2 clear
    s1/{vv,vh}                              float32 (tslot, y, x)   linear backscatter
    s1/valid                                uint8   (tslot, y, x)   0 none, 1 valid
    geotessera/embedding                    int8    (tslot, y, x, dim=128)
    geotessera/scale                        float32 (tslot, y, x)   NaN water, +inf no data
    geotessera/bin128                       uint8   (tslot, y, x, byte=16)
    inventory/partitions                    string  one chunk per partition: its inventory rows
    summaries/<band, . as _>                float64 (tslot, block row, block col, field)
                                                    per-block summaries (store.cube.summaries)

``y`` is ``lat_q`` (row, increasing northward, length 2**21) and ``x`` is
``lng_q`` (column, length 2**22): the cube grid *is* the cell64 lattice, so a
write position is a pure function of ``(tslot, lat_q, lng_q)``. ``tslot`` is the
absolute day slot (``floor(unix_s / 86400)``, length 2**16) for scene bands and
the year slot (``year - 1970``, length 256) for Tessera. Chunks are one store
block (``2**k x 2**k`` cells, ``k = 7`` by default) by :data:`TIME_CHUNK_DAYS`
day slots (day slot 0 is a Thursday, so Thursday-to-Wednesday weeks are chunks)
or by one year slot; a (week, block) partition therefore owns its chunks. Only
chunks holding data exist (``write_empty_chunks=False``; writing all-fill
values over a chunk deletes it).

Each group has a scalar ``spatial_ref`` variable (CF grid mapping, EPSG:4326
``crs_wkt`` and a GDAL ``GeoTransform`` with the pixel-edge origin
``(-180 - LNG_STEP/2, LNG_STEP, 0, -90 - LAT_STEP/2, 0, +LAT_STEP)``, rows going
north) and every data array names it in ``grid_mapping``. No full-lattice
coordinate arrays are written (2**22 floats each); readers attach ``lat``,
``lng``, ``lat_q``, ``lng_q``, ``tslot`` and ``date``/``year`` coordinates for
the region they return.

Opening with xarray through icechunk (two lines)::

    session = icechunk.Repository.open(open_storage("data/cube.icechunk")).readonly_session("main")
    ds = xr.open_zarr(session.store, group="indices", chunks=None, consolidated=False)

Pitfall: never open the lattice with dask chunks (``chunks={}`` or
``"auto"``): a 2**16 x 2**21 x 2**22 array builds a graph of billions of tasks
and runs out of memory. ``chunks=None`` gives lazy indexing; select the region
first (``ds.ndvi[t0:t1, y0:y1, x0:x1]``), then compute or ``.chunk()``.

The inventory array is :mod:`store.cube.inventory`. The bands themselves are :mod:`store.cube.bands`; writing is
:mod:`store.cube.write`, reading :mod:`store.cube.read`.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

import icechunk as ic
import numpy as np
import pyproj
import zarr
from zarr.codecs import BloscCodec, ZstdCodec
from zarr.errors import GroupNotFoundError

from store.address import LAT_STEP, LNG_STEP
from store.cube.bands import BANDS, TIME_CHUNK_DAYS, BandSpec
from store.cube.inventory import (
    INVENTORY_ARRAY,
    create_inventory_array,
    legacy_partitions,
    write_partitions,
)
from store.cube.summaries import (
    N_FIELDS,
    SUMMARY_GROUP,
    summarised_bands,
    summary_level,
    summary_path,
)
from store.snapshots import MAIN_BRANCH

__all__ = [
    "DEFAULT_BLOCK_LEVEL",
    "LAYOUT_VERSION",
    "MAX_REGION_ELEMENTS",
    "block_level_of",
    "ensure_layout",
    "geotransform",
]

DEFAULT_BLOCK_LEVEL = 7
"""Spatial chunk = one level-k block (2**k x 2**k cells)."""
LAYOUT_VERSION = 1
"""Version of this layout, stored in the root group's attributes."""
MAX_REGION_ELEMENTS = 1 << 25
"""Default cap on elements one read returns (128 MiB of float32)."""

_WGS84 = pyproj.CRS.from_epsg(4326)


def geotransform() -> tuple[float, float, float, float, float, float]:
    """GDAL geotransform of the lattice (pixel-edge origin, rows going north).

    Returns:
        ``(x0, dx, 0, y0, 0, dy)`` with ``x0 = -180 - LNG_STEP/2``,
        ``y0 = -90 - LAT_STEP/2`` and ``dy = +LAT_STEP``.
    """
    return (-180.0 - LNG_STEP / 2, LNG_STEP, 0.0, -90.0 - LAT_STEP / 2, 0.0, LAT_STEP)


def _spatial_ref_attrs() -> dict[str, Any]:
    attrs: dict[str, Any] = dict(_WGS84.to_cf())
    attrs["spatial_ref"] = attrs["crs_wkt"]
    attrs["GeoTransform"] = " ".join(repr(v) for v in geotransform())
    return attrs


def _band_attrs(spec: BandSpec) -> dict[str, Any]:
    attrs: dict[str, Any] = {
        "long_name": spec.long_name,
        "units": spec.units,
        "grid_mapping": "spatial_ref",
        "earthmem_band": spec.name,
        "tempo": spec.tempo,
        "tslot": (
            "day slot = floor(unix_seconds / 86400)"
            if spec.tempo == "day"
            else "year slot = year - 1970"
        ),
        "y": "lat_q (row, increasing northward); centre lat = lat_q * 180 / (2**21 - 1) - 90",
        "x": "lng_q (column); centre lng = lng_q * 360 / (2**22 - 1) - 180",
    }
    return attrs


def _compressor(spec: BandSpec) -> Any:
    """Codec of a new array (existing arrays keep the codec in their metadata).

    Day bands use plain Zstd level 3: the weekly index stacks are mostly NaN
    days around one or two observed ones, where byte shuffling buys little, so
    Blosc's extra pass (zstd level 3 + byte shuffle) costs encode time for
    hardly any bytes; Blosc LZ4 is cheaper to encode but stores more. Stores
    created before keep Blosc on their float day bands and stay readable and
    writable.
    """
    if np.dtype(spec.dtype).kind == "f" and spec.tempo == "year":
        return BloscCodec(cname="zstd", clevel=3, shuffle="shuffle")
    return ZstdCodec(level=3)


def _create_summary_array(root: zarr.Group, spec: BandSpec, level: int) -> None:
    """The block-summary array of a band (:mod:`store.cube.summaries`): one chunk per week and block."""
    group = root[SUMMARY_GROUP] if SUMMARY_GROUP in root else root.create_group(SUMMARY_GROUP)
    assert isinstance(group, zarr.Group)
    sub = summary_level(level)
    per = 1 << (level - sub)
    group.create_array(
        summary_path(spec.name).split("/", 1)[1],
        shape=(spec.time_size, spec.shape[1] >> sub, spec.shape[2] >> sub, N_FIELDS),
        dtype="float64",
        chunks=(spec.time_chunk, per, per, N_FIELDS),
        fill_value=float("nan"),
        dimension_names=("tslot", "block_y", "block_x", "field"),
        compressors=ZstdCodec(level=3),
        attributes={
            "earthmem_band": spec.name,
            "long_name": f"per-block summaries of {spec.name} (see store.cube.summaries)",
            "block_level": level,
            "summary_level": sub,
        },
        config={"write_empty_chunks": False},
    )


def block_level_of(attrs: Mapping[str, Any], default: int) -> int:
    level = attrs.get("block_level", default)
    return int(level) if isinstance(level, int | float) else default


def ensure_layout(
    repo: ic.Repository, block_level: int, data_dir: str | os.PathLike[str] | None = None
) -> int:
    """Create missing groups/arrays in one commit; return the cube's block level.

    The commit that adds the inventory array to a cube written before imports the
    rows of ``<data_dir>/inventory/*.parquet`` (the legacy inventory), so the tip's
    inventory stays whole. Callers hold the commit lock.
    """
    try:
        existing = zarr.open_group(repo.readonly_session(MAIN_BRANCH).store, mode="r")
    except GroupNotFoundError:
        existing = None
    attrs = dict(existing.attrs) if existing is not None else {}
    level = block_level_of(attrs, block_level)
    missing = [s for s in BANDS.values() if existing is None or str(s.path) not in existing]
    no_summaries = [
        s for s in summarised_bands() if existing is None or summary_path(s.name) not in existing
    ]
    no_inventory = existing is None or INVENTORY_ARRAY not in existing
    if "earthmem_layout" in attrs and not missing and not no_inventory and not no_summaries:
        return level
    session = repo.writable_session(MAIN_BRANCH)
    root = zarr.open_group(session.store, mode="a", zarr_format=3)
    root.attrs.update(
        {
            "earthmem_layout": LAYOUT_VERSION,
            "block_level": level,
            "time_chunk_days": TIME_CHUNK_DAYS,
            "lattice": "cell64: y = lat_q (2**21 rows, northward), x = lng_q (2**22 columns)",
            "Conventions": "CF-1.8",
        }
    )
    for spec in missing:
        if spec.group not in root:
            group = root.create_group(spec.group)
            ref = group.create_array(
                "spatial_ref",
                shape=(),
                dtype="int32",
                fill_value=0,
                dimension_names=(),
                attributes=_spatial_ref_attrs(),
            )
            ref[()] = 0
        parent = root[spec.group]
        assert isinstance(parent, zarr.Group)
        parent.create_array(
            spec.array_path.split("/", 1)[1],
            shape=spec.shape,
            dtype=spec.dtype,
            chunks=spec.chunks(level),
            fill_value=spec.fill_value,
            dimension_names=spec.dims,
            compressors=_compressor(spec),
            attributes=_band_attrs(spec),
            config={"write_empty_chunks": False},
        )
    for spec in no_summaries:
        _create_summary_array(root, spec, level)
    imported = 0
    if no_inventory:
        create_inventory_array(root)
        legacy = legacy_partitions(data_dir) if existing is not None and data_dir else []
        write_partitions(session, legacy)
        imported = sum(p.n_rows for p in legacy)
    meta: dict[str, Any] = {"layout_version": LAYOUT_VERSION}
    if imported:
        meta["inventory_imported_rows"] = imported
    session.commit("earthmem: create cube layout", metadata=meta)
    return level
