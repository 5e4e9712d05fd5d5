"""Typed errors of the STAC sources layer.

One root (:class:`SourceError`); each error also inherits the builtin it
resembles, and carries a stable machine ``code`` like the store errors do.
Per-item problems (missing asset, unknown CRS, corrupt item) are raised by the
parser and turned into :class:`~pipelines.sources.models.Skip` records by the
adapters; an unreachable catalog is raised to the caller.
"""

from __future__ import annotations

__all__ = [
    "CatalogUnreachable",
    "CorruptItem",
    "MissingAsset",
    "SourceError",
    "UnknownCRS",
    "UnknownCollection",
]


class SourceError(Exception):
    """Root of every error raised by ``pipelines.sources``."""

    code: str = "source_error"

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class CatalogUnreachable(SourceError, ConnectionError):
    """A catalog (static file, STAC API or registry) could not be read.

    Wraps pystac-client ``APIError``, connection errors, timeouts and missing
    catalog files. ``status`` is the HTTP status when the server answered.
    """

    code = "catalog_unreachable"

    def __init__(self, url: str, message: str, status: int | None = None) -> None:
        super().__init__(f"catalog unreachable: {url}: {message}")
        self.url = url
        self.status = status


class UnknownCollection(SourceError, KeyError):
    """A collection name has no equivalent at the chosen provider."""

    code = "unknown_collection"

    def __str__(self) -> str:
        return self.message


class MissingAsset(SourceError, KeyError):
    """An item lacks an asset the pipeline needs (e.g. no ``scl`` band)."""

    code = "missing_asset"

    def __init__(self, item_id: str, roles: tuple[str, ...]) -> None:
        super().__init__(f"item {item_id!r} lacks asset(s) for role(s) {', '.join(roles)}")
        self.item_id = item_id
        self.roles = roles

    def __str__(self) -> str:
        return self.message


class UnknownCRS(SourceError, ValueError):
    """An item or asset has no CRS, or one that PROJ does not recognise."""

    code = "unknown_crs"


class CorruptItem(SourceError, ValueError):
    """An item (or the file behind an asset) cannot be parsed or opened."""

    code = "corrupt_item"
