"""The cube's on-disk layout: band registry, lattice constants and layout creation.

One icechunk repository (``<data_dir>/cube.icechunk`` by default, or any
``s3://bucket/prefix``) holds one group per band family and one array per band
(see :data:`BANDS`)::

    indices/{ndvi,ndwi,ndmi,lswi,evi,vh_vv}  float32 (tslot, y, x)   NaN = no value
    s2/clear                                uint8   (tslot, y, x)   0 none, 1 masked, 2 clear
    s1/{vv,vh}                              float32 (tslot, y, x)   linear backscatter
    s1/valid                                uint8   (tslot, y, x)   0 none, 1 valid
    geotessera/embedding                    int8    (tslot, y, x, dim=128)
    geotessera/scale                        float32 (tslot, y, x)   NaN water, +inf no data
    geotessera/bin128                       uint8   (tslot, y, x, byte=16)

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

Pitfall (measured): never open the lattice with dask chunks (``chunks={}`` or
``"auto"``): a 2**16 x 2**21 x 2**22 array builds a graph of billions of tasks
and runs out of memory. ``chunks=None`` gives lazy indexing; select the region
first (``ds.ndvi[t0:t1, y0:y1, x0:x1]``), then compute or ``.chunk()``.

Writing and reading the arrays is :mod:`store.cube` (which re-exports every
public name of this module).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Literal

import icechunk as ic
import numpy as np
import pyproj
import zarr
from zarr.codecs import BloscCodec, ZstdCodec
from zarr.errors import GroupNotFoundError

from store.address import LAT_MAX_Q, LAT_STEP, LNG_MAX_Q, LNG_STEP
from store.errors import UnknownBand
from store.snapshots import MAIN_BRANCH

__all__ = [
    "BANDS",
    "DAY_SLOTS",
    "DEFAULT_BLOCK_LEVEL",
    "LAYOUT_VERSION",
    "MAX_REGION_ELEMENTS",
    "TIME_CHUNK_DAYS",
    "X_SIZE",
    "YEAR_SLOTS",
    "Y_SIZE",
    "BandSpec",
    "Tempo",
    "band_spec",
    "geotransform",
]

Tempo = Literal["day", "year"]

Y_SIZE = LAT_MAX_Q + 1
"""Rows of the lattice (``lat_q`` in ``[0, 2**21)``)."""
X_SIZE = LNG_MAX_Q + 1
"""Columns of the lattice (``lng_q`` in ``[0, 2**22)``)."""
DAY_SLOTS = 1 << 16
"""Length of the day-slot axis (days 1970-01-01 .. 2149-06-05)."""
YEAR_SLOTS = 256
"""Length of the year-slot axis (years 1970 .. 2225)."""
TIME_CHUNK_DAYS = 7
"""Day slots per chunk; slot 0 (1970-01-01) is a Thursday, so chunks are Thu..Wed weeks."""
DEFAULT_BLOCK_LEVEL = 7
"""Spatial chunk = one level-k block (2**k x 2**k cells)."""
LAYOUT_VERSION = 1
"""Version of this layout, stored in the root group's attributes."""
MAX_REGION_ELEMENTS = 1 << 25
"""Default cap on elements one read returns (128 MiB of float32)."""

_WGS84 = pyproj.CRS.from_epsg(4326)


@dataclass(frozen=True)
class BandSpec:
    """How one band is stored in the cube."""

    name: str
    """Public band name, e.g. ``"indices.ndvi"``."""
    path: str
    """Array path inside the repository, e.g. ``"indices/ndvi"``."""
    dtype: str
    """NumPy dtype name of the stored values."""
    tempo: Tempo
    """``"day"`` (day slots) or ``"year"`` (year slots)."""
    fill_value: float | int
    """Value of cells never written (also what absent chunks read as)."""
    units: str
    """Units (``"1"`` for dimensionless)."""
    long_name: str
    """Human description (CF ``long_name``)."""
    extra_dim: tuple[str, int] | None = None
    """Trailing vector dimension ``(name, length)``, e.g. ``("dim", 128)``."""

    @property
    def group(self) -> str:
        """The group (band family) holding the array."""
        return self.path.split("/", 1)[0]

    @property
    def time_size(self) -> int:
        """Length of the time axis."""
        return DAY_SLOTS if self.tempo == "day" else YEAR_SLOTS

    @property
    def time_chunk(self) -> int:
        """Time slots per chunk."""
        return TIME_CHUNK_DAYS if self.tempo == "day" else 1

    @property
    def dims(self) -> tuple[str, ...]:
        """Zarr dimension names."""
        extra = (self.extra_dim[0],) if self.extra_dim else ()
        return ("tslot", "y", "x", *extra)

    @property
    def shape(self) -> tuple[int, ...]:
        """Full lattice shape of the array."""
        extra = (self.extra_dim[1],) if self.extra_dim else ()
        return (self.time_size, Y_SIZE, X_SIZE, *extra)

    def chunks(self, block_level: int) -> tuple[int, ...]:
        """Chunk shape for a block level."""
        side = 1 << block_level
        extra = (self.extra_dim[1],) if self.extra_dim else ()
        return (self.time_chunk, side, side, *extra)


