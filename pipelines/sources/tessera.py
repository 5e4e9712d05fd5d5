"""Tessera registry source: embeddings tiles in the geotessera layout.

Layout under a root directory or base URL (as the ``geotessera`` package
expects it)::

    global_0.1_degree_representation/{year}/grid_{lon:.2f}_{lat:.2f}/grid_{lon:.2f}_{lat:.2f}.npy
    global_0.1_degree_representation/{year}/grid_{lon:.2f}_{lat:.2f}/grid_{lon:.2f}_{lat:.2f}_scales.npy
    global_0.1_degree_tiff_all/grid_{lon:.2f}_{lat:.2f}.tiff      (landmask: UTM CRS, transform)

Tiles are 0.1 degree squares named by their centre (``x.x5``). A tile with no
embedding file is simply absent (ocean, not yet published); a tile with an
embedding but no scales file, or no readable landmask (so no CRS), is a Skip.
"""

from __future__ import annotations

import math
import os
from datetime import UTC, date, datetime
from pathlib import Path
from typing import Any

from pipelines.sources.bands import COLLECTION_KIND, canonical_collection
from pipelines.sources.base import BBox, finish, window
from pipelines.sources.errors import UnknownCollection
from pipelines.sources.models import AssetRef, SceneItem, SearchResult, Skip

__all__ = [
    "EMBEDDINGS_DIR",
    "LANDMASKS_DIR",
    "MAX_TILES",
    "TesseraRegistrySource",
    "grid_name",
    "tiles_for_bbox",
]

EMBEDDINGS_DIR = "global_0.1_degree_representation"
"""Sub-directory of the embeddings (``.npy`` + ``_scales.npy``)."""
LANDMASKS_DIR = "global_0.1_degree_tiff_all"
"""Sub-directory of the landmask GeoTIFFs."""
MAX_TILES = 10_000
"""Explicit bound on tiles one search may enumerate (about 10 x 10 degrees)."""


def grid_name(lon: float, lat: float) -> str:
    """``grid_{lon:.2f}_{lat:.2f}`` for a tile centre."""
    return f"grid_{lon:.2f}_{lat:.2f}"


def tiles_for_bbox(bbox: BBox) -> list[tuple[float, float]]:
    """Centres ``(lon, lat)`` of the 0.1-degree tiles touching ``bbox``.

    Raises:
        ValueError: The bbox is inverted or spans more than :data:`MAX_TILES` tiles.
    """
    min_lon, min_lat, max_lon, max_lat = bbox
    if max_lon < min_lon or max_lat < min_lat:
        raise ValueError(f"inverted bbox {bbox!r}")
    i0, i1 = math.floor(min_lon * 10 + 1e-9), math.floor(max_lon * 10 - 1e-9)
    j0, j1 = math.floor(min_lat * 10 + 1e-9), math.floor(max_lat * 10 - 1e-9)
    i1, j1 = max(i0, i1), max(j0, j1)
    if (i1 - i0 + 1) * (j1 - j0 + 1) > MAX_TILES:
        raise ValueError(f"bbox {bbox!r} spans more than {MAX_TILES} Tessera tiles")
    return [
        (round(i / 10 + 0.05, 2), round(j / 10 + 0.05, 2))
        for j in range(j0, j1 + 1)
        for i in range(i0, i1 + 1)
    ]


