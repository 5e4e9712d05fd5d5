"""Static STAC catalog source: walk a ``catalog.json`` with pystac and filter locally."""

from __future__ import annotations

import json
import os
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

    Local catalogs are walked by following ``child``/``item`` links over the
    raw JSON (about 20x faster than building pystac objects); remote ones go
    through pystac. Asset hrefs are made absolute; ``collection`` is set from
    the parent collection when the item lacks it.

    Raises:
        CatalogUnreachable: The catalog (or a file it links) is missing or unreadable.
    """
    path = str(catalog_path)
    if "://" in path and not path.startswith("file://"):
        return _load_with_pystac(path)
    return _load_json_tree(Path(path.removeprefix("file://")).resolve())


def _read_json(path: Path, root: str) -> dict[str, Any]:
    try:
        with path.open("rb") as fh:
            data = json.load(fh)
    except FileNotFoundError as err:
        raise CatalogUnreachable(root, f"no such file: {path}") from err
    except (OSError, ValueError) as err:
        raise CatalogUnreachable(root, f"unreadable STAC JSON {path}: {err}") from err
    if not isinstance(data, dict):
        raise CatalogUnreachable(root, f"not a STAC object: {path}")
    return data


def _load_json_tree(root: Path) -> list[tuple[str, dict[str, Any]]]:
    top = str(root)
    out: list[tuple[str, dict[str, Any]]] = []
    seen: set[Path] = set()
    stack: list[tuple[Path, str | None]] = [(root, None)]
    while stack:
        path, parent_collection = stack.pop()
        if path in seen:
            continue
        seen.add(path)
        data = _read_json(path, top)
        if data.get("type") == "Feature":
            href = str(path)
            for asset in (data.get("assets") or {}).values():
                if isinstance(asset, dict) and isinstance(asset.get("href"), str):
                    asset["href"] = _absolute(asset["href"], path)
            if not data.get("collection") and parent_collection:
                data["collection"] = parent_collection
            out.append((href, data))
            continue
        if data.get("type") not in ("Catalog", "Collection"):
            raise CatalogUnreachable(top, f"not a catalog, collection or item: {path}")
        collection = data.get("id") if data.get("type") == "Collection" else parent_collection
        children = [
            (path.parent / link["href"]).resolve()
            for link in data.get("links", [])
            if isinstance(link, dict)
            and link.get("rel") in ("child", "item")
            and isinstance(link.get("href"), str)
            and "://" not in link["href"]
        ]
        stack.extend((child, collection) for child in reversed(children))
    out.sort(key=lambda pair: pair[0])
    return out


def _absolute(href: str, item_path: Path) -> str:
    if "://" in href or href.startswith("/"):
        return href
    return os.path.normpath(item_path.parent / href)


def _load_with_pystac(path: str) -> list[tuple[str, dict[str, Any]]]:
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
