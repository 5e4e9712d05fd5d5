"""Static STAC catalog source: walk a ``catalog.json`` with pystac and filter locally."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import date, datetime
from pathlib import Path
from typing import Any

import pystac

from pipelines.sources.bands import COLLECTION_KIND, canonical_collection
from pipelines.sources.base import BBox, cloud_ok, finish, item_in_window, window
from pipelines.sources.errors import CatalogUnreachable, SourceError
from pipelines.sources.models import Kind, SceneItem, SearchResult, Skip
from pipelines.sources.parse import item_to_dict, parse_or_skip

__all__ = ["StaticCatalogSource", "load_catalog_items"]


def load_catalog_items(catalog_path: str | Path) -> list[tuple[str, dict[str, Any]]]:
    """Read every item of a static catalog as ``(item_href, item_dict)``.

    Asset hrefs are made absolute; ``collection`` is set from the item's
    collection link when the field is missing.

    Raises:
        CatalogUnreachable: The catalog file is missing or unreadable.
    """
    path = str(catalog_path)
    try:
        root = pystac.read_file(path)
    except FileNotFoundError as err:
        raise CatalogUnreachable(path, "no such file") from err
    except Exception as err:  # pystac raises a zoo of errors for bad JSON / STAC
        raise CatalogUnreachable(path, f"not a readable STAC catalog: {err}") from err
    if not isinstance(root, pystac.Catalog):
        raise CatalogUnreachable(path, f"not a catalog or collection: {type(root).__name__}")
    out: list[tuple[str, dict[str, Any]]] = []
    try:
        for item in root.get_items(recursive=True):
            data = item_to_dict(item)
            if not data.get("collection") and item.collection_id:
                data["collection"] = item.collection_id
            out.append((item.get_self_href() or path, data))
    except SourceError:
        raise
    except Exception as err:
        raise CatalogUnreachable(path, f"walking the catalog failed: {err}") from err
    return out


class StaticCatalogSource:
    """A :class:`~pipelines.sources.base.SceneSource` over a static catalog on disk.

    The catalog is walked once (on first search) and cached; filtering by
    collection, footprint, time and cloud cover happens locally with the same
    semantics as a STAC API search.
    """

    def __init__(
        self,
        catalog_path: str | Path,
        *,
        required_roles: Mapping[Kind, Sequence[str]] | None = None,
    ) -> None:
        """Create the source.

        Args:
            catalog_path: Path to ``catalog.json`` (or a collection JSON).
            required_roles: Per kind, roles an item must have (defaults:
                :data:`~pipelines.sources.bands.DEFAULT_REQUIRED_ROLES`).
        """
        self.catalog_path = str(catalog_path)
        self.required_roles = dict(required_roles or {})
        self._items: list[tuple[str, dict[str, Any]]] | None = None

    def _all(self) -> list[tuple[str, dict[str, Any]]]:
        if self._items is None:
            self._items = load_catalog_items(self.catalog_path)
        return self._items

    def search(
        self,
        collection: str,
        bbox: BBox,
        start: datetime | date,
        end: datetime | date,
        max_cloud: float | None = None,
    ) -> SearchResult:
        """Search the catalog (see :meth:`SceneSource.search`)."""
        lo, hi = window(start, end)
        wanted = canonical_collection(collection)
        kind = COLLECTION_KIND.get(wanted)
        items: list[SceneItem] = []
        skipped: list[Skip] = []
        for href, data in self._all():
            if canonical_collection(str(data.get("collection", ""))) != wanted:
                continue
            try:
                if not item_in_window(data, bbox, lo, hi):
                    continue
            except SourceError as err:
                skipped.append(Skip(str(data.get("id", href)), err.message, err.code, href))
                continue
            roles = self.required_roles.get(kind) if kind else None
            parsed = parse_or_skip(data, kind=kind, required_roles=roles, source_href=href)
            if isinstance(parsed, Skip):
                skipped.append(parsed)
            elif cloud_ok(parsed, max_cloud):
                items.append(parsed)
        return finish(
            items, skipped, "client" if max_cloud is not None and kind == "s2" else "none"
        )
