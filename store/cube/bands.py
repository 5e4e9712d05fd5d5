"""The band registry: everything code needs to know about a band, in one place.

Every band earthmem stores or serves is one :class:`BandSpec` in :data:`REGISTRY`:
how it is stored (array path, dtype, fill value, tempo, trailing vector
dimension), what it is (``kind``: a scalar read as one number per cell and
tslot, an observation flag, a vector searched by k-NN, or an auxiliary array
such as the Tessera scale), its inventory family (whose rows name the source
scenes), the flag band that says whether an observation was clear, the
derivation id bound into fact ids, and the short names clients may use
(``ndvi`` for ``indices.ndvi``; ``vv`` for ``s1.vv``).

:data:`BANDS` is the subset stored as cube arrays (``geotessera.multi_year``
is served from the k-NN tables only). Pipelines and the API read these names;
no other list of bands exists.

Pure: no I/O, no Zarr. The lattice axis lengths live here because a band's
array shape is derived from them.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Literal

from store.address import LAT_MAX_Q, LNG_MAX_Q
from store.errors import UnknownBand

__all__ = [
    "BANDS",
    "DAY_SLOTS",
    "FAMILY_FLAGS",
    "FLAG_BANDS",
    "INDEX_NAMES",
    "REGISTRY",
    "SCALAR_BANDS",
    "TIME_CHUNK_DAYS",
    "VECTOR_BANDS",
    "X_SIZE",
    "YEAR_SLOTS",
    "Y_SIZE",
    "BandKind",
    "BandSpec",
    "Family",
    "Tempo",
    "band_spec",
    "clear_flag",
    "family_scalars",
    "registered",
    "resolve_alias",
]

Tempo = Literal["day", "year"]
BandKind = Literal["scalar", "flag", "vector", "aux"]
Family = Literal["s2", "s1", "geotessera"]

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


@dataclass(frozen=True)
class BandSpec:
    """One band: how it is stored and what it means."""

    name: str
    """Public band name, e.g. ``"indices.ndvi"``."""
    path: str | None
    """Array path inside the cube, e.g. ``"indices/ndvi"``; None when not stored in the cube."""
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
    kind: BandKind
    """scalar (one number per cell and tslot), flag, vector (k-NN searched) or aux."""
    family: Family
    """Inventory band family whose rows name the source scenes."""
    extra_dim: tuple[str, int] | None = None
    """Trailing vector dimension ``(name, length)``, e.g. ``("dim", 128)``."""
    aliases: tuple[str, ...] = ()
    """Short names accepted for this band (area_over_time's ``index``, claims)."""
    value_range: tuple[float, float] | None = None
    """``(lo, hi)`` of the fixed histogram grid of the band's block summaries
    (:mod:`store.cube.summaries`; values outside fall in an under/overflow bin); None: no summaries."""

    @property
    def array_path(self) -> str:
        """:attr:`path` of a stored band.

        Raises:
            UnknownBand: the band is not stored in the cube.
        """
        if self.path is None:
            raise UnknownBand(f"band {self.name!r} is not stored in the cube")
        return self.path

    @property
    def group(self) -> str:
        """The group (band family) holding the array."""
        return (self.path or self.name).split("/", 1)[0]

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

    @property
    def derivation(self) -> str:
        """Derivation label bound into fact ids (``earthmem.<band>.v1``)."""
        return f"earthmem.{self.name}.v1"

    def chunks(self, block_level: int) -> tuple[int, ...]:
        """Chunk shape for a block level."""
        side = 1 << block_level
        extra = (self.extra_dim[1],) if self.extra_dim else ()
        return (self.time_chunk, side, side, *extra)


_NAN = math.nan


def _index(
    name: str,
    long_name: str,
    family: Family = "s2",
    value_range: tuple[float, float] = (-1.0, 1.0),
) -> BandSpec:
    short = name.split(".", 1)[1]
    return BandSpec(
        name, name.replace(".", "/"), "float32", "day", _NAN, "1", long_name, "scalar", family,
        aliases=(short,), value_range=value_range,
    )  # fmt: skip


_SPECS: tuple[BandSpec, ...] = (
    _index("indices.ndvi", "NDVI"),
    _index("indices.ndwi", "NDWI (McFeeters)"),
    _index("indices.ndmi", "NDMI"),
    _index("indices.lswi", "LSWI"),
    _index("indices.evi", "EVI"),
    BandSpec(
        "s1.vv", "s1/vv", "float32", "day", _NAN, "1", "Sentinel-1 VV backscatter (linear)",
        "scalar", "s1", aliases=("vv",), value_range=(0.0, 1.0),
    ),
    BandSpec(
        "s1.vh", "s1/vh", "float32", "day", _NAN, "1", "Sentinel-1 VH backscatter (linear)",
        "scalar", "s1", aliases=("vh",), value_range=(0.0, 1.0),
    ),
    _index("indices.vh_vv", "Sentinel-1 VH/VV ratio (linear)", family="s1", value_range=(0.0, 1.0)),
    BandSpec(
        "s2.clear", "s2/clear", "uint8", "day", 0, "1",
        "Sentinel-2 observation: 0 none, 1 masked (cloud, shadow, ...), 2 clear", "flag", "s2",
    ),
    BandSpec(
        "s1.valid", "s1/valid", "uint8", "day", 0, "1", "Sentinel-1 observation: 0 none, 1 valid",
        "flag", "s1",
    ),
    BandSpec(
        "geotessera", "geotessera/embedding", "int8", "year", 0, "1",
        "Tessera embedding (int8; multiply by geotessera.scale to dequantise)", "vector",
        "geotessera", ("dim", 128),
    ),
    BandSpec(
        "geotessera.scale", "geotessera/scale", "float32", "year", math.inf, "1",
        "Tessera per-cell scale (NaN = water, +inf = no data)", "aux", "geotessera",
    ),
    BandSpec(
        "geotessera.bin128", "geotessera/bin128", "uint8", "year", 0, "1",
        "Sign bits of the rotated Tessera vector (16 bytes)", "vector", "geotessera",
        ("byte", 16),
    ),
    BandSpec(
        "geotessera.multi_year", None, "int8", "year", 0, "1",
        "Tessera vintages of a cell concatenated (k-NN tables only)", "vector", "geotessera",
        ("dim", 256),
    ),
)  # fmt: skip

REGISTRY: Mapping[str, BandSpec] = MappingProxyType({s.name: s for s in _SPECS})
"""Every band by public name, stored or not."""

BANDS: Mapping[str, BandSpec] = MappingProxyType({s.name: s for s in _SPECS if s.path is not None})
"""The bands stored as cube arrays, by public name."""

SCALAR_BANDS: tuple[str, ...] = tuple(s.name for s in _SPECS if s.kind == "scalar")
"""Bands read as one number per (cell, tslot): did_change, trajectory, claims."""

FLAG_BANDS: tuple[str, ...] = tuple(s.name for s in _SPECS if s.kind == "flag")
"""Observation flags (claims may test them too)."""

VECTOR_BANDS: tuple[str, ...] = ("geotessera", "geotessera.multi_year", "geotessera.bin128")
"""Bands find_similar scans (its documented order)."""

INDEX_NAMES: Mapping[str, str] = MappingProxyType(
    {alias: s.name for s in _SPECS if s.kind == "scalar" for alias in s.aliases}
)
"""Short index name (area_over_time's ``index``) -> band."""

FAMILY_FLAGS: Mapping[str, tuple[str, int]] = MappingProxyType(
    {"s2": ("s2.clear", 2), "s1": ("s1.valid", 1)}
)
"""Scene family -> (its observation flag band, the flag value meaning clear / valid)."""


def band_spec(band: str) -> BandSpec:
    """Look up a band stored in the cube.

    Args:
        band: Public band name (a key of :data:`BANDS`).

    Returns:
        The band's spec.

    Raises:
        UnknownBand: The name is not a stored band.
    """
    try:
        return BANDS[band]
    except KeyError:
        raise UnknownBand(f"unknown band {band!r} (known: {', '.join(sorted(BANDS))})") from None


def registered(band: str) -> BandSpec:
    """Look up any band of the registry (stored or served from k-NN tables).

    Raises:
        UnknownBand: The name is not registered.
    """
    try:
        return REGISTRY[band]
    except KeyError:
        raise UnknownBand(f"unknown band {band!r} (known: {', '.join(REGISTRY)})") from None


def resolve_alias(name: str) -> str | None:
    """The band a public name or short alias (``ndvi``, ``vh_vv``) stands for, or None."""
    if name in REGISTRY:
        return name
    return INDEX_NAMES.get(name)


def clear_flag(band: str) -> tuple[str, int] | None:
    """``(flag band, value meaning clear/valid)`` of a band's family; None for Tessera bands."""
    return FAMILY_FLAGS.get(registered(band).family)


def family_scalars(family: Family) -> tuple[tuple[str, str], ...]:
    """``(short name, band)`` of a family's scalar bands, in registry order.

    The pipelines compute these per scene (``ndvi`` -> ``indices.ndvi``, ``vh_vv`` ->
    ``indices.vh_vv``) and write them under the band name.
    """
    return tuple(
        (spec.aliases[0], spec.name)
        for spec in _SPECS
        if spec.family == family and spec.kind == "scalar"
    )
