"""Shared bench helpers: timing, machine description and the cached demo area.

* :func:`time_calls` / :class:`Timing`: warm-up, then repeated timings with
  median and spread (what every table reports).
* :func:`machine`: cores, memory, CPU model, load average, numpy version and
  its BLAS build (``numpy.show_config`` and threadpoolctl when available).
* :func:`demo_area`: the sample area (``demo`` or ``tiny``) built once and
  ingested once through Dagster (``DagsterInstance.ephemeral()``) under
  ``bench/.cache/area_<size>_v<N>``, reused across runs. A marker file
  ``ingested.json`` (the ingest report) is written only after a complete,
  successful ingest, so a killed build is redone, never half used.
* :func:`free_port`, :func:`wait_http`: loopback servers for the HTTP benches.
"""

from __future__ import annotations

import contextlib
import json
import os
import platform
import shutil
import socket
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

__all__ = [
    "AREA_VERSION",
    "CACHE_DIR",
    "DATA_ENV",
    "REPO",
    "SAMPLE_ENV",
    "DemoArea",
    "Timing",
    "demo_area",
    "free_port",
    "machine",
    "peak_rss_mib",
    "time_calls",
    "wait_http",
    "write_json",
]

REPO = Path(__file__).resolve().parent.parent
"""Repository root."""
CACHE_DIR = Path(__file__).resolve().parent / ".cache"
"""Where cached bench inputs live (not committed)."""
AREA_VERSION = 3
"""Bump to invalidate cached ingested areas (e.g. after a pipeline change that alters outputs)."""
SAMPLE_ENV = "EARTHMEM_BENCH_SAMPLE"
"""Environment variable: sample root of an already ingested area to use instead of the cache."""
DATA_ENV = "EARTHMEM_BENCH_DATA"
"""Environment variable: data directory of that area."""


@dataclass(frozen=True)
class Timing:
    """Repeated timings of one operation (seconds)."""

    median: float
    """Median over the repeats."""
    p10: float
    """10th percentile (the spread's low end)."""
    p90: float
    """90th percentile (the spread's high end)."""
    min: float
    """Fastest repeat."""
    max: float
    """Slowest repeat."""
    n: int
    """Number of timed repeats."""

    @classmethod
    def of(cls, samples: list[float]) -> Timing:
        """Summarise raw samples."""
        s = sorted(samples)
        return cls(
            median=statistics.median(s),
            p10=_quantile(s, 0.10),
            p90=_quantile(s, 0.90),
            min=s[0],
            max=s[-1],
            n=len(s),
        )

    def as_dict(self) -> dict[str, float]:
        """Plain dict for JSON."""
        return asdict(self)


def _quantile(sorted_samples: list[float], q: float) -> float:
    """Linear-interpolated quantile of already sorted samples."""
    if len(sorted_samples) == 1:
        return sorted_samples[0]
    pos = q * (len(sorted_samples) - 1)
    lo = int(pos)
    hi = min(lo + 1, len(sorted_samples) - 1)
    return sorted_samples[lo] + (sorted_samples[hi] - sorted_samples[lo]) * (pos - lo)


def time_calls(
    fn: Callable[[int], Any], repeats: int, warmup: int = 1, min_seconds: float = 0.0
) -> Timing:
    """Time ``fn(i)`` for ``i`` in ``range(repeats)`` after ``warmup`` untimed calls (``fn(-1)``).

    Args:
        fn: The operation; receives the repeat index (``-1`` for warm-up calls).
        repeats: Minimum number of timed calls.
        warmup: Untimed calls first (JIT, caches, page cache).
        min_seconds: Keep repeating (beyond ``repeats``) until this much time was measured.
    """
    for _ in range(warmup):
        fn(-1)
    samples: list[float] = []
    total = 0.0
    i = 0
    while i < repeats or total < min_seconds:
        t0 = time.perf_counter()
        fn(i)
        dt = time.perf_counter() - t0
        samples.append(dt)
        total += dt
        i += 1
    return Timing.of(samples)


