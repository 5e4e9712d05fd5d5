"""The cube on object storage: the tiny sample ingested into ``s3://`` and queried from there.

A real S3-compatible server (moto in server mode, its own process on loopback,
tests/s3_server.py); credentials and endpoint only in the environment. The data root is
``EARTHMEM_OBJECT_STORE=s3://bucket/prefix``: the cube lives there, the data directory keeps
the key, the k-NN tables and the memory database. The scene assets (S2, S1) run over the
sample's weeks; the cube holds exactly what the local ingest's scene assets wrote, and did_change / area_over_time answer from it with the local answers' values
and fact ids.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError

from api.context import ServiceContext
from api.dispatch import run
from api.receipts import Signer
from store import address
from store.snapshots import CUBE_DIRNAME, OBJECT_STORE_ENV, cube_location
from tests import s3_server
from tests.conftest import IngestedSample
from tests.pipelines.dask_cluster import ingest_scene_weeks, scene_contents

pytestmark = pytest.mark.slow  # an ingest of the tiny sample over HTTP

BUCKET, PREFIX = "earthmem", "tiny"


@pytest.fixture(scope="module")
def s3(tmp_path_factory: pytest.TempPathFactory) -> Iterator[s3_server.S3Server]:
    server = s3_server.start(tmp_path_factory.mktemp("moto") / "moto.log")
    try:
        server.create_bucket(BUCKET)
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def s3_store(
    tiny_store: IngestedSample, s3: s3_server.S3Server, tmp_path_factory: pytest.TempPathFactory
) -> Path:
    """The tiny sample's scene weeks ingested with the cube on the S3 server (the environment
    set only meanwhile)."""
    data = tmp_path_factory.mktemp("s3_data")
    with pytest.MonkeyPatch.context() as mp:
        for k, v in {**s3.env(), OBJECT_STORE_ENV: f"s3://{BUCKET}/{PREFIX}"}.items():
            mp.setenv(k, v)
        assert ingest_scene_weeks(tiny_store, data).ok
    return data  # the environment is the tests' own again


def test_moto_honours_the_conditional_writes_icechunk_needs(s3: s3_server.S3Server) -> None:
    client = boto3.client(
        "s3",
        endpoint_url=s3.endpoint,
        aws_access_key_id="x",
        aws_secret_access_key="y",
        region_name="us-east-1",
    )
    client.put_object(Bucket=BUCKET, Key="probe/ref", Body=b"1", IfNoneMatch="*")
    with pytest.raises(ClientError, match="PreconditionFailed"):
        client.put_object(Bucket=BUCKET, Key="probe/ref", Body=b"2", IfNoneMatch="*")
    etag = client.head_object(Bucket=BUCKET, Key="probe/ref")["ETag"]
    client.put_object(Bucket=BUCKET, Key="probe/ref", Body=b"3", IfMatch=etag)
    with pytest.raises(ClientError, match="PreconditionFailed"):
        client.put_object(Bucket=BUCKET, Key="probe/ref", Body=b"4", IfMatch=etag)


def test_ingest_writes_the_cube_to_object_storage(
    s3_store: Path, s3: s3_server.S3Server, tiny_store: IngestedSample
) -> None:
    assert not (s3_store / CUBE_DIRNAME).exists()  # nothing of the cube on local disk
    assert any(k.startswith(f"{PREFIX}/{CUBE_DIRNAME}/") for k in s3.keys(BUCKET, PREFIX))
    with pytest.MonkeyPatch.context() as mp:
        for k, v in {**s3.env(), OBJECT_STORE_ENV: f"s3://{BUCKET}/{PREFIX}"}.items():
            mp.setenv(k, v)
        location = cube_location(s3_store)
        assert location == f"s3://{BUCKET}/{PREFIX}/{CUBE_DIRNAME}"
        remote = scene_contents(location)
    assert cube_location(tiny_store.data) == str(tiny_store.data / CUBE_DIRNAME)  # local again
    assert remote == scene_contents(cube_location(tiny_store.data))


def _answers(data: Path, cell: str, flood: dict[str, Any]) -> tuple[Any, Any]:
    ctx = ServiceContext(data, signer=Signer.generate())
    tr = run(ctx, "trajectory", {"cell": cell, "band": "indices.ndvi"})
    clear = [p.tslot for p in tr.points if p.clear]
    change = run(
        ctx, "did_change", {"cell": cell, "band": "indices.ndvi", "window": [clear[0], clear[-1]]}
    )
    area = run(
        ctx,
        "area_over_time",
        {
            "geometry": flood["geometry"],
            "start_date": "2024-07-01",
            "end_date": flood["end"],
            "index": "ndwi",
        },
    )
    return change.model_dump(mode="json"), area.model_dump(mode="json")


def test_did_change_and_area_over_time_answer_from_object_storage(
    s3_store: Path, s3: s3_server.S3Server, tiny_store: IngestedSample
) -> None:
    centre = tiny_store.event("forest_clearing")["centre"]
    cell = address.encode(centre["lat"], centre["lng"])
    flood = tiny_store.event("flood")
    local = _answers(tiny_store.data, cell, flood)
    with pytest.MonkeyPatch.context() as mp:
        for k, v in {**s3.env(), OBJECT_STORE_ENV: f"s3://{BUCKET}/{PREFIX}"}.items():
            mp.setenv(k, v)
        remote = _answers(s3_store, cell, flood)
    for got, want in zip(remote, local, strict=True):
        assert got["snapshot_id"] != want["snapshot_id"]  # read from the other cube
        assert _values(got) == _values(want)
    assert remote[0]["delta"] is not None
    ids = [f["fact_id"] for f in remote[0]["facts"]]
    assert ids
    assert ids == [f["fact_id"] for f in local[0]["facts"]]  # replica-stable fact ids


def _values(answer: dict[str, Any]) -> dict[str, Any]:
    """An answer without what names its snapshot, its signature or its timing."""
    drop = {"snapshot_id", "receipt", "as_of", "signed_at", "elapsed_ms", "chart"}
    return {k: v for k, v in answer.items() if k not in drop}
