"""Static STAC catalog source: walk a ``catalog.json`` with pystac and filter locally."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import date, datetime
from pathlib import Path
from typing import Any

import pystac

from pipelines.sources.bands import COLLECTION_KIND, canonical_collection
from pipelines.sources.base import BBox, cloud_ok, finish, item_in_window, window
from pipelines.sources.errors import CatalogUnreachable, CorruptItem, SourceError
from pipelines.sources.models import Kind, SceneItem, SearchResult, Skip
from pipelines.sources.parse import item_to_dict, parse_or_skip

__all__ = ["LoadedCatalog", "StaticCatalogSource", "load_catalog", "load_catalog_items"]


def load_catalog_items(catalog_path: str | Path) -> list[tuple[str, dict[str, Any]]]:
    """Read every item of a static catalog as ``(item_href, item_dict)``.

    Items whose JSON cannot be read are left out (:func:`load_catalog` reports them).

    Raises:
        CatalogUnreachable: The catalog (or a catalog or collection it links) is missing or unreadable.
    """
    return load_catalog(catalog_path).items


@dataclass(frozen=True)
class LoadedCatalog:
    """A static catalog's items, and the item files that could not be read."""

    items: list[tuple[str, dict[str, Any]]]
    """``(item_href, item_dict)``, sorted by href."""
    broken: list[tuple[str | None, Skip]]
    """``(collection of the linking parent, skip)`` of every item file that is not a readable item."""


def load_catalog(catalog_path: str | Path) -> LoadedCatalog:
    """Read every item of a static catalog, and record the item files that cannot be read.

    Local catalogs are walked by following ``child``/``item`` links over the
    raw JSON (about 20x faster than building pystac objects); remote ones go
    through pystac. Asset hrefs are made absolute; ``collection`` is set from
    the parent collection when the item lacks it. A file linked as an ``item``
    that is missing, not JSON or not a STAC Feature is one bad item (a skip with
    its reason), not a broken catalog: the other items still load.

    Raises:
        CatalogUnreachable: The catalog, or a catalog or collection it links, is missing or unreadable.
    """
    path = str(catalog_path)
    if "://" in path and not path.startswith("file://"):
        return LoadedCatalog(_load_with_pystac(path), [])
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


def _load_json_tree(root: Path) -> LoadedCatalog:
    top = str(root)
    out: list[tuple[str, dict[str, Any]]] = []
    broken: list[tuple[str | None, Skip]] = []
    seen: set[Path] = set()
    stack: list[tuple[Path, str | None, str]] = [(root, None, "root")]
    while stack:
        path, parent_collection, rel = stack.pop()
        if path in seen:
            continue
        seen.add(path)
        try:
            data = _read_json(path, top)
        except CatalogUnreachable as err:
            if rel != "item":
                raise
            broken.append((parent_collection, _bad_item_file(path, err.message)))
            continue
        if data.get("type") == "Feature":
            href = str(path)
            assets = data.get("assets")
            for asset in assets.values() if isinstance(assets, dict) else ():
                if isinstance(asset, dict) and isinstance(asset.get("href"), str):
                    asset["href"] = _absolute(asset["href"], path)
            if not data.get("collection") and parent_collection:
                data["collection"] = parent_collection
            out.append((href, data))
            continue
        if rel == "item":
            broken.append((parent_collection, _bad_item_file(path, "not a STAC item (Feature)")))
            continue
        if data.get("type") not in ("Catalog", "Collection"):
            raise CatalogUnreachable(top, f"not a catalog, collection or item: {path}")
        collection = data.get("id") if data.get("type") == "Collection" else parent_collection
        children = [
            ((path.parent / link["href"]).resolve(), str(link["rel"]))
            for link in data.get("links", [])
            if isinstance(link, dict)
            and link.get("rel") in ("child", "item")
            and isinstance(link.get("href"), str)
            and "://" not in link["href"]
        ]
        stack.extend((child, collection, r) for child, r in reversed(children))
    out.sort(key=lambda pair: pair[0])
    broken.sort(key=lambda pair: pair[1].item_id)
    return LoadedCatalog(out, broken)


def _bad_item_file(path: Path, message: str) -> Skip:
    """The skip of an item file that is not a readable item (its id is unknown: the path stands in)."""
    return Skip(str(path), f"unreadable item file: {message}"[:300], CorruptItem.code, str(path))


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
        self._loaded: LoadedCatalog | None = None

    def _load(self) -> LoadedCatalog:
        if self._loaded is None:
            self._loaded = load_catalog(self.catalog_path)
        return self._loaded

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
        loaded = self._load()
        # an unreadable item file has no footprint or time: reported by every search of its collection
        skipped = [
            skip for coll, skip in loaded.broken if canonical_collection(str(coll or "")) == wanted
        ]
        for href, data in loaded.items:
            if canonical_collection(str(data.get("collection", ""))) != wanted:
                continue
            try:
                if not item_in_window(data, bbox, lo, hi):
                    continue
            except SourceError as err:
                skipped.append(Skip(str(data.get("id", href)), err.message, err.code, href))
                continue
            except (
                AttributeError,
                KeyError,
                TypeError,
                ValueError,
            ) as err:  # malformed JSON shapes
                reason = f"unparseable item: {err!r}"[:300]
                skipped.append(Skip(str(data.get("id", href)), reason, CorruptItem.code, href))
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
