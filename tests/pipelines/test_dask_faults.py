"""Faults of the Dask ingest: a worker killed mid-task, a task lost for good, no scheduler.

A real cluster of separate processes on loopback (``dask scheduler`` / ``dask worker``,
workers without a nanny, so a killed worker stays dead). The scene family is Sentinel-2's
own, except that the task of one week SIGKILLs its worker process (tests/pipelines/
dask_cluster.py). A killed task is moved to the other worker and the range converges to the
single-process contents; a task whose workers keep dying fails the run with a ClusterError
and nothing committed, and a rerun converges.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import date
from pathlib import Path
from typing import Any

import pytest

from pipelines.cluster import ClusterError, ClusterUnavailable, ExecutorChoice
from pipelines.family import ingest_range
from pipelines.family_dask import ingest_range_dask, run_range
from pipelines.partitions import area_blocks, week_key_of, week_t0
from pipelines.resources import AreaResource, SceneSourceResource
from pipelines.scenes import Discovery, ScenePartition, discover
from pipelines.sentinel2.assets import S2
from store.cube import CubeWriter
from store.snapshots import cube_location
from tests.pipelines.dask_cluster import Cluster, cube_contents, dask_cluster, killing_family

pytestmark = pytest.mark.slow  # a cluster of processes, three small ingests

WEEKS = 3


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """Two workers; a task is given up after a second worker died running it."""
    config = {"DASK_DISTRIBUTED__SCHEDULER__ALLOWED_FAILURES": "1"}
    with dask_cluster(tmp_path_factory.mktemp("dask"), workers=2, config=config) as c:
        yield c


@pytest.fixture(scope="module")
def run(tiny_sample_dir: Path) -> tuple[list[ScenePartition], Discovery]:
    """The first weeks with Sentinel-2 scenes of the tiny sample's block."""
    area = AreaResource(path=str(tiny_sample_dir / "manifest.json"))
    scenes = SceneSourceResource(kind="static", path=str(tiny_sample_dir / "catalog.json"))
    (block,) = area_blocks(area.bbox)
    window = area.block_window(block)
    assert window is not None
    items = scenes.open().search(S2.collection, window.bounds(), date(2017, 1, 1), date.today())
    weeks = sorted({week_key_of(i.datetime.date()) for i in items.items})[:WEEKS]
    parts = [ScenePartition(f"{block}|{w}", w, block, week_t0(w), window) for w in weeks]
    return parts, discover(S2.collection, parts, scenes)


@pytest.fixture(scope="module")
def expected(run: Any, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The cube the single-process path writes for these weeks."""
    data = tmp_path_factory.mktemp("local")
    outcomes = ingest_range(S2, *run, CubeWriter(data), lambda _: None)
    assert all(o.written for o in outcomes)
    return cube_contents(cube_location(data))


def _client(cluster: Cluster) -> Any:
    from distributed import Client

    return Client(cluster.address, timeout=30, set_as_default=False)


def test_worker_killed_mid_task_converges(
    cluster: Cluster, run: Any, expected: dict[str, Any], tmp_path: Path
) -> None:
    parts, found = run
    marker = tmp_path / "killed"
    family = killing_family(S2, marker, parts[1].t0)
    writer = CubeWriter(tmp_path / "data")
    with _client(cluster) as client:
        outcomes = ingest_range_dask(family, parts, found, writer, lambda _: None, client)
        client.wait_for_workers(1)
    assert len(marker.read_text().split()) == 1  # one worker process was killed
    assert cluster.workers[0].poll() is not None or cluster.workers[1].poll() is not None
    assert [o.written for o in outcomes] == [True] * WEEKS
    snapshots = writer.list_snapshots()
    assert snapshots[0].metadata["partition_keys"] == sorted(p.key for p in parts)
    assert {o.metadata["snapshot_id"] for o in outcomes} == {snapshots[0].id}
    assert cube_contents(writer.location) == expected


def test_task_lost_for_good_fails_clearly_and_rerun_converges(
    tmp_path: Path, run: Any, expected: dict[str, Any]
) -> None:
    parts, found = run
    config = {"DASK_DISTRIBUTED__SCHEDULER__ALLOWED_FAILURES": "1"}
    writer = CubeWriter(tmp_path / "data")
    before = [s.id for s in writer.list_snapshots()]
    family = killing_family(S2, tmp_path / "killed", parts[0].t0, always=True)
    with (
        dask_cluster(tmp_path / "dask", workers=2, config=config) as c,
        _client(c) as client,
        pytest.raises(ClusterError, match="nothing was committed"),
    ):
        ingest_range_dask(family, parts, found, writer, lambda _: None, client)
    assert len((tmp_path / "killed").read_text().split()) == 2  # both workers died on it
    assert [s.id for s in writer.list_snapshots()] == before  # no commit, nothing visible
    with dask_cluster(tmp_path / "dask2", workers=1) as c, _client(c) as client:
        ingest_range_dask(S2, parts, found, writer, lambda _: None, client)
    assert cube_contents(writer.location) == expected


def test_a_scheduler_that_does_not_answer_fails_before_writing(tmp_path: Path, run: Any) -> None:
    import socket

    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    writer = CubeWriter(tmp_path / "data")
    before = [s.id for s in writer.list_snapshots()]
    choice = ExecutorChoice("dask", f"tcp://127.0.0.1:{port}", connect_timeout=2.0)
    with pytest.raises(ClusterUnavailable, match="did not answer"):
        run_range(S2, *run, writer, lambda _: None, choice)
    assert [s.id for s in writer.list_snapshots()] == before
