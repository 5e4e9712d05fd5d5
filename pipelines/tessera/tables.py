"""Build the k-NN tables (``store.knn``) from the cube's Tessera vintages.

Tables are written under ``<data_dir>/knn``; with a data root on object storage each is then
published there (:func:`store.knn.remote.publish_local`), which is where servers and the
multi-year build on other machines find them.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from pipelines.lattice import LatticeWindow
from store import address
from store.cube import CubeReader
from store.errors import VectorTableError
from store.knn import KnnTable, write_table
from store.knn.remote import MULTI_YEAR_NAME, publish_local, table_source
from store.tslot import year_slot

__all__ = ["build_multi_year_table", "build_year_table", "table_dir"]


def table_dir(data_dir: str | Path, year: int) -> Path:
    """Directory of one vintage's table."""
    return Path(data_dir) / "knn" / _year_name(year)


def _year_name(year: int) -> str:
    return f"geotessera/{year}"


def build_year_table(data_dir: str | Path, window: LatticeWindow, year: int) -> int:
    """Write the vintage's table for the area window; returns its row count."""
    reader = CubeReader(data_dir)
    slot = year_slot(f"{year}-01-01")
    ys, xs = slice(window.lat_q0, window.lat_q1), slice(window.lng_q0, window.lng_q1)
    emb = np.asarray(reader.array("geotessera")[slot, ys, xs, :])
    scale = np.asarray(reader.array("geotessera.scale")[slot, ys, xs])
    valid = np.isfinite(scale) & (scale > 0)
    rows, cols = np.nonzero(valid)
    cells = address.q_to_raw_array(rows + window.lat_q0, cols + window.lng_q0)
    order = np.argsort(cells)
    write_table(
        table_dir(data_dir, year),
        cells[order],
        emb[rows, cols][order],
        scale[rows, cols][order],
        {"band": "geotessera", "tslot": slot, "vintage": year, "snapshot_id": reader.snapshot_id},
        replace=True,
    )
    publish_local(data_dir, _year_name(year))
    return int(cells.size)


def build_multi_year_table(data_dir: str | Path) -> tuple[int, list[int]]:
    """Concatenate every vintage for the cells present in all of them.

    Each vintage's vector is L2-normalised and requantised to int8 (x127) before
    concatenation, so every year weighs the same in the cosine (the cosine of
    the concatenation is the mean of per-year cosines, up to int8 rounding).
    """
    source = table_source(data_dir)  # the vintages of every machine when on object storage
    years = source.years()
    if not years:
        return 0, []
    tables = []
    for y in years:
        directory = source.directory_of(_year_name(y))
        if directory is None:  # removed since the listing
            raise VectorTableError(f"k-NN table {_year_name(y)} vanished while building")
        tables.append(KnnTable.open(directory))
    kept = [
        (y, t) for y, t in zip(years, tables, strict=True) if t.n > 0
    ]  # an empty vintage would empty the intersection
    years, tables = [y for y, _ in kept], [t for _, t in kept]
    if not tables:
        return 0, []
    common = tables[0].cells
    for t in tables[1:]:
        common = np.intersect1d(common, t.cells, assume_unique=True)
    parts = []
    for t in tables:
        rows = t.rows_of(common)
        v = np.asarray(t.vectors[rows], dtype=np.float32)
        v /= np.maximum(np.linalg.norm(v, axis=1, keepdims=True), 1e-12)
        parts.append(np.clip(np.rint(v * 127.0), -127, 127).astype(np.int8))
    vectors = np.concatenate(parts, axis=1) if parts else np.zeros((0, 0), np.int8)
    write_table(
        Path(data_dir) / "knn" / MULTI_YEAR_NAME,
        common,
        vectors,
        np.full(common.size, 1.0 / 127.0, dtype=np.float32),
        {
            "band": "geotessera.multi_year",
            "tslot": year_slot(f"{years[-1]}-01-01"),
            "vintages": years,
        },
        replace=True,
    )
    publish_local(data_dir, MULTI_YEAR_NAME)
    return int(common.size), years
