"""Dagster resources: where the data lives, where scenes come from, which area to ingest.

The environment is chosen in one place, :func:`default_resources`, from
environment variables read when Dagster builds resources at run time
(``EnvVar``), never at import time:

- ``EARTHMEM_DATA``: data directory (cube with its inventory, k-NN tables).
- ``EARTHMEM_AREA``: an area JSON (``{"name", "bbox": [min_lng, min_lat, max_lng, max_lat]}``;
  the sample manifest is one).
- ``EARTHMEM_CATALOG``: a static STAC catalog path (a live STAC API, e.g. the
  ``earth-search`` or ``planetary-computer`` preset: ``SceneSourceResource(kind=..., url=... or
  preset=...)`` in code).
- ``EARTHMEM_INGEST_EXECUTOR`` / ``EARTHMEM_DASK_SCHEDULER`` / ``EARTHMEM_DASK_WORKERS``:
  where the scene work runs (:mod:`pipelines.cluster`).
"""

from __future__ import annotations

import json
from datetime import date
from functools import cached_property, lru_cache
from pathlib import Path
from typing import Any, cast

from dagster import ConfigurableResource, EnvVar

from pipelines.lattice import LatticeWindow
from pipelines.sources import SceneSource, SourceConfig, SourceKind, open_source
from store import address, blocks
from store.cube import CubeWriter

__all__ = [
    "AreaResource",
    "SceneSourceResource",
    "StoreResource",
    "default_resources",
    "load_area",
    "load_period",
]


def load_area(path: str | Path) -> tuple[str, tuple[float, float, float, float]]:
    """Read an area JSON: ``(name, (min_lat, min_lng, max_lat, max_lng))``.

    The file holds ``{"name": ..., "bbox": [min_lng, min_lat, max_lng, max_lat]}``
    (GeoJSON/STAC order, as the sample manifest writes it).
    """
    doc: dict[str, Any] = json.loads(Path(path).read_text())
    bbox = [float(v) for v in doc["bbox"]]
    if len(bbox) != 4 or bbox[0] > bbox[2] or bbox[1] > bbox[3]:
        raise ValueError(
            f"area bbox must be [min_lng, min_lat, max_lng, max_lat], got {doc['bbox']!r}"
        )
    name = str(doc.get("name", Path(path).stem))
    return name, (bbox[1], bbox[0], bbox[3], bbox[2])


def load_period(path: str | Path) -> tuple[date, date] | None:
    """The period an area JSON declares (``"period": {"start", "end"}``, ISO dates), or None.

    A sample area has one (its scenes exist only then); a live area has none.

    Raises:
        ValueError: A period that is not two ISO dates with start <= end.
    """
    doc: dict[str, Any] = json.loads(Path(path).read_text())
    period = doc.get("period")
    if period is None:
        return None
    try:
        start, end = date.fromisoformat(period["start"]), date.fromisoformat(period["end"])
    except (KeyError, TypeError, ValueError) as exc:
        raise ValueError(
            f"area period must be {{'start', 'end'}} ISO dates, got {period!r}"
        ) from exc
    if start > end:
        raise ValueError(f"area period starts after it ends: {period!r}")
    return start, end


class StoreResource(ConfigurableResource):
    """The data directory: cube (icechunk, with the scene inventory) and k-NN tables."""

    data_dir: str

    def writer(self) -> CubeWriter:
        """A transactional cube writer (commits serialised across processes)."""
        return CubeWriter(self.data_dir)

    @property
    def knn_dir(self) -> Path:
        """Directory of the k-NN tables."""
        return Path(self.data_dir) / "knn"


class SceneSourceResource(ConfigurableResource):
    """Where scenes are found: a static catalog, a STAC API or the Tessera registry."""

    kind: str = "static"
    path: str | None = None
    url: str | None = None
    preset: str | None = None

    def open(self) -> SceneSource:
        """Open the configured source (static catalogs are parsed once per process and version)."""
        return _open_source_cached(
            self.kind, self.path, self.url, self.preset, _catalog_version(self.kind, self.path)
        )


def _catalog_version(kind: str, path: str | None) -> int:
    """Latest mtime of a static catalog's root and collection files (0 for other kinds).

    Adding items rewrites the collections' links, so this changes when the catalog does.
    """
    if kind != "static" or not path:
        return 0
    root = Path(path)
    files = [root, *root.parent.glob("*/collection.json")]
    return max((f.stat().st_mtime_ns for f in files if f.exists()), default=0)


@lru_cache(maxsize=8)
def _open_source_cached(
    kind: str, path: str | None, url: str | None, preset: str | None, version: int
) -> SceneSource:
    # walking a static catalog with pystac costs ~1 s per 200 items; every partition
    # searches it, so the parsed catalog is kept per (location, version) in the process
    return open_source(SourceConfig(kind=cast(SourceKind, kind), path=path, url=url, preset=preset))


class AreaResource(ConfigurableResource):
    """The area to ingest, from an area JSON or a sample manifest."""

    path: str

    @cached_property
    def _loaded(self) -> tuple[str, tuple[float, float, float, float]]:
        return load_area(self.path)

    @property
    def name(self) -> str:
        """Area name."""
        return self._loaded[0]

    @property
    def bbox(self) -> tuple[float, float, float, float]:
        """``(min_lat, min_lng, max_lat, max_lng)``."""
        return self._loaded[1]

    def window(self) -> LatticeWindow:
        """The area's lattice window."""
        return LatticeWindow(*address.bbox_q_range(*self.bbox))

    def block_window(self, block_id: str) -> LatticeWindow | None:
        """The area's part of a block (None if the block misses the area)."""
        return LatticeWindow.of_block(blocks.Block.parse(block_id)).intersect(self.window())

    def stac_bbox(self, window: LatticeWindow) -> tuple[float, float, float, float]:
        """STAC bbox ``(min_lng, min_lat, max_lng, max_lat)`` of a window."""
        return window.bounds()


def default_resources() -> dict[str, Any]:
    """Resources from the environment (resolved by Dagster at run time)."""
    from pipelines.cluster import DaskResource  # its settings are read when a run starts

    return {
        "dask": DaskResource(),
        "store": StoreResource(data_dir=EnvVar("EARTHMEM_DATA")),
        "scenes": SceneSourceResource(kind="static", path=EnvVar("EARTHMEM_CATALOG")),
        "area": AreaResource(path=EnvVar("EARTHMEM_AREA")),
    }
