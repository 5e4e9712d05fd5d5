"""Tessera ingestion of one vintage over a lattice window: plain functions, no Dagster."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
import rasterio

from pipelines.lattice import LatticeWindow
from pipelines.sources.models import SceneItem, Skip
from pipelines.tessera.compute import gather_onto_lattice
from store.knn import binarize

__all__ = ["TesseraVintage", "load_vintage"]


@dataclass(frozen=True)
class TesseraVintage:
    """One year's embeddings on a lattice window."""

    year: int
    """Calendar year of the vintage."""
    embedding: npt.NDArray[np.int8]
    """(h, w, 128) int8 vectors (zero where not valid land)."""
    scale: npt.NDArray[np.float32]
    """(h, w) per-cell scale: NaN water, +inf no data."""
    bin128: npt.NDArray[np.uint8]
    """(h, w, 16) sign bits after the fixed seeded rotation (zero where not valid)."""
    item_ids: tuple[str, ...]
    """Tiles used."""
    skipped: tuple[Skip, ...]
    """Tiles that could not be read, with reasons."""

    @property
    def n_valid(self) -> int:
        """Cells holding a land vector."""
        return int((np.isfinite(self.scale) & (self.scale > 0)).sum())


def load_vintage(items: Sequence[SceneItem], window: LatticeWindow, year: int) -> TesseraVintage:
    """Gather every tile of ``year`` onto ``window``; earlier tiles (by id) win overlaps."""
    h, w = window.shape
    emb = np.zeros((h, w, 128), dtype=np.int8)
    scale = np.full((h, w), np.inf, dtype=np.float32)
    used: list[str] = []
    skipped: list[Skip] = []
    for it in sorted(items, key=lambda i: i.id):
        try:
            with rasterio.open(it.assets["landmask"].href) as src:
                crs, transform = src.crs, src.transform
            tile = np.load(it.assets["embedding"].href, mmap_mode="r")
            tile_scale = np.load(it.assets["scales"].href, mmap_mode="r")
            if tile.ndim != 3 or tile.shape[:2] != tile_scale.shape or tile.dtype != np.int8:
                raise ValueError(
                    f"embedding {tile.shape}/{tile.dtype} does not match scales {tile_scale.shape}"
                )
            v, s = gather_onto_lattice(tile, tile_scale, crs, transform, window)
        except Exception as exc:
            skipped.append(
                Skip(it.id, f"unreadable: {type(exc).__name__}: {exc}"[:300], code="corrupt")
            )
            continue
        take = np.isposinf(scale) & ~np.isposinf(s)
        emb[take] = v[take]
        scale[take] = s[take]
        used.append(it.id)
    valid = np.isfinite(scale) & (scale > 0)
    bits = np.zeros((h, w, 16), dtype=np.uint8)
    if valid.any():
        bits[valid] = binarize(emb[valid])
    return TesseraVintage(year, emb, scale, bits, tuple(used), tuple(skipped))
