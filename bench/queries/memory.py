"""Peak RSS of the query server answering find_similar over a large table mapped from disk."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np

from bench.common import CACHE_DIR
from bench.queries.http_server import Server
from bench.queries.rows import row
from store import address

__all__ = ["bench_memory"]


def _mem_data_dir(n: int) -> Path:
    """A data directory whose ``knn/geotessera/2024`` is the cached n-row bench table."""
    from bench.data import cached_table

    table = cached_table(n)
    root = CACHE_DIR / f"memdata_n{n}"
    link = root / "knn" / "geotessera" / "2024"
    link.parent.mkdir(parents=True, exist_ok=True)
    if not link.exists() or os.path.realpath(link) != os.path.realpath(table):
        if link.is_symlink() or link.exists():
            link.unlink()
        link.symlink_to(table.resolve(), target_is_directory=True)
    return root


def _loaded_rss(n: int) -> float:
    """VmHWM (MiB) of a process that loads the same table into memory (no mmap)."""
    from bench.data import cached_table

    table = cached_table(n)
    code = (
        "import numpy as np, sys, pathlib\n"
        "p = pathlib.Path(sys.argv[1]).resolve()\n"
        "arrs = [np.load(p / f) for f in ('cells.npy', 'vectors.npy', 'scales.npy', 'norms.npy', 'bin128.npy')]\n"
        "s = arrs[1][:1].astype(np.int32) @ arrs[1][:100000].T.astype(np.int32)\n"
        "print(open('/proc/self/status').read())\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, str(table)],
        capture_output=True,
        text=True,
        check=True,
        timeout=600,
    ).stdout
    for line in out.splitlines():
        if line.startswith("VmHWM"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmHWM")


def _serve_and_query(data: Path, cells: list[str], modes: tuple[str, ...]) -> dict[str, Any]:
    """Start a server, run find_similar per mode and cell, sample its RSS; return the figures."""
    import httpx

    log = CACHE_DIR / "logs" / f"serve_memory_{len(modes)}.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    peaks = {"RssAnon": 0, "RssFile": 0}
    times: dict[str, list[float]] = {m: [] for m in modes}
    # one worker: /proc/<pid>/status of a multi-worker server's parent holds no data
    with Server(data, log, workers=1) as srv:
        idle = srv.status()
        stop = threading.Event()

        def sample() -> None:
            while not stop.is_set():
                try:
                    st = srv.status()
                except OSError:
                    return
                for k in peaks:
                    peaks[k] = max(peaks[k], st.get(k, 0))
                time.sleep(0.02)

        th = threading.Thread(target=sample, daemon=True)
        th.start()
        try:
            with httpx.Client(base_url=srv.url, timeout=300) as client:
                for mode in modes:
                    for c in cells:
                        t0 = time.perf_counter()
                        r = client.post("/v1/find_similar", json={"key": c, "k": 10, "mode": mode})
                        times[mode].append(time.perf_counter() - t0)
                        if r.status_code != 200:
                            raise RuntimeError(
                                f"find_similar {mode}: {r.status_code} {r.text[:300]}"
                            )
        finally:
            stop.set()
            th.join()
        final = srv.status()
    return {
        "idle": idle,
        "final": final,
        "peaks": peaks,
        "median_ms": {m: 1e3 * float(np.median(v)) for m, v in times.items()},
    }


def bench_memory(n: int, queries: int) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Peak RSS of the query server answering find_similar over an n-row mmap table."""
    from store.knn import KnnTable

    data = _mem_data_dir(n)
    table = KnnTable.open(data / "knn" / "geotessera" / "2024")
    rng = np.random.default_rng(3)
    rows = rng.choice(table.n, queries, replace=False)
    cells = [address.format_cell(int(table.cells[r])) for r in rows]
    table_mib = sum(f.stat().st_size for f in Path(table.path).glob("*.npy")) / 2**20
    del table
    loaded = _loaded_rss(n)
    binary = _serve_and_query(data, cells, ("hamming", "hamming_then_rerank"))
    full = _serve_and_query(data, cells, ("cosine", "hamming", "hamming_then_rerank"))
    rows_out = []
    for label, res, judged in (
        ("all modes (cosine, hamming, hamming_then_rerank)", full, True),
        ("binary modes only (hamming, hamming_then_rerank)", binary, False),
    ):
        hwm = res["final"]["VmHWM"] / 1024
        rows_out.append(
            row(
                f"query server peak RSS (VmHWM), find_similar {label} x{queries} over {n:,} cells",
                "MiB",
                hwm,
                baseline_case="a process loading the same table into memory (np.load, no mmap)",
                baseline=loaded,
                ratio=hwm / loaded,
                ratio_def="earthmem / baseline",
                target="<= 500 MB (477 MiB)" if judged else "(info)",
                met=(hwm * 2**20 <= 500e6) if judged else None,
                data=f"table files {table_mib:,.0f} MiB",
                idle_rss_mib=res["idle"]["VmRSS"] / 1024,
                peak_anon_mib=res["peaks"]["RssAnon"] / 1024,
                peak_file_mib=res["peaks"]["RssFile"] / 1024,
                http_median_ms=res["median_ms"],
            )
        )
    rows_out.append(
        row(
            "query server peak anonymous RSS, all modes (sampled every 20 ms)",
            "MiB",
            full["peaks"]["RssAnon"] / 1024,
            baseline_case="a process loading the same table into memory (np.load, no mmap)",
            baseline=loaded,
            ratio=full["peaks"]["RssAnon"] / 1024 / loaded,
            ratio_def="earthmem / baseline",
            target="(info: private memory; file-backed pages of the mapping are page cache)",
            data=f"peak file-backed RSS {full['peaks']['RssFile'] / 1024:,.0f} MiB",
        )
    )
    return rows_out, {"binary_only": binary, "all_modes": full}
