"""The tiny sample ingested through Dagster with its scene work on a Dask cluster.

A scheduler and two workers, each its own process on loopback; the run's ``dask`` resource
names the scheduler. The cube it writes holds exactly what the single-process ingest
(the ``tiny_store`` fixture) holds — every chunk byte for byte, every inventory row — and
each family's range of weeks is one commit naming its partitions.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from dagster import DagsterInstance

from pipelines.cluster import DaskResource
from pipelines.partitions import register_area_blocks
from pipelines.run import materialize_range, resources_for
from store.cube import CubeReader
from store.snapshots import cube_location
from tests.conftest import IngestedSample
from tests.pipelines.dask_cluster import cube_contents, dask_cluster

pytestmark = pytest.mark.slow  # an ingest of the tiny sample on a cluster of processes


def _scene_contents(data: Path) -> dict[str, Any]:
    """What the scene assets write: every key but the Tessera arrays and inventory rows."""
    out = {}
    for key, value in cube_contents(cube_location(data)).items():
        if key.startswith("geotessera") or (
            isinstance(value, tuple) and not value[0].startswith(("s2|", "s1|"))
        ):
            continue
        out[key] = value
    return out


def test_dask_ingest_equals_single_process(tiny_store: IngestedSample, tmp_path: Path) -> None:
    data = tmp_path / "data"
    keys = CubeReader(tiny_store.data).inventory.table()["partition_key"].to_pylist()
    scene_keys = [k.split("|") for k in keys if k.startswith(("s2|", "s1|"))]
    weeks = sorted({week for _, _, week in scene_keys})
    (block,) = {b for _, b, _ in scene_keys}  # the tiny sample is one block: one range
    with dask_cluster(tmp_path / "dask", workers=2) as cluster:
        resources = resources_for(
            data,
            tiny_store.catalog,
            tiny_store.sample / "manifest.json",
            DaskResource(scheduler=cluster.address),
        )
        with DagsterInstance.ephemeral() as instance:
            register_area_blocks(instance, resources["area"].bbox)
            run = materialize_range(resources, instance, block, weeks[0], weeks[-1])
    assert run.ok
    assert _scene_contents(data) == _scene_contents(tiny_store.data)
    ranges = [
        s.metadata
        for s in CubeReader(data).list_snapshots()
        if s.metadata.get("asset") in ("s2_indices", "s1_backscatter")
    ]
    assert sorted(m["asset"] for m in ranges) == ["s1_backscatter", "s2_indices"]
    for meta in ranges:  # one commit per family's range, naming each of its partitions
        assert len(meta["partition_keys"]) > 1
