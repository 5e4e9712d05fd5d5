"""Test helpers: a real Dask cluster of separate processes on loopback, cube contents, faults.

Not a test module: Dask workers import it by name (``tests.pipelines.dask_cluster``) to run
the fault-injecting scene family's tasks.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from zarr.core.buffer import default_buffer_prototype

from pipelines.lattice import LatticeWindow
from pipelines.sources.models import SceneItem
from store.cube.inventory import INVENTORY_ARRAY, PartitionRows
from store.snapshots import MAIN_BRANCH, open_repository, open_storage

ROOT = Path(__file__).resolve().parents[2]
DASK = str(Path(sys.executable).with_name("dask"))


@dataclass
class Cluster:
    """A scheduler and workers, each its own process."""

    address: str
    scheduler: subprocess.Popen[bytes]
    workers: list[subprocess.Popen[bytes]]

    def stop(self) -> None:
        for p in [*self.workers, self.scheduler]:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in [*self.workers, self.scheduler]:
            try:
                p.wait(timeout=15)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()


@contextmanager
def dask_cluster(
    tmp: Path, workers: int = 2, config: dict[str, str] | None = None
) -> Iterator[Cluster]:
    """``dask scheduler`` and ``dask worker`` processes on 127.0.0.1 (workers without a nanny,
    so a killed worker stays dead and the scheduler must move its task elsewhere), each started
    in ``tmp`` (a relative path a task used would land there, not in the test's data)."""
    tmp.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "PYTHONPATH": str(ROOT), **(config or {})}
    sfile = tmp / "scheduler.json"
    log = open(tmp / "cluster.log", "ab")  # noqa: SIM115 (closed with the cluster)
    sched = subprocess.Popen(
        [
            DASK,
            "scheduler",
            "--host",
            "127.0.0.1",
            "--port",
            "0",
            "--no-dashboard",
            "--scheduler-file",
            str(sfile),
        ],
        env=env,
        cwd=tmp,
        stdout=log,
        stderr=log,
    )
    cluster = Cluster("", sched, [])
    try:
        deadline = time.monotonic() + 60
        while not sfile.exists() or not sfile.read_text().strip():
            if sched.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"dask scheduler did not start: {(tmp / 'cluster.log')}")
            time.sleep(0.1)
        cluster.address = json.loads(sfile.read_text())["address"]
        for _ in range(workers):
            cluster.workers.append(
                subprocess.Popen(
                    [
                        DASK,
                        "worker",
                        cluster.address,
                        "--nthreads",
                        "1",
                        "--no-nanny",
                        "--host",
                        "127.0.0.1",
                        "--no-dashboard",
                        "--death-timeout",
                        "60",
                    ],
                    env=env,
                    cwd=tmp,
                    stdout=log,
                    stderr=log,
                )
            )
        wait_for_workers(cluster.address, workers)
        yield cluster
    finally:
        cluster.stop()
        log.close()


def wait_for_workers(address: str, n: int) -> None:
    from distributed import Client

    with Client(address, timeout=30, set_as_default=False) as client:
        client.wait_for_workers(n, timeout=60)


def cube_contents(location: str) -> dict[str, Any]:
    """Every key of the cube's tip and its bytes; inventory chunks decoded, their clock dropped."""

    async def dump() -> dict[str, Any]:
        out: dict[str, Any] = {}
        async for key in store.list():
            buf = await store.get(key, default_buffer_prototype())
            out[key] = None if buf is None else buf.to_bytes()
        return out

    repo = open_repository(open_storage(location))
    store = repo.readonly_session(MAIN_BRANCH).store
    raw = asyncio.run(dump())
    import zarr

    arr = zarr.open_array(store, path=INVENTORY_ARRAY, mode="r")
    for key in [k for k in raw if k.startswith(INVENTORY_ARRAY + "/c/")]:
        y, x = (int(v) for v in key.rsplit("/", 2)[-2:])
        rows = PartitionRows.decode(str(arr[y, x].item()))
        raw[key] = (rows.key, json.dumps(rows.columns, sort_keys=True))
    return raw