def _cpu_model() -> str:
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()


def _blas() -> dict[str, Any]:
    import numpy as np

    out: dict[str, Any] = {}
    try:
        cfg: Any = np.show_config(mode="dicts")
        blas = cfg["Build Dependencies"]["blas"]
        out["numpy_blas"] = f"{blas.get('name')} {blas.get('version', '')}".strip()
        out["numpy_simd"] = ",".join(cfg.get("SIMD Extensions", {}).get("found", []))
    except Exception as exc:  # show_config's dict layout is not a stable API
        out["numpy_blas"] = f"unknown ({type(exc).__name__})"
    try:
        from threadpoolctl import threadpool_info

        out["threadpools"] = [
            f"{p.get('internal_api')} {p.get('version')} ({p.get('num_threads')} threads)"
            for p in threadpool_info()
        ]
    except ImportError:
        out["threadpools"] = "threadpoolctl not installed"
    return out


def steal_seconds() -> float | None:
    """CPU time the hypervisor took from this VM's CPUs since boot (``/proc/stat``'s steal), in
    CPU-seconds summed over the CPUs; None where the kernel does not report it.

    On a shared VM a bench's wall time grows with the steal during it while the load average
    does not show it: the harness keeps the steal of every bench beside its load.
    """
    try:
        fields = Path("/proc/stat").read_text().splitlines()[0].split()
        if fields[0] != "cpu" or len(fields) < 9:
            return None
        return int(fields[8]) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return None


def steal_during(before: float | None) -> float | None:
    """CPU-seconds stolen by the hypervisor since ``before`` (a :func:`steal_seconds` reading;
    None when either is not reported), to 0.1 s."""
    after = steal_seconds()
    return None if before is None or after is None else round(after - before, 1)


def machine() -> dict[str, Any]:
    """Cores, memory, CPU model, load average and library builds of this machine."""
    import numpy as np

    mem_gib = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    info: dict[str, Any] = {
        "cpu": _cpu_model(),
        "cores": os.cpu_count(),
        "affinity_cores": len(os.sched_getaffinity(0)),
        "memory_GiB": round(mem_gib, 1),
        "load_average": [round(x, 2) for x in os.getloadavg()],
        "python": platform.python_version(),
        "kernel": platform.release(),
        "numpy": np.__version__,
        "thread_env": {
            k: os.environ[k]
            for k in (
                "OPENBLAS_NUM_THREADS",
                "OMP_NUM_THREADS",
                "MKL_NUM_THREADS",
                "NUMBA_NUM_THREADS",
            )
            if k in os.environ
        }
        or "unset (libraries choose)",
    }
    info.update(_blas())
    return info


def peak_rss_mib(pid: int | str = "self") -> float:
    """Peak resident set size (``VmHWM``) of a process, MiB (Linux)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("VmHWM not found in /proc/<pid>/status")


def write_json(path: str | os.PathLike[str] | None, doc: dict[str, Any]) -> None:
    """Write a bench's JSON document (no-op when ``path`` is None)."""
    if path:
        Path(path).write_text(json.dumps(doc, indent=2, default=str))


# ---------------------------------------------------------------------- demo area


@dataclass(frozen=True)
class DemoArea:
    """A sample area built and ingested once (cached)."""

    size: str
    """``demo`` or ``tiny``."""
    sample: Path
    """Sample root (catalog.json, manifest.json, COGs)."""
    data: Path
    """Ingested data directory (cube.icechunk with its inventory, knn/)."""
    report: dict[str, Any]
    """The ingest report (partitions, scenes, seconds) of the cached build."""

    @property
    def catalog(self) -> Path:
        """Root ``catalog.json`` of the sample."""
        return self.sample / "catalog.json"

    @property
    def manifest_path(self) -> Path:
        """``manifest.json`` (the area JSON the pipeline ingests)."""
        return self.sample / "manifest.json"

    def manifest(self) -> dict[str, Any]:
        """The ground-truth manifest."""
        doc: dict[str, Any] = json.loads(self.manifest_path.read_text())
        return doc


