"""Tessera ingestion of one vintage over a lattice window: plain functions, no Dagster."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import date

import numpy as np
import numpy.typing as npt
import rasterio

from pipelines.lattice import LatticeWindow
from pipelines.sources.models import SceneItem, Skip
from pipelines.tessera.compute import gather_onto_lattice
from store.cube import CubeTransaction
from store.inventory import InventoryRow
from store.knn import binarize
from store.tslot import year_slot

__all__ = [
    "TesseraVintage",
    "VintageTotals",
    "inventory_key",
    "load_vintage",
    "vintage_inventory",
    "write_vintage",
]


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

    @property
    def bad_scales(self) -> int:
        """Cells whose finite scale is not positive (a broken tile: the check fails on them)."""
        finite = np.isfinite(self.scale)
        return int((self.scale[finite] <= 0).sum())


@dataclass(frozen=True)
class VintageTotals:
    """What a vintage's checks, metadata and inventory row need of it (also summed over blocks)."""

    n_valid: int
    """Cells holding a land vector."""
    bad_scales: int
    """Cells with a finite scale that is not positive."""
    item_ids: tuple[str, ...]
    """Tiles read (sorted)."""
    skipped: tuple[Skip, ...]
    """Tiles that could not be read (each once, by tile id)."""

    @classmethod
    def of(cls, vintage: TesseraVintage) -> VintageTotals:
        return cls(
            vintage.n_valid, vintage.bad_scales, tuple(sorted(vintage.item_ids)), vintage.skipped
        )

    @classmethod
    def summed(cls, parts: Sequence[VintageTotals]) -> VintageTotals:
        """The totals of a vintage read block by block (tiles and skips named once)."""
        skips = {s.item_id: s for p in parts for s in p.skipped}
        return cls(
            sum(p.n_valid for p in parts),
            sum(p.bad_scales for p in parts),
            tuple(sorted({i for p in parts for i in p.item_ids})),
            tuple(skips[k] for k in sorted(skips)),
        )


def inventory_key(year: int) -> str:
    """The inventory partition key of a vintage (also its commit's partition key)."""
    return f"tessera|{year}"


def write_vintage(tx: CubeTransaction, vintage: TesseraVintage, window: LatticeWindow) -> None:
    """Write a vintage's int8 vectors, scales and sign bits over ``window`` into a transaction."""
    slot = np.array([year_slot(date(vintage.year, 1, 1))])
    tx.write("geotessera", slot, window.lat_q0, window.lng_q0, vintage.embedding[None])
    tx.write("geotessera.scale", slot, window.lat_q0, window.lng_q0, vintage.scale[None])
    tx.write("geotessera.bin128", slot, window.lat_q0, window.lng_q0, vintage.bin128[None])


def vintage_inventory(
    tx: CubeTransaction, year: int, totals: VintageTotals, window: LatticeWindow, area: str
) -> None:
    """Record a vintage's one inventory row (the whole area) in a transaction."""
    tx.write_inventory(
        inventory_key(year),
        [
            InventoryRow(
                band="geotessera",
                tslot=year_slot(date(year, 1, 1)),
                block=f"area:{area}",
                item_ids=totals.item_ids,
                clear_cells=totals.n_valid,
                total_cells=int(window.shape[0] * window.shape[1]),
                tempo="year",
            )
        ],
    )


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