class TesseraRegistrySource:
    """A :class:`~pipelines.sources.base.SceneSource` over a Tessera registry tree."""

    def __init__(self, root: str | Path, *, timeout_s: float = 20.0) -> None:
        """Create the source.

        Args:
            root: Local directory or ``http(s)://`` base URL of the registry tree.
            timeout_s: HTTP timeout for existence checks against a base URL.
        """
        self.root = str(root).rstrip("/")
        self.remote = self.root.startswith(("http://", "https://"))
        self.timeout_s = timeout_s

    def _href(self, *parts: str) -> str:
        return "/".join((self.root, *parts)) if self.remote else os.path.join(self.root, *parts)

    def _exists(self, href: str) -> bool:
        if not self.remote:
            return os.path.isfile(href)
        import httpx

        from pipelines.sources.errors import CatalogUnreachable

        try:
            resp = httpx.head(href, timeout=self.timeout_s, follow_redirects=True)
        except httpx.HTTPError as err:
            raise CatalogUnreachable(self.root, f"{type(err).__name__}: {err}") from err
        if resp.status_code >= 500:
            raise CatalogUnreachable(self.root, "server error", status=resp.status_code)
        return resp.status_code == 200

    def search(
        self,
        collection: str,
        bbox: BBox,
        start: datetime | date,
        end: datetime | date,
        max_cloud: float | None = None,
    ) -> SearchResult:
        """Enumerate tile-years touching the bbox and window (see :meth:`SceneSource.search`)."""
        if COLLECTION_KIND.get(canonical_collection(collection)) != "tessera":
            raise UnknownCollection(f"the Tessera registry has no collection {collection!r}")
        lo, hi = window(start, end)
        items: list[SceneItem] = []
        skipped: list[Skip] = []
        for year in range(lo.year, hi.year + 1):
            for lon, lat in tiles_for_bbox(bbox):
                result = self._tile(year, lon, lat)
                if isinstance(result, SceneItem):
                    items.append(result)
                elif result is not None:
                    skipped.append(result)
        return finish(items, skipped, "none")

    def _tile(self, year: int, lon: float, lat: float) -> SceneItem | Skip | None:
        grid = grid_name(lon, lat)
        item_id = f"tessera_{year}_{grid}"
        emb = self._href(EMBEDDINGS_DIR, str(year), grid, f"{grid}.npy")
        if not self._exists(emb):
            return None
        scales = self._href(EMBEDDINGS_DIR, str(year), grid, f"{grid}_scales.npy")
        if not self._exists(scales):
            return Skip(item_id, f"no scales file {scales}", "missing_asset", emb)
        landmask = self._href(LANDMASKS_DIR, f"{grid}.tiff")
        geo = _landmask_grid(landmask, self.remote, self.timeout_s)
        if isinstance(geo, str):
            return Skip(item_id, f"landmask {landmask}: {geo}", "unknown_crs", landmask)
        crs, transform, shape = geo

        def ref(href: str, role: str, dtype: str) -> AssetRef:
            return AssetRef(
                href=href,
                role=role,
                key=role,
                band=None,
                scale=1.0,
                offset=0.0,
                scale_source="identity",
                nodata=None,
                crs=crs,
                transform=transform,
                shape=shape,
                dtype=dtype,
            )

        return SceneItem(
            id=item_id,
            collection="tessera-embeddings",
            kind="tessera",
            datetime=datetime(year, 1, 1, tzinfo=UTC),
            bbox=(lon - 0.05, lat - 0.05, lon + 0.05, lat + 0.05),
            cloud_cover=None,
            processing_baseline=None,
            assets={
                "embedding": ref(emb, "embedding", "int8"),
                "scales": ref(scales, "scales", "float32"),
                "landmask": ref(landmask, "landmask", "uint8"),
            },
            source_href=emb,
            tessera_year=year,
        )


def _landmask_grid(
    href: str, remote: bool, timeout_s: float
) -> tuple[int | str, tuple[float, float, float, float, float, float], tuple[int, int]] | str:
    """CRS, transform and shape of a landmask GeoTIFF, or the reason it cannot be read.

    Remote landmasks (about 1 MB each) are fetched whole with httpx and opened
    from memory: no GDAL networking, the timeout holds, and servers without
    HTTP range support work too.
    """
    import rasterio
    from rasterio.errors import RasterioError
    from rasterio.io import MemoryFile

    if not remote and not os.path.isfile(href):
        return "missing"
    try:
        if remote:
            import httpx

            try:
                resp = httpx.get(href, timeout=timeout_s, follow_redirects=True)
            except httpx.HTTPError as err:
                return f"fetch failed ({err})"
            if resp.status_code != 200:
                return f"HTTP {resp.status_code}"
            with MemoryFile(resp.content) as mem, mem.open() as ds:
                return _grid_of(ds)
        with rasterio.open(href) as ds:
            return _grid_of(ds)
    except (RasterioError, OSError) as err:
        return f"unreadable ({err})"


def _grid_of(
    ds: Any,
) -> tuple[int | str, tuple[float, float, float, float, float, float], tuple[int, int]] | str:
    if ds.crs is None:
        return "no CRS"
    epsg = ds.crs.to_epsg()
    crs: int | str = epsg if epsg is not None else ds.crs.to_wkt()
    t = ds.transform
    return crs, (t.a, t.b, t.c, t.d, t.e, t.f), (ds.height, ds.width)
