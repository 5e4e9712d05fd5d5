"""STAC and Tessera sources: find scenes and parse them into frozen models.

Pick a source with :func:`open_source` (static catalog, STAC API, Tessera
registry), call ``search(collection, bbox, start, end, max_cloud)``, and get a
:class:`SearchResult` of :class:`SceneItem` (assets keyed by canonical band
role) plus :class:`Skip` records for unusable items. Nothing past this package
handles raw STAC dicts.
"""

from __future__ import annotations

from typing import Any

from pipelines.sources.api import PRESETS, StacApiSource
from pipelines.sources.bands import (
    COLLECTION_KIND,
    DEFAULT_REQUIRED_ROLES,
    PROVIDER_COLLECTIONS,
    ROLE_CANDIDATES,
    S2_BAND_OF_ROLE,
    provider_collection,
)
from pipelines.sources.base import BBox, SceneSource
from pipelines.sources.check import check_readable
from pipelines.sources.errors import (
    CatalogUnreachable,
    CorruptItem,
    MissingAsset,
    SourceError,
    UnknownCollection,
    UnknownCRS,
)
from pipelines.sources.factory import SourceConfig, SourceKind, open_source
from pipelines.sources.models import (
    AssetRef,
    CloudFilter,
    Kind,
    ScaleSource,
    SceneItem,
    SearchResult,
    Skip,
)
from pipelines.sources.parse import baseline_rule, parse_item, parse_or_skip
from pipelines.sources.signing import PC_TOKEN_ENDPOINT, SasSigner, planetary_computer_modifier
from pipelines.sources.static import StaticCatalogSource
from pipelines.sources.tessera import TesseraRegistrySource

__all__ = [
    "COLLECTION_KIND",
    "DEFAULT_REQUIRED_ROLES",
    "PC_TOKEN_ENDPOINT",
    "PRESETS",
    "PROVIDER_COLLECTIONS",
    "ROLE_CANDIDATES",
    "S2_BAND_OF_ROLE",
    "AssetRef",
    "BBox",
    "CatalogUnreachable",
    "CloudFilter",
    "CorruptItem",
    "Kind",
    "MissingAsset",
    "SasSigner",
    "ScaleSource",
    "SceneItem",
    "SceneSource",
    "SearchResult",
    "Skip",
    "SourceConfig",
    "SourceError",
    "SourceKind",
    "StacApiSource",
    "StaticCatalogSource",
    "TesseraRegistrySource",
    "UnknownCRS",
    "UnknownCollection",
    "baseline_rule",
    "check_readable",
    "open_source",
    "parse_item",
    "parse_or_skip",
    "planetary_computer_modifier",
    "provider_collection",
    "serve_catalog",
]


def __getattr__(name: str) -> Any:
    # serve_catalog is imported lazily so that ``python -m pipelines.sources.serve``
    # does not import its own module twice.
    if name == "serve_catalog":
        from pipelines.sources.serve import serve_catalog

        return serve_catalog
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
