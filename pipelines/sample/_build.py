"""Build the sample area on disk: rasters, Tessera tiles, manifest and STAC catalog."""

from __future__ import annotations

import argparse
import shutil
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import numpy as np

from pipelines.sample._geo import CENTER_LAT, CENTER_LNG, SIZES, SampleSize, make_grid
from pipelines.sample._io import write_cog, write_gtiff, write_json
from pipelines.sample._optical import (
    BANDS_10M,
    BANDS_20M,
    BOA_ADD_OFFSET,
    QUANTIFICATION,
    SCL_CLOUD,
    render_s2,
    s2_dates,
)
from pipelines.sample._radar import S1_ENL, S1_NODATA, render_s1, s1_dates
from pipelines.sample._scene import PERIOD_END, PERIOD_START, build_scene, class_table
from pipelines.sample._stac import (
    S1_COLLECTION,
    S2_COLLECTION,
    TESSERA_COLLECTION,
    build_catalog,
    s1_item,
    s1_item_id,
    s2_item,
    s2_item_id,
    save_catalog,
    tessera_item,
)
from pipelines.sample._tessera import (
    EMBEDDINGS_DIR,
    LANDMASKS_DIR,
    TESSERA_CLASSES,
    land_mask,
    render_tessera,
    tessera_tile,
)
from pipelines.sample.errors import InvalidSampleSize, SampleExists

__all__ = [
    "MANIFEST_VERSION",
    "TESSERA_YEARS",
    "ProgressFn",
    "SampleInfo",
    "build_sample",
    "cli_main",
]

ProgressFn = Callable[[str, int, int], None]
"""Progress callback: (stage, done, total)."""
MANIFEST_VERSION = 1
"""Schema version of ``manifest.json``."""
TESSERA_YEARS = (2023, 2024)
"""Tessera vintages written."""

_GENERATED = (
    "catalog.json",
    "manifest.json",
    "landcover.tif",
    "landcover_classes.json",
    S2_COLLECTION,
    S1_COLLECTION,
    TESSERA_COLLECTION,
    "tessera",
)


@dataclass(frozen=True)
class SampleInfo:
    """What :func:`build_sample` wrote."""

    root: Path
    """Output directory."""
    size: SampleSize
    """``tiny`` or ``demo``."""
    seed: int
    """Random seed used."""
    catalog: Path
    """Path of the root ``catalog.json``."""
    manifest: Path
    """Path of ``manifest.json`` (ground truth)."""
    n_s2: int
    """Number of Sentinel-2 L2A items."""
    n_s1: int
    """Number of Sentinel-1 RTC items."""
    n_tessera: int
    """Number of Tessera tile-year items."""
    n_fully_cloudy: int
    """Sentinel-2 items with eo:cloud_cover == 100."""
    n_files: int
    """Files written."""
    n_bytes: int
    """Bytes written."""


def _nodata_edge_dates(dates: list[Any], size: str, clear_dates: set[Any]) -> set[Any]:
    if size != "demo":
        return set()
    return {d for i, d in enumerate(dates) if i % 23 == 11 and d not in clear_dates}


