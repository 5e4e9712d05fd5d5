"""The tiny sample ingested through Dagster with its scene work on a Dask cluster.

A scheduler and two workers, each its own process on loopback; the run's ``dask`` resource
names the scheduler. The scene assets (S2, S1) run over the sample's range of weeks; what they
write is exactly what the single-process ingest (the ``tiny_store`` fixture) holds — every
chunk and summary byte for byte, every inventory row — and each family's range of weeks is
one commit naming its partitions.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from pipelines.cluster import DaskResource
from store.cube import CubeReader
from store.snapshots import cube_location
from tests import s3_server
from tests.conftest import IngestedSample
from tests.pipelines.dask_cluster import (
    dask_cluster,
    ingest_scene_weeks,
    ingest_vintages,
    scene_contents,
    tessera_contents,
)

pytestmark = pytest.mark.slow  # an ingest of the tiny sample on a cluster of processes


def test_dask_ingest_equals_single_process(tiny_store: IngestedSample, tmp_path: Path) -> None:
    data = tmp_path / "data"
    with dask_cluster(tmp_path / "dask", workers=2) as cluster:
        run = ingest_scene_weeks(tiny_store, data, DaskResource(scheduler=cluster.address))
    assert run.ok
    assert run.failed_checks == [c.split(": ", 1)[1] for c in tiny_store.report.failed_checks]
    assert scene_contents(cube_location(data)) == scene_contents(cube_location(tiny_store.data))
    ranges = [
        s.metadata
        for s in CubeReader(data).list_snapshots()
        if s.metadata.get("asset") in ("s2_indices", "s1_backscatter")
    ]
    assert sorted(m["asset"] for m in ranges) == ["s1_backscatter", "s2_indices"]
    for meta in ranges:  # one commit per family's range, naming each of its partitions
        assert len(meta["partition_keys"]) > 1


def test_dask_ingest_onto_object_storage(
    tiny_store: IngestedSample, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The cluster deployment: the data root on S3 (a moto server on loopback), workers in their
    own processes with the credentials from their environment and no data directory in
    common with the coordinator's; the forks they write land on the object store and the
    commits there hold what the single-process ingest holds."""
    server = s3_server.start(tmp_path / "moto.log")
    try:
        server.create_bucket("cluster")
        env = {**server.env(), "EARTHMEM_OBJECT_STORE": "s3://cluster/area"}
        for k, v in env.items():
            monkeypatch.setenv(k, v)
        data = tmp_path / "data"
        workers_cwd = tmp_path / "dask"
        with dask_cluster(workers_cwd, workers=2, config=env) as cluster:
            run = ingest_scene_weeks(tiny_store, data, DaskResource(scheduler=cluster.address))
        assert run.ok
        location = cube_location(data)
        assert location == "s3://cluster/area/cube.icechunk"
        local = str(Path(tiny_store.data) / "cube.icechunk")
        assert scene_contents(location) == scene_contents(local)
        assert not (data / "cube.icechunk").exists()  # nothing of the cube on local disk
        assert not list(workers_cwd.rglob("*.icechunk"))  # nor where the workers ran
        assert server.keys("cluster", "area/cube.icechunk/chunks/")
    finally:
        server.stop()


def test_dask_tessera_equals_single_process(tiny_store: IngestedSample, tmp_path: Path) -> None:
    """Each vintage as one task per block of the area, merged and committed once."""
    data = tmp_path / "data"
    with dask_cluster(tmp_path / "dask", workers=2) as cluster:
        results = ingest_vintages(tiny_store, data, DaskResource(scheduler=cluster.address))
    assert [r.success for r in results] == [True] * len(tiny_store.report.years)
    ours = tessera_contents(cube_location(data))
    assert any(k.startswith("geotessera/embedding/c/") for k in ours)
    assert ours == tessera_contents(cube_location(tiny_store.data))
    commits = [
        s.metadata
        for s in CubeReader(data).list_snapshots()
        if s.metadata.get("asset") == "geotessera_embeddings"
    ]
    years = sorted(tiny_store.report.years)
    assert sorted(m["partition_key"] for m in commits) == [f"tessera|{y}" for y in years]
    for meta in commits:  # every block of the area was a task of the vintage's one commit
        assert meta["blocks"]
        assert meta["partition_keys"] == [meta["partition_key"]]
    for r in results:
        (check,) = r.get_asset_check_evaluations()
        assert check.passed
        (mat,) = r.asset_materializations_for_node("geotessera_embeddings")
        assert mat.metadata["valid_cells"].value > 0
