"""area_over_time vs loading the same scenes with rioxarray, and its means vs exactextract."""

from __future__ import annotations

import datetime as dt
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from bench.common import REPO, DemoArea, Timing, time_calls
from bench.paired import paired_samples
from bench.queries.rows import ENV, row, scale
from store import address

__all__ = ["WARM_CALLS", "area_args", "area_warm_single_blas", "bench_area"]

WARM_CALLS = 5
"""Warm answers timed per paired round (their median is the round's warm figure)."""

COLD_CACHES = (
    "cold context: a fresh ServiceContext per round, so a new icechunk Repository and "
    "read-only session (its snapshot, manifest and chunk caches empty), the snapshot's "
    "inventory and overpass index, the chunk index and the decoded-chunk cache all loaded "
    "by the call itself; warm across rounds: the process (imports, numba kernels), "
    "icechunk's tokio runtime, earthmem's worker pool, the OS page cache (for both sides); "
    "rioxarray with GDAL's block cache warm"
)
"""What the cold row leaves cold and what it does not."""


def _gdal_env() -> str:
    """The GDAL settings the baseline ran with (environment values, or GDAL's defaults)."""
    keys = ("GDAL_CACHEMAX", "GDAL_NUM_THREADS", "GDAL_DISABLE_READDIR_ON_OPEN")
    return ", ".join(f"{k}={os.environ.get(k, 'default')}" for k in keys)


def _km_box(area: DemoArea, km: float) -> tuple[int, int, int, int]:
    """A lattice box of about ``km`` x ``km`` centred in the sample (clipped to it)."""
    m = area.manifest()
    min_lng, min_lat, max_lng, max_lat = m["bbox"]
    clat, clng = (min_lat + max_lat) / 2, (min_lng + max_lng) / 2
    rows = max(4, round(km * 1000 / 111_320 / address.LAT_STEP))
    cols = max(4, round(km * 1000 / (111_320 * math.cos(math.radians(clat))) / address.LNG_STEP))
    y0_a, y1_a, x0_a, x1_a = address.bbox_q_range(min_lat, min_lng, max_lat, max_lng)
    rows, cols = min(rows, y1_a - y0_a - 2), min(cols, x1_a - x0_a - 2)
    cy, cx = address.encode_q(clat, clng)
    y0, x0 = cy - rows // 2, cx - cols // 2
    return y0, y0 + rows, x0, x0 + cols


def _edges(box: tuple[int, int, int, int]) -> tuple[float, float, float, float]:
    """``(min_lng, min_lat, max_lng, max_lat)`` of the outer cell edges of a box."""
    y0, y1, x0, x1 = box
    return (
        (x0 - 0.5) * address.LNG_STEP - 180.0,
        (y0 - 0.5) * address.LAT_STEP - 90.0,
        (x1 - 0.5) * address.LNG_STEP - 180.0,
        (y1 - 0.5) * address.LAT_STEP - 90.0,
    )


def _weights(box: tuple[int, int, int, int]) -> np.ndarray:
    """cos(latitude) of the box's cell centres, rows south to north."""
    y0, y1, x0, x1 = box
    lat, _ = address.q_center(np.arange(y0, y1), 0)
    return np.repeat(np.cos(np.radians(np.asarray(lat)))[:, None], x1 - x0, axis=1)