def build_sample(
    root: Path,
    size: SampleSize = "demo",
    seed: int = 0,
    progress: ProgressFn | None = None,
    overwrite: bool = False,
) -> SampleInfo:
    """Generate the sample area under ``root``.

    The output is a pure function of (size, seed): building twice gives
    byte-identical files.

    Args:
        root: output directory (created if missing).
        size: ``"tiny"`` (400 m, 14 S2 dates) or ``"demo"`` (2 km, 5-day revisit 2023-2024).
        seed: random seed.
        progress: optional callback ``(stage, done, total)``.
        overwrite: replace a sample already in ``root``.

    Returns:
        A summary of what was written.

    Raises:
        InvalidSampleSize: ``size`` is not tiny or demo.
        SampleExists: ``root`` already holds a catalog and ``overwrite`` is false.
    """
    if size not in SIZES:
        raise InvalidSampleSize(f"unknown sample size {size!r}; expected 'tiny' or 'demo'")
    # absolute: pystac makes asset hrefs relative to each item only from absolute paths
    # (a relative root gave hrefs relative to the working directory)
    root = Path(root).resolve()
    if (root / "catalog.json").exists():
        if not overwrite:
            raise SampleExists(f"{root} already holds a sample (catalog.json); pass overwrite=True")
        for name in _GENERATED:
            p = root / name
            if p.is_dir():
                shutil.rmtree(p)
            elif p.exists():
                p.unlink()
    root.mkdir(parents=True, exist_ok=True)

    def report(stage: str, done: int, total: int) -> None:
        if progress is not None:
            progress(stage, done, total)

    n_files = 0
    n_bytes = 0

    def count(nbytes: int) -> None:
        nonlocal n_files, n_bytes
        n_files += 1
        n_bytes += nbytes

    report("scene", 0, 1)
    grid = make_grid(size)
    scene = build_scene(grid, seed)
    count(write_cog(root / "landcover.tif", scene.landcover, grid.transform(), grid.epsg, 0))
    count(write_json(root / "landcover_classes.json", {"classes": class_table(), "nodata": 0}))
    report("scene", 1, 1)

    # Sentinel-2 L2A
    dates = s2_dates(size)
    s2_items = []
    s2_records = []
    tiny_clear = set(s2_dates("tiny"))
    edge_dates = _nodata_edge_dates(dates, size, tiny_clear)
    t10, t20 = grid.transform(10.0), grid.transform(20.0)
    for i, d in enumerate(dates):
        sc = render_s2(scene, d, seed, nodata_edge=d in edge_dates)
        index = (d - dates[0]).days // 5
        item_dir = root / S2_COLLECTION / s2_item_id(grid, d, index)
        item = s2_item(grid, d, index, sc.cloud_cover, item_dir)
        for b in BANDS_10M:
            count(write_cog(item_dir / f"{b}.tif", sc.dn[b], t10, grid.epsg, 0))
        for b in BANDS_20M:
            count(write_cog(item_dir / f"{b}.tif", sc.dn[b], t20, grid.epsg, 0))
        count(write_cog(item_dir / "SCL.tif", sc.scl, t20, grid.epsg, 0))
        s2_items.append(item)
        s2_records.append(
            {
                "id": item.id,
                "date": d.isoformat(),
                "cloud_cover": sc.cloud_cover,
                "target_cloud_fraction": sc.weather.cloud_fraction,
                "cirrus": sc.weather.cirrus,
                "fully_cloudy": sc.cloud_cover >= 100.0,
                "nodata_edge": d in edge_dates,
            }
        )
        report(S2_COLLECTION, i + 1, len(dates))

    # Sentinel-1 RTC
    s1_list = s1_dates(size)
    s1_items = []
    s1_records = []
    for i, d in enumerate(s1_list):
        sc1 = render_s1(scene, d, seed)
        pass_index = (d - s1_dates("demo")[0]).days // 12
        item_dir = root / S1_COLLECTION / s1_item_id(d, pass_index)
        item = s1_item(grid, d, pass_index, item_dir)
        count(write_cog(item_dir / "vv.tif", sc1.vv, t10, grid.epsg, S1_NODATA))
        count(write_cog(item_dir / "vh.tif", sc1.vh, t10, grid.epsg, S1_NODATA))
        s1_items.append(item)
        s1_records.append({"id": item.id, "date": d.isoformat()})
        report(S1_COLLECTION, i + 1, len(s1_list))

    # Tessera
    tile = tessera_tile(grid, CENTER_LNG, CENTER_LAT)
    tess_root = root / "tessera"
    landmask_path = tess_root / LANDMASKS_DIR / f"{tile.name}.tiff"
    count(write_gtiff(landmask_path, land_mask(scene, tile), tile.transform, tile.epsg, None))
    t_items = []
    t_records = []
    for i, year in enumerate(TESSERA_YEARS):
        vint = render_tessera(scene, tile, year, seed)
        tdir = tess_root / EMBEDDINGS_DIR / str(year) / tile.name
        tdir.mkdir(parents=True, exist_ok=True)
        emb_path = tdir / f"{tile.name}.npy"
        sc_path = tdir / f"{tile.name}_scales.npy"
        np.save(emb_path, vint.embedding, allow_pickle=False)
        np.save(sc_path, vint.scales, allow_pickle=False)
        count(emb_path.stat().st_size)
        count(sc_path.stat().st_size)
        t_items.append(tessera_item(grid, tile, year, emb_path, sc_path, landmask_path))
        t_records.append(
            {
                "id": t_items[-1].id,
                "year": year,
                "embedding": emb_path.relative_to(root).as_posix(),
                "scales": sc_path.relative_to(root).as_posix(),
                "nodata_pixels": int(np.isposinf(vint.scales).sum()),
                "water_pixels": int(np.isnan(vint.scales).sum()),
            }
        )
        report(TESSERA_COLLECTION, i + 1, len(TESSERA_YEARS))

    report("stac", 0, 1)
    catalog = build_catalog(grid, s2_items, s1_items, t_items, size, seed)
    catalog_path = save_catalog(catalog, root)
    for p in root.rglob("*.json"):
        if p.name != "landcover_classes.json":
            count(p.stat().st_size)
    report("stac", 1, 1)

    manifest = {
        "manifest_version": MANIFEST_VERSION,
        "name": "earthmem sample area",
        "size": size,
        "seed": seed,
        "synthetic": True,
        "centre": {"lat": CENTER_LAT, "lng": CENTER_LNG},
        "crs": f"EPSG:{grid.epsg}",
        "grid": {
            "resolution_m": 10,
            "shape": [grid.height, grid.width],
            "transform": [10.0, 0.0, grid.left, 0.0, -10.0, grid.top],
            "bbox_utm": [grid.left, grid.bottom, grid.right, grid.top],
        },
        "bbox": list(grid.bbox_lonlat()),
        "period": {"start": PERIOD_START.isoformat(), "end": PERIOD_END.isoformat()},
        "landcover": {
            "path": "landcover.tif",
            "classes": class_table(),
            "as_of": PERIOD_START.isoformat(),
        },
        "features": scene.features,
        "events": scene.events,
        "sentinel-2-l2a": {
            "collection": S2_COLLECTION,
            "dn_rule": {
                "quantification": QUANTIFICATION,
                "boa_add_offset": BOA_ADD_OFFSET,
                "reflectance": "(DN + boa_add_offset) / quantification = DN * 0.0001 - 0.1",
                "nodata": 0,
            },
            "scl_cloud_classes": list(SCL_CLOUD),
            "scenes": s2_records,
        },
        "sentinel-1-rtc": {
            "collection": S1_COLLECTION,
            "nodata": S1_NODATA,
            "enl": S1_ENL,
            "scenes": s1_records,
        },
        "tessera-embeddings": {
            "collection": TESSERA_COLLECTION,
            "tile": tile.name,
            "root": "tessera",
            "landmask": landmask_path.relative_to(root).as_posix(),
            "clipped": True,
            "full_shape": list(tile.full_shape),
            "window": {"row0": tile.row0, "col0": tile.col0, "shape": list(tile.shape)},
            "classes": list(TESSERA_CLASSES),
            "vintages": t_records,
        },
    }
    manifest_path = root / "manifest.json"
    count(write_json(manifest_path, manifest))
    n_full = sum(1 for r in s2_records if r["fully_cloudy"])
    return SampleInfo(
        root=root,
        size=size,
        seed=seed,
        catalog=catalog_path,
        manifest=manifest_path,
        n_s2=len(s2_items),
        n_s1=len(s1_items),
        n_tessera=len(t_items),
        n_fully_cloudy=n_full,
        n_files=n_files,
        n_bytes=n_bytes,
    )


