"""Shared fixtures: one tiny sample area built per test session."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import rasterio
import rasterio.features
import shapely
from pyproj import Transformer
from shapely.geometry import shape

from pipelines.sample import SampleInfo, build_sample


@dataclass
class Sample:
    """A built sample with convenience readers for tests."""

    info: SampleInfo
    manifest: dict[str, Any]

    @property
    def root(self) -> Path:
        return self.info.root

    def items(self, collection: str) -> list[dict[str, Any]]:
        out = []
        for p in sorted((self.root / collection).glob("*/*.json")):
            out.append(json.loads(p.read_text()))
        return out

    def item_dir(self, collection: str, item_id: str) -> Path:
        return self.root / collection / item_id

    def s2_by_date(self) -> dict[str, dict[str, Any]]:
        return {it["properties"]["datetime"][:10]: it for it in self.items("sentinel-2-l2a")}

    def s1_by_date(self) -> dict[str, dict[str, Any]]:
        return {it["properties"]["datetime"][:10]: it for it in self.items("sentinel-1-rtc")}

    def read(self, collection: str, item: dict[str, Any], asset: str) -> np.ndarray:
        href = item["assets"][asset]["href"]
        with rasterio.open(self.item_dir(collection, item["id"]) / href) as ds:
            return ds.read(1)

    def reflectance(self, item: dict[str, Any], asset: str) -> np.ndarray:
        """Reflectance from DN via the item's raster:bands scale/offset; NaN for nodata."""
        rb = item["assets"][asset]["raster:bands"][0]
        dn = self.read("sentinel-2-l2a", item, asset).astype(np.float64)
        out = dn * rb["scale"] + rb["offset"]
        out[dn == rb["nodata"]] = np.nan
        return out

    def landcover(self) -> np.ndarray:
        with rasterio.open(self.root / "landcover.tif") as ds:
            return ds.read(1)

    def event(self, event_id: str) -> dict[str, Any]:
        return next(e for e in self.manifest["events"] if e["id"] == event_id)

    def mask(self, geometry: dict[str, Any]) -> np.ndarray:
        """Rasterise a lon/lat geometry onto the 10 m grid (pixel centres inside)."""
        g = self.manifest["grid"]
        tr = Transformer.from_crs(4326, self.manifest["crs"], always_xy=True)
        geom = shapely.transform(
            shape(geometry), lambda xy: np.stack(tr.transform(xy[:, 0], xy[:, 1]), axis=1)
        )
        t = rasterio.Affine(*g["transform"])
        return rasterio.features.rasterize(
            [(geom, 1)], out_shape=tuple(g["shape"]), transform=t, fill=0, dtype="uint8"
        ).astype(bool)


@pytest.fixture(scope="session")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Sample:
    root = tmp_path_factory.mktemp("sample") / "tiny"
    info = build_sample(root, "tiny", seed=0)
    manifest = json.loads(info.manifest.read_text())
    return Sample(info=info, manifest=manifest)
