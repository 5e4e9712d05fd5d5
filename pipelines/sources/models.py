"""Frozen internal models: what the pipeline sees instead of raw STAC dicts.

The adapters parse every STAC item into a :class:`SceneItem` (or record a
:class:`Skip` with the reason); nothing deeper than ``pipelines.sources``
handles STAC JSON.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from datetime import datetime
from types import MappingProxyType
from typing import Literal

__all__ = [
    "AssetRef",
    "CloudFilter",
    "Kind",
    "ScaleSource",
    "SceneItem",
    "SearchResult",
    "Skip",
]

Kind = Literal["s2", "s1", "tessera"]
"""The scene families earthmem ingests."""

ScaleSource = Literal[
    "raster:bands",
    "raster:scale",
    "bands",
    "baseline>=04.00",
    "baseline<04.00",
    "date>=2022-01-25",
    "date<2022-01-25",
    "identity",
]
"""Where an asset's scale/offset came from.

``raster:bands`` (STAC 1.0 raster extension), ``raster:scale`` (asset-level
``raster:scale``/``raster:offset``, raster extension v2 / STAC 1.1), ``bands``
(STAC 1.1 band-level ``scale``/``offset``); otherwise the Sentinel-2 processing
baseline rule keyed by ``s2:processing_baseline`` (``baseline...``) or, when
the baseline is absent, by acquisition date (``date...``); ``identity`` for
bands that are not scaled (SCL classes, S1 linear gamma0, Tessera arrays).
"""

CloudFilter = Literal["server-query", "server-filter", "client", "none"]
"""Where a search's ``max_cloud`` bound was applied.

``server-query``: STAC API ``query`` extension; ``server-filter``: CQL2
``filter``; ``client``: locally after the search (static catalog, or an API
whose conformance lists neither); ``none``: no bound (or not an optical
collection).
"""


@dataclass(frozen=True, slots=True)
class AssetRef:
    """One readable band of a scene, with everything needed to decode it."""

    href: str
    """Absolute href (local path, ``file://``, ``https://`` or ``s3://``), signed if needed."""
    role: str
    """Canonical band role: ``blue green red nir swir16 swir22 scl`` (S2), ``vv vh`` (S1),
    ``embedding scales landmask`` (Tessera)."""
    key: str
    """The provider's asset key this came from (``red``, ``B04``, ``B04_10m``, ...)."""
    band: str | None
    """Common Sentinel-2 band name (``B04``, ``SCL``), ``VV``/``VH`` for S1, else None."""
    scale: float
    """Multiply the stored value by this ..."""
    offset: float
    """... then add this, to get physical units (reflectance, gamma0)."""
    scale_source: ScaleSource
    """Which rule produced ``scale``/``offset``."""
    nodata: float | None
    """Stored value meaning "no data" (0 for S2 DN), or None if the file says nothing."""
    crs: int | str
    """EPSG code as int when it has one, else WKT2 / PROJ string."""
    transform: tuple[float, float, float, float, float, float] | None
    """Affine ``(a, b, c, d, e, f)`` from ``proj:transform``; None if the item omits it."""
    shape: tuple[int, int] | None
    """``(height, width)`` from ``proj:shape``; None if the item omits it."""
    dtype: str | None
    """Stored data type (``uint16``, ``float32``, ``int8``) if the item states it."""


@dataclass(frozen=True, slots=True)
class SceneItem:
    """One scene (S2/S1 overpass or Tessera tile-year), parsed and checked."""

    id: str
    """Item id as the provider spells it."""
    collection: str
    """Canonical collection: ``sentinel-2-l2a``, ``sentinel-1-rtc`` or ``tessera-embeddings``."""
    kind: Kind
    """Scene family."""
    datetime: datetime
    """Acquisition time, timezone-aware UTC (start of the range for range items)."""
    bbox: tuple[float, float, float, float]
    """``(min_lon, min_lat, max_lon, max_lat)`` in WGS84."""
    cloud_cover: float | None
    """``eo:cloud_cover`` in percent, None when absent (S1, Tessera)."""
    processing_baseline: str | None
    """Sentinel-2 processing baseline ``NN.NN`` if known."""
    assets: Mapping[str, AssetRef]
    """Assets keyed by canonical band role (read-only mapping)."""
    source_href: str | None
    """Where the item JSON came from (file path or API URL)."""
    tessera_year: int | None = None
    """Vintage year of a Tessera item, else None."""
    platform: str | None = field(default=None)
    """``platform`` property (``sentinel-2a``), if present."""
    updated: dt.datetime | None = None
    """``updated`` property (STAC common metadata: when the item was last changed), if present
    and readable; decides between two items with the same id
    (:func:`~pipelines.sources.base.resolve_duplicates`)."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "assets", MappingProxyType(dict(self.assets)))

    def __reduce__(self) -> tuple[type[SceneItem], tuple[object, ...]]:
        # read-only proxies do not pickle; Dagster's IO manager pickles items between assets
        values = [getattr(self, f.name) for f in fields(self)]
        return (
            type(self),
            tuple(dict(v) if isinstance(v, MappingProxyType) else v for v in values),
        )


@dataclass(frozen=True, slots=True)
class Skip:
    """An item that was found but not used, and why (never silent)."""

    item_id: str
    """Item id (or the href when the id could not be read)."""
    reason: str
    """Human-readable reason."""
    code: str = "skipped"
    """Machine code of the error that caused it (``missing_asset``, ``unknown_crs``, ...)."""
    href: str | None = None
    """Item or asset href concerned, if known."""
    when: datetime | None = None
    """Acquisition time of the item when it could be read (places the skip in its week)."""


@dataclass(frozen=True, slots=True)
class SearchResult:
    """What :meth:`SceneSource.search` returns."""

    items: tuple[SceneItem, ...]
    """Parsed items, sorted by (datetime, id)."""
    skipped: tuple[Skip, ...]
    """Items found but not usable, with reasons."""
    cloud_filter: CloudFilter = "none"
    """Where the ``max_cloud`` bound was applied."""

    @property
    def ids(self) -> tuple[str, ...]:
        """Ids of the usable items, in order."""
        return tuple(item.id for item in self.items)