def _baseline_area(
    area: DemoArea, box: tuple[int, int, int, int], tslots: list[int]
) -> tuple[list[float], int]:
    """Load the overpasses from the COGs with rioxarray and reduce: cos(lat)-weighted NDVI means."""
    import rioxarray
    from affine import Affine
    from rasterio.enums import Resampling

    from pipelines.sentinel2.compute import scl_clear
    from pipelines.sources import SourceConfig, open_source

    src = open_source(SourceConfig(kind="static", path=str(area.catalog)))
    min_lng, min_lat, max_lng, max_lat = _edges(box)
    y0, y1, x0, x1 = box
    shape = (y1 - y0, x1 - x0)
    dst = Affine(address.LNG_STEP, 0.0, min_lng, 0.0, -address.LAT_STEP, max_lat)  # north-up
    w = _weights(box)[::-1]
    day0 = dt.date(1970, 1, 1)
    means: list[float] = []
    n_files = 0
    for t in tslots:
        d = day0 + dt.timedelta(days=t)
        items = src.search("sentinel-2-l2a", (min_lng, min_lat, max_lng, max_lat), d, d).items
        ndvi = np.full(shape, np.nan)
        for it in sorted(items, key=lambda i: i.id):
            arrs = {}
            for role in ("red", "nir", "scl"):
                a = it.assets[role]
                opened: Any = rioxarray.open_rasterio(a.href, masked=False)
                da = opened.squeeze("band", drop=True)
                sub = da.rio.clip_box(
                    min_lng, min_lat, max_lng, max_lat, crs="EPSG:4326", auto_expand=True
                )
                out = sub.rio.reproject(
                    "EPSG:4326", shape=shape, transform=dst, resampling=Resampling.nearest, nodata=0
                )
                v = np.asarray(out.values)
                arrs[role] = (v, a.scale, a.offset)
                n_files += 1
            (red, rs, ro), (nir, ns, no), (scl, _, _) = arrs["red"], arrs["nir"], arrs["scl"]
            ok = (red > 0) & (nir > 0) & (scl > 0) & scl_clear(scl) & np.isnan(ndvi)
            r = red.astype(np.float32) * np.float32(rs) + np.float32(ro)
            n = nir.astype(np.float32) * np.float32(ns) + np.float32(no)
            with np.errstate(divide="ignore", invalid="ignore"):
                v = (n - r) / (n + r)
            ndvi[ok] = v[ok]
        valid = np.isfinite(ndvi)
        means.append(
            float((ndvi[valid] * w[valid]).sum() / w[valid].sum()) if valid.any() else math.nan
        )
    return means, n_files


def _exactextract_means(
    area: DemoArea, box: tuple[int, int, int, int], tslots: list[int]
) -> list[float]:
    """exactextract ``weighted_mean`` (weights = cos lat) of the cube's clear NDVI per overpass.

    The rasters are read back from the cube over the box padded by 2 cells; the
    polygon is the box's outer cell edges, so every cell is covered fully or
    not at all and coverage weighting selects the same cells as centre
    inclusion.
    """
    from exactextract import exact_extract
    from exactextract.raster import NumPyRasterSource
    from pyproj import CRS

    from store.cube import CubeReader

    pad = 2
    y0, y1, x0, x1 = box
    pbox = (y0 - pad, y1 + pad, x0 - pad, x1 + pad)
    pmin_lng, pmin_lat, pmax_lng, pmax_lat = _edges(pbox)
    min_lng, min_lat, max_lng, max_lat = _edges(box)
    wkt = CRS.from_epsg(4326).to_wkt()
    weights = NumPyRasterSource(
        _weights(pbox)[::-1].copy(), pmin_lng, pmin_lat, pmax_lng, pmax_lat, srs_wkt=wkt
    )
    poly = {
        "type": "Feature",
        "properties": {"id": 1},
        "geometry": {
            "type": "Polygon",
            "coordinates": [
                [
                    [min_lng, min_lat],
                    [max_lng, min_lat],
                    [max_lng, max_lat],
                    [min_lng, max_lat],
                    [min_lng, min_lat],
                ]
            ],
        },
    }
    reader = CubeReader(area.data)
    out = []
    for t in tslots:
        v = reader.read_region("indices.ndvi", *pbox, t, t + 1, drop_empty=False).values[0]
        c = reader.read_region("s2.clear", *pbox, t, t + 1, drop_empty=False).values[0]
        mat = np.where((c == 2) & np.isfinite(v), v.astype(np.float64), -9999.0)[::-1].copy()
        rast = NumPyRasterSource(
            mat, pmin_lng, pmin_lat, pmax_lng, pmax_lat, nodata=-9999.0, srs_wkt=wkt
        )
        res = exact_extract(rast, [poly], ["weighted_mean"], weights=weights, output="geojson")
        out.append(float(res[0]["properties"]["weighted_mean"]))
    return out


def area_args(area: DemoArea, km: float, year: int) -> dict[str, Any]:
    """area_over_time arguments: a ~``km`` x ``km`` box centred in the sample, one year, NDVI."""
    min_lng, min_lat, max_lng, max_lat = _edges(_km_box(area, km))
    return {
        "bbox": [min_lat, min_lng, max_lat, max_lng],
        "start_date": f"{year}-01-01",
        "end_date": f"{year}-12-31",
        "index": "ndvi",
        "max_scenes": 24,
        "chart": False,
    }


