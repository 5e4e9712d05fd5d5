"""Asset-key conventions of the common providers, and collection names.

Three Sentinel-2 L2A conventions are recognised (checked against published
items):

- Earth Search v1 (Element 84): ``blue green red nir swir16 swir22 scl`` (plus
  ``coastal rededge1..3 nir08 nir09 aot wvp visual`` and ``*-jp2`` twins,
  ignored here).
- Microsoft Planetary Computer: ``B02 B03 B04 B08 B11 B12 SCL``.
- Copernicus Data Space Ecosystem STAC: ``B02_10m ... B12_20m SCL_20m``; the
  same band also appears at coarser resolutions (``B04_20m``, ``B04_60m``),
  and the finest one is taken.

Sentinel-1 RTC (Planetary Computer ``sentinel-1-rtc``): ``vv``, ``vh``.
Tessera items (sample catalog, registry): ``embedding``, ``scales``, ``landmask``.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from pipelines.sources.errors import UnknownCollection
from pipelines.sources.models import Kind

__all__ = [
    "COLLECTION_KIND",
    "DEFAULT_REQUIRED_ROLES",
    "PROVIDER_COLLECTIONS",
    "REFLECTANCE_ROLES",
    "ROLE_CANDIDATES",
    "S2_BAND_OF_ROLE",
    "canonical_collection",
    "provider_collection",
    "select_assets",
]

S2_BAND_OF_ROLE: Mapping[str, str] = MappingProxyType(
    {
        "blue": "B02",
        "green": "B03",
        "red": "B04",
        "nir": "B08",
        "swir16": "B11",
        "swir22": "B12",
        "scl": "SCL",
    }
)
"""Canonical S2 role -> ESA band name."""

REFLECTANCE_ROLES = frozenset({"blue", "green", "red", "nir", "swir16", "swir22"})
"""Roles holding scaled surface reflectance (the baseline rule applies to these only)."""

_S2_CANDIDATES: dict[str, tuple[str, ...]] = {
    role: (
        role,  # Earth Search v1
        band,  # Planetary Computer
        f"{band}_10m",  # CDSE, finest first
        f"{band}_20m",
        f"{band}_60m",
    )
    for role, band in S2_BAND_OF_ROLE.items()
}

ROLE_CANDIDATES: Mapping[Kind, Mapping[str, tuple[str, ...]]] = MappingProxyType(
    {
        "s2": MappingProxyType(_S2_CANDIDATES),
        "s1": MappingProxyType({"vv": ("vv", "VV"), "vh": ("vh", "VH")}),
        "tessera": MappingProxyType(
            {
                "embedding": ("embedding", "embeddings"),
                "scales": ("scales",),
                "landmask": ("landmask",),
            }
        ),
    }
)
"""For each kind and canonical role, the asset keys that carry it, in preference order."""

DEFAULT_REQUIRED_ROLES: Mapping[Kind, tuple[str, ...]] = MappingProxyType(
    {
        "s2": ("blue", "green", "red", "nir", "swir16", "scl"),
        "s1": ("vv", "vh"),
        "tessera": ("embedding", "scales"),
    }
)
"""Roles an item must have to be usable (indices ndvi/ndwi/ndmi/lswi/evi + SCL mask;
``swir22`` is parsed when present but not required)."""

COLLECTION_KIND: Mapping[str, Kind] = MappingProxyType(
    {
        "sentinel-2-l2a": "s2",
        "sentinel-2-c1-l2a": "s2",
        "sentinel-1-rtc": "s1",
        "tessera-embeddings": "tessera",
    }
)
"""Collection name (canonical or provider) -> scene family."""

PROVIDER_COLLECTIONS: Mapping[str, Mapping[str, str | None]] = MappingProxyType(
    {
        # Earth Search v1: S2 L2A; no Sentinel-1 RTC collection (only GRD).
        "earth-search": MappingProxyType(
            {"sentinel-2-l2a": "sentinel-2-l2a", "sentinel-1-rtc": None, "tessera-embeddings": None}
        ),
        "planetary-computer": MappingProxyType(
            {
                "sentinel-2-l2a": "sentinel-2-l2a",
                "sentinel-1-rtc": "sentinel-1-rtc",
                "tessera-embeddings": None,
            }
        ),
        # CDSE STAC v1: S2 L2A; Sentinel-1 is GRD/SLC only (no RTC).
        "cdse": MappingProxyType(
            {"sentinel-2-l2a": "sentinel-2-l2a", "sentinel-1-rtc": None, "tessera-embeddings": None}
        ),
    }
)
"""Canonical collection -> the provider's name (None: the provider has no equivalent).

Providers not listed (static catalogs, the loopback server, any URL) use the
canonical names unchanged."""


def provider_collection(provider: str | None, collection: str) -> str:
    """Translate a canonical collection name to a provider's name.

    Args:
        provider: Preset name (``earth-search``, ``planetary-computer``, ``cdse``) or None.
        collection: Canonical name, or already a provider name (passed through).

    Returns:
        The name to send to the provider.

    Raises:
        UnknownCollection: The provider is known to have no such collection.
    """
    table = PROVIDER_COLLECTIONS.get(provider or "")
    if table is None or collection not in table:
        return collection
    name = table[collection]
    if name is None:
        raise UnknownCollection(f"provider {provider!r} has no collection for {collection!r}")
    return name


def canonical_collection(collection: str) -> str:
    """Map a provider collection name back to the canonical one (identity if unknown)."""
    if collection == "sentinel-2-c1-l2a":
        return "sentinel-2-l2a"
    return collection


def select_assets(kind: Kind, asset_keys: set[str] | frozenset[str]) -> dict[str, str]:
    """Choose, for each canonical role, the asset key carrying it.

    Args:
        kind: Scene family.
        asset_keys: The item's asset keys.

    Returns:
        ``{role: asset_key}`` for every role found (missing roles are absent).
    """
    chosen: dict[str, str] = {}
    for role, candidates in ROLE_CANDIDATES[kind].items():
        for key in candidates:
            if key in asset_keys:
                chosen[role] = key
                break
    return chosen