def _log(msg: str) -> None:
    print(f"[bench] {msg}", file=sys.stderr, flush=True)


def demo_area(size: str = "demo", cache_dir: Path | None = None) -> DemoArea:
    """The ``size`` sample area, built and ingested through Dagster once, then reused.

    The first call builds the sample (COGs + static STAC catalog) and runs
    :func:`pipelines.run.ingest_area` with an ephemeral Dagster instance; it
    takes about two minutes for ``demo``. Later calls only read the marker.

    When ``EARTHMEM_BENCH_SAMPLE`` and ``EARTHMEM_BENCH_DATA`` are both set,
    they name an already ingested area (sample root and data directory) that is
    used as is, whatever ``size`` says (the smoke test passes the test suite's
    tiny area this way).
    """
    given_sample, given_data = os.environ.get(SAMPLE_ENV), os.environ.get(DATA_ENV)
    if given_sample and given_data:  # an area ingested by the caller (the smoke test's fixture)
        return DemoArea(size, Path(given_sample), Path(given_data), {"provided_by": "environment"})
    root = (cache_dir or CACHE_DIR) / f"area_{size}_v{AREA_VERSION}"
    marker = root / "ingested.json"
    sample, data = root / "sample", root / "data"
    if marker.exists():
        return DemoArea(size, sample, data, json.loads(marker.read_text()))
    from dagster import DagsterInstance

    from pipelines.run import ingest_area
    from pipelines.sample import build_sample

    if not (sample / "manifest.json").exists():
        if sample.exists():
            shutil.rmtree(sample)
        _log(f"building the {size} sample under {sample} (once)")
        t0 = time.perf_counter()
        build_sample(sample, size=size)  # type: ignore[arg-type]
        _log(f"sample built in {time.perf_counter() - t0:.0f} s")
    if data.exists():
        shutil.rmtree(data)  # a previous ingest did not finish: start clean

    last = [0.0]

    def progress(stage: str, done: int, total: int) -> None:
        now = time.monotonic()
        if done == total or now - last[0] > 15:
            last[0] = now
            _log(f"ingest {stage}: {done}/{total}")

    _log(f"ingesting the {size} sample through Dagster into {data} (once)")
    with DagsterInstance.ephemeral() as instance:
        rep = ingest_area(
            data,
            sample / "catalog.json",
            sample / "manifest.json",
            instance=instance,
            progress=progress,
        )
    if rep.failed:
        raise RuntimeError(f"demo ingest failed for partitions {rep.failed[:5]}")
    report = {
        "partitions": rep.partitions,
        "scenes": rep.scenes,
        "years": rep.years,
        "seconds": round(rep.seconds, 2),
        # WARN checks (e.g. clear_fraction of a mostly cloudy week) are not failures
        "failed_checks": sum(not c.endswith("(warn)") for c in rep.failed_checks),
        "warned_checks": sum(c.endswith("(warn)") for c in rep.failed_checks),
    }
    marker.write_text(json.dumps(report, indent=2))
    _log(f"ingested in {rep.seconds:.0f} s: {report}")
    return DemoArea(size, sample, data, report)


# ---------------------------------------------------------------------- loopback HTTP


def free_port() -> int:
    """An ephemeral TCP port free on loopback right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def wait_http(url: str, timeout: float = 60.0) -> None:
    """Poll ``url`` until it answers (any status) or raise ``TimeoutError``."""
    import httpx

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            httpx.get(url, timeout=2.0)
            return
        except httpx.TransportError:
            time.sleep(0.1)
    raise TimeoutError(f"{url} did not answer within {timeout} s")