def cli_main(argv: list[str] | None = None) -> int:
    """``earthmem sample build [--size tiny|demo] [--out DIR] [--seed N] [--overwrite]``.

    Returns:
        Process exit code (0 on success, 2 on a usage or output-directory error).
    """
    parser = argparse.ArgumentParser(
        prog="earthmem sample build", description="Generate the sample area."
    )
    parser.add_argument("--size", choices=sorted(SIZES), default="demo")
    parser.add_argument("--out", type=Path, default=Path("data/sample"))
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--overwrite", action="store_true")
    args = parser.parse_args(argv)
    last: dict[str, int] = {}

    def progress(stage: str, done: int, total: int) -> None:
        step = max(total // 20, 1)
        if done == total or done - last.get(stage, -step) >= step:
            last[stage] = done
            print(f"  {stage:<20} {done:>4}/{total}", file=sys.stderr, flush=True)

    t0 = time.perf_counter()
    try:
        info = build_sample(
            args.out, cast(SampleSize, args.size), args.seed, progress, args.overwrite
        )
    except (SampleExists, InvalidSampleSize) as exc:
        print(f"error: {exc.message}", file=sys.stderr)
        return 2
    dt = time.perf_counter() - t0
    print(
        f"sample {info.size} (seed {info.seed}) written to {info.root} in {dt:.1f} s: "
        f"{info.n_s2} Sentinel-2, {info.n_s1} Sentinel-1, {info.n_tessera} Tessera items; "
        f"{info.n_files} files, {info.n_bytes / 1e6:.1f} MB"
    )
    return 0