def area_warm_single_blas(area: DemoArea, km: float, year: int, repeats: int) -> Timing:
    """Warm area_over_time timed in a child process with ``OPENBLAS_NUM_THREADS=1`` (diagnostic)."""
    with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as f:
        out = f.name
    code = (
        "import json, sys\n"
        "from bench.common import DemoArea, time_calls\n"
        "from bench.queries.area import area_args\n"
        "from api.context import ServiceContext\n"
        "from api.dispatch import run\n"
        "from pathlib import Path\n"
        "s, d, km, year, reps, out = sys.argv[1:]\n"
        "area = DemoArea('x', Path(s), Path(d), {})\n"
        "args = area_args(area, float(km), int(year))\n"
        "ctx = ServiceContext(area.data)\n"
        "t = time_calls(lambda _: run(ctx, 'area_over_time', args), int(reps), warmup=3)\n"
        "json.dump(t.as_dict(), open(out, 'w'))\n"
    )
    env = {**ENV, "OPENBLAS_NUM_THREADS": "1"}
    cmd = [sys.executable, "-c", code, str(area.sample), str(area.data), str(km), str(year)]
    subprocess.run([*cmd, str(repeats), out], cwd=REPO, env=env, check=True, timeout=600)
    d = json.loads(Path(out).read_text())
    os.unlink(out)
    return Timing(**d)