def _band(
    name: str,
    path: str,
    dtype: str,
    tempo: Tempo,
    fill: float | int,
    units: str,
    long_name: str,
    extra: tuple[str, int] | None = None,
) -> tuple[str, BandSpec]:
    return name, BandSpec(name, path, dtype, tempo, fill, units, long_name, extra)


BANDS: Mapping[str, BandSpec] = MappingProxyType(
    dict(
        [
            _band("indices.ndvi", "indices/ndvi", "float32", "day", math.nan, "1", "NDVI"),
            _band(
                "indices.ndwi", "indices/ndwi", "float32", "day", math.nan, "1", "NDWI (McFeeters)"
            ),
            _band("indices.ndmi", "indices/ndmi", "float32", "day", math.nan, "1", "NDMI"),
            _band("indices.lswi", "indices/lswi", "float32", "day", math.nan, "1", "LSWI"),
            _band("indices.evi", "indices/evi", "float32", "day", math.nan, "1", "EVI"),
            _band(
                "indices.vh_vv",
                "indices/vh_vv",
                "float32",
                "day",
                math.nan,
                "1",
                "Sentinel-1 VH/VV ratio (linear)",
            ),
            _band(
                "s2.clear",
                "s2/clear",
                "uint8",
                "day",
                0,
                "1",
                "Sentinel-2 observation: 0 none, 1 masked (cloud, shadow, ...), 2 clear",
            ),
            _band(
                "s1.vv",
                "s1/vv",
                "float32",
                "day",
                math.nan,
                "1",
                "Sentinel-1 VV backscatter (linear)",
            ),
            _band(
                "s1.vh",
                "s1/vh",
                "float32",
                "day",
                math.nan,
                "1",
                "Sentinel-1 VH backscatter (linear)",
            ),
            _band(
                "s1.valid",
                "s1/valid",
                "uint8",
                "day",
                0,
                "1",
                "Sentinel-1 observation: 0 none, 1 valid",
            ),
            _band(
                "geotessera",
                "geotessera/embedding",
                "int8",
                "year",
                0,
                "1",
                "Tessera embedding (int8; multiply by geotessera.scale to dequantise)",
                ("dim", 128),
            ),
            _band(
                "geotessera.scale",
                "geotessera/scale",
                "float32",
                "year",
                math.inf,
                "1",
                "Tessera per-cell scale (NaN = water, +inf = no data)",
            ),
            _band(
                "geotessera.bin128",
                "geotessera/bin128",
                "uint8",
                "year",
                0,
                "1",
                "Sign bits of the rotated Tessera vector (16 bytes)",
                ("byte", 16),
            ),
        ]
    )
)
"""Registry of stored bands by public name."""


def band_spec(band: str) -> BandSpec:
    """Look up a band's storage spec.

    Args:
        band: Public band name (a key of :data:`BANDS`).

    Returns:
        The band's spec.

    Raises:
        UnknownBand: The name is not in :data:`BANDS`.
    """
    try:
        return BANDS[band]
    except KeyError:
        raise UnknownBand(f"unknown band {band!r} (known: {', '.join(sorted(BANDS))})") from None


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


def _block_level(attrs: Mapping[str, Any], default: int) -> int:
    level = attrs.get("block_level", default)
    return int(level) if isinstance(level, int | float) else default


def _ensure_layout(repo: ic.Repository, block_level: int) -> int:
    """Create missing groups/arrays in one commit; return the cube's block level.

    Callers hold the commit lock.
    """
    try:
        existing = zarr.open_group(repo.readonly_session(MAIN_BRANCH).store, mode="r")
    except GroupNotFoundError:
        existing = None
    attrs = dict(existing.attrs) if existing is not None else {}
    level = _block_level(attrs, block_level)
    missing = [s for s in BANDS.values() if existing is None or s.path not in existing]
    if "earthmem_layout" in attrs and not missing:
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
            spec.path.split("/", 1)[1],
            shape=spec.shape,
            dtype=spec.dtype,
            chunks=spec.chunks(level),
            fill_value=spec.fill_value,
            dimension_names=spec.dims,
            compressors=_compressor(spec),
            attributes=_band_attrs(spec),
            config={"write_empty_chunks": False},
        )
    session.commit("earthmem: create cube layout", metadata={"layout_version": LAYOUT_VERSION})
    return level