# ------------------------------------------------------------------ a family whose task kills its worker


@dataclass(frozen=True)
class _Stack:
    """``stack_week`` that SIGKILLs its own worker process mid-task for one week."""

    marker: str
    always: bool
    t0: int
    inner: Any

    def __call__(self, items: Sequence[SceneItem], window: LatticeWindow, t0: int) -> Any:
        path = Path(self.marker)
        if t0 == self.t0 and (self.always or not path.exists()):
            with open(path, "a") as f:
                f.write(f"{os.getpid()}\n")
            os.kill(os.getpid(), signal.SIGKILL)
        return self.inner(items, window, t0)


def killing_family(family: Any, marker: Path, t0: int, always: bool = False) -> Any:
    """``family`` whose task for the week starting at ``t0`` kills its worker the first time
    (``always``: every time); the pids killed are appended to ``marker``."""
    return replace(family, stack_week=_Stack(str(marker), always, t0, family.stack_week))


# ------------------------------------------------------------------ the tiny sample's scene weeks


def scene_contents(location: str) -> dict[str, Any]:
    """What the scene assets write: every key of the cube but the Tessera arrays and rows."""
    out = {}
    for key, value in cube_contents(location).items():
        if key.startswith("geotessera") or (
            isinstance(value, tuple) and not value[0].startswith(("s2|", "s1|"))
        ):
            continue
        out[key] = value
    return out


def ingest_scene_weeks(tiny: Any, data: Path, dask: Any = None) -> Any:
    """Run the scene assets (S2, S1) over the tiny sample's range of weeks into ``data``, as
    ``ingest_area`` does (one run for the block's range), without the Tessera vintages."""
    from pipelines.cluster import DaskResource
    from pipelines.partitions import register_area_blocks
    from pipelines.run import materialize_range, resources_for
    from store.cube import CubeReader
    from tests.dagster_instance import ephemeral as ephemeral_instance

    local = CubeReader(storage=str(Path(tiny.data) / "cube.icechunk"))  # whatever the env says
    keys = local.inventory.table()["partition_key"].to_pylist()
    scene_keys = [k.split("|") for k in keys if k.startswith(("s2|", "s1|"))]
    weeks = sorted({week for _, _, week in scene_keys})
    (block,) = {b for _, b, _ in scene_keys}  # the tiny sample is one block: one range
    resources = resources_for(
        data, tiny.catalog, tiny.sample / "manifest.json", dask or DaskResource()
    )
    with ephemeral_instance() as instance:
        register_area_blocks(instance, resources["area"].bbox)
        return materialize_range(resources, instance, block, weeks[0], weeks[-1])


# ------------------------------------------------------------------ the tiny sample's Tessera vintages


def tessera_contents(location: str) -> dict[str, Any]:
    """What the Tessera cube asset writes: its arrays' keys and its inventory rows."""
    return {
        key: value
        for key, value in cube_contents(location).items()
        if key.startswith("geotessera")
        or (isinstance(value, tuple) and value[0].startswith("tessera|"))
    }


def ingest_vintages(tiny: Any, data: Path, dask: Any) -> list[Any]:
    """Materialise the tiny sample's Tessera vintages (items and cube asset) into ``data``."""
    from dagster import materialize

    from pipelines.run import QUIET, resources_for
    from pipelines.tessera.assets import geotessera_embeddings, tessera_items
    from tests.dagster_instance import ephemeral as ephemeral_instance

    resources = resources_for(data, tiny.catalog, tiny.sample / "manifest.json", dask)
    with ephemeral_instance() as instance:
        return [
            materialize(
                [tessera_items, geotessera_embeddings],
                partition_key=str(year),
                resources=resources,
                instance=instance,
                raise_on_error=False,
                run_config=QUIET,
            )
            for year in tiny.report.years
        ]