def bench_area(
    area: DemoArea, km: float, year: int, repeats: int, rounds: int
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """area_over_time vs rioxarray reads of the same scenes (``rounds`` paired rounds), and vs exactextract.

    ``repeats`` sizes the unpaired information rows (chart, single-thread BLAS).
    """
    from api.context import ServiceContext
    from api.dispatch import run

    box = _km_box(area, km)
    args = area_args(area, km, year)
    ctx = ServiceContext(area.data)
    ans = run(ctx, "area_over_time", args).model_dump(mode="json")
    a0 = ans["areas"][0]
    scenes = a0["scenes"]
    tslots = [s["tslot"] for s in scenes]
    if not tslots:
        raise RuntimeError(f"area_over_time kept no overpass in {year}: {a0['excluded'][:3]}")
    # Paired rounds: each round times the cold answer (a fresh context), the warm
    # answer (median of WARM_CALLS calls on the open context) and the rioxarray
    # baseline, back to back on the same box and year; ratios are per round.
    base_means: list[float] = []
    n_files = 0

    def baseline() -> float:
        nonlocal base_means, n_files
        t0 = time.perf_counter()
        base_means, n_files = _baseline_area(area, box, tslots)
        return time.perf_counter() - t0

    def timed(fn: Any) -> float:
        t0 = time.perf_counter()
        fn()
        return time.perf_counter() - t0

    def cpu(fn: Any, into: list[float]) -> Any:
        c0 = time.process_time()
        out = fn()
        into.append(time.process_time() - c0)
        return out

    for _ in range(2):
        run(ctx, "area_over_time", args)
    baseline()  # warm-up: GDAL, the COGs in the page cache and GDAL's block cache
    cold_s, warm_s, base_s = [], [], []
    cold_cpu: list[float] = []
    base_cpu: list[float] = []
    for _ in range(rounds):
        cold_s.append(
            cpu(
                lambda: timed(lambda: run(ServiceContext(area.data), "area_over_time", args)),
                cold_cpu,
            )
        )
        warm_s.append(
            statistics.median(
                timed(lambda: run(ctx, "area_over_time", args)) for _ in range(WARM_CALLS)
            )
        )
        base_s.append(cpu(baseline, base_cpu))
    p_cold = paired_samples(cold_s, base_s)
    p_warm = paired_samples(warm_s, base_s)
    cold, warm, t_base = p_cold.a, p_warm.a, p_cold.b
    few = max(1, repeats // 3)
    with_chart = time_calls(lambda _: run(ctx, "area_over_time", {**args, "chart": True}), few)
    single = area_warm_single_blas(area, km, year, repeats)
    ours = [s["mean"] for s in scenes]
    ee = _exactextract_means(area, box, tslots)
    ee_diff = max(abs(a - b) for a, b in zip(ours, ee, strict=True))
    base_diff = max(abs(a - b) for a, b in zip(ours, base_means, strict=True))
    cells = a0["n_cells"]
    data = (
        f"{a0['area_km2']:.2f} km^2 ({cells} cells), {year}: {len(tslots)} overpasses kept "
        f"of {len(tslots) + len(a0['excluded']) + len(a0.get('thinned', []))} candidates"
    )
    ms = 1e3
    rows = [
        row(
            "area_over_time ~1 km^2 x 1 year, cold context",
            "ms",
            scale(cold, ms),
            baseline_case=f"rioxarray: {n_files} COG reads (red, nir, SCL of the kept overpasses), clip + reproject + reduce",
            baseline=scale(t_base, ms),
            **p_cold.ratio_fields(inverse=True),
            ratio_def="baseline time / earthmem time (speed-up), per round",
            target=">= 100x",
            met=p_cold.inverse().median >= 100,
            data=data,
            caches=COLD_CACHES,
            baseline_settings=f"rioxarray/rasterio, {_gdal_env()}, nearest resampling, one "
            "warm-up load before the rounds",
            cpu_ms=statistics.median(cold_cpu) * ms,
            baseline_cpu_ms=statistics.median(base_cpu) * ms,
            cpu_ratio=statistics.median(b / a for a, b in zip(cold_cpu, base_cpu, strict=True)),
            cpu_ratio_def="baseline CPU / earthmem CPU (process time, all threads), per round",
            load_sensitive="some: the cold call spreads over icechunk's I/O threads and the "
            "decode pool, the baseline is one thread; the round cancels slow drift and cpu_ratio "
            "is the load-insensitive view",
        ),
        row(
            "area_over_time ~1 km^2 x 1 year, warm context",
            "ms",
            scale(warm, ms),
            baseline_case="same rioxarray baseline",
            baseline=scale(t_base, ms),
            **p_warm.ratio_fields(inverse=True),
            ratio_def="baseline time / earthmem time (speed-up), per round",
            target=">= 100x",
            met=p_warm.inverse().median >= 100,
            data=data,
            caches=f"warm context (open, inventory and chunk index loaded, chunk cache filled, the "
            f"area's parse remembered by the context's small-area memo; "
            f"median of {WARM_CALLS} calls per round); OS page cache warm; rioxarray with GDAL's "
            "block cache warm",
            load_sensitive="yes: the warm answer is tens of ms and splits its statistics over two "
            "threads; one preempted call moves it, the baseline (seconds) barely",
        ),
        row(
            "area_over_time ~1 km^2 x 1 year, warm, OPENBLAS_NUM_THREADS=1 (diagnostic)",
            "ms",
            scale(single, ms),
            baseline_case="same rioxarray baseline (default threads)",
            baseline=scale(t_base, ms),
            ratio=t_base.median / single.median,
            ratio_def="baseline time / earthmem time (speed-up; unpaired: another process)",
            target="(info: warm calls back to back in a fresh process; the query path makes "
            "no BLAS call, so this is the back-to-back figure, not a BLAS effect)",
            data=data,
        ),
        row(
            "area_over_time, warm, with PNG chart",
            "ms",
            scale(with_chart, ms),
            baseline_case="same rioxarray baseline",
            baseline=scale(t_base, ms),
            ratio=t_base.median / with_chart.median,
            ratio_def="baseline time / earthmem time (speed-up; unpaired)",
            target="(info)",
            data=data,
        ),
        row(
            "area_over_time means vs exactextract weighted_mean on the cube",
            "max |diff|",
            ee_diff,
            baseline_case="exactextract 'weighted_mean' (weights cos lat), polygon on cell edges",
            ratio=None,
            target="<= 1e-6",
            met=ee_diff <= 1e-6,
            data=f"{len(tslots)} overpasses",
        ),
        row(
            "area_over_time means vs the rioxarray baseline's means",
            "max |diff|",
            base_diff,
            baseline_case="rioxarray nearest reprojection of the COGs",
            target="(info: differences = resampling of edge pixels)",
            data=f"{len(tslots)} overpasses",
        ),
    ]
    return rows, {"box": box, "args": args, "tslots": tslots}
