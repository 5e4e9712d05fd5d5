"""The data root on object storage: the tiny sample ingested into ``s3://``, served from there.

A real S3-compatible server (moto in server mode, its own process on loopback,
tests/s3_server.py); credentials and endpoint only in the environment. The data root is
``EARTHMEM_OBJECT_STORE=s3://bucket/prefix``: the cube (with its inventory) and the k-NN
tables live there; a data directory keeps the key, the memory database and its cache of
the tables. The whole ingest runs (scene weeks, Tessera vintages, k-NN tables, rechecks);
the cube holds exactly what the local ingest's scene assets wrote, did_change /
area_over_time answer from it with the local answers' values and fact ids, and a real
``earthmem serve`` on an empty data directory answers them, find_similar (its cache filled
from object storage) and a memory written and recalled, as the ingest host does.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import boto3
import httpx
import pytest
from botocore.exceptions import ClientError

from api.context import ServiceContext
from api.dispatch import run
from api.memory.auth import issue_token
from api.receipts import Signer, verify_answer
from store import address
from store.cube import CubeReader
from store.keys import KEY_FILE, KEY_FILE_ENV
from store.knn import KnnTable
from store.knn.remote import read_pointer, remote_names
from store.memory import open_store
from store.objects import ObjectRoot
from store.snapshots import CUBE_DIRNAME, OBJECT_STORE_ENV, cube_location
from tests import s3_server
from tests.conftest import IngestedSample
from tests.pipelines.dask_cluster import scene_contents

pytestmark = pytest.mark.slow  # an ingest of the tiny sample over HTTP

BUCKET, PREFIX = "earthmem", "tiny"
REPO = Path(__file__).resolve().parents[2]


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
    """The tiny sample ingested as ``tiny_store`` is, with the data root on the S3 server (the
    environment set only meanwhile)."""
    from pipelines.run import ingest_area
    from tests.dagster_instance import ephemeral as ephemeral_instance

    data = tmp_path_factory.mktemp("s3_data")
    with pytest.MonkeyPatch.context() as mp:
        for k, v in _env(s3).items():
            mp.setenv(k, v)
        with ephemeral_instance() as instance:
            report = ingest_area(
                data, tiny_store.catalog, tiny_store.sample / "manifest.json", instance=instance
            )
    assert not report.failed, report
    assert report.years == tiny_store.report.years
    assert report.partitions == tiny_store.report.partitions
    return data  # the environment is the tests' own again


def _env(s3: s3_server.S3Server) -> dict[str, str]:
    return {**s3.env(), OBJECT_STORE_ENV: f"s3://{BUCKET}/{PREFIX}"}


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
        for k, v in _env(s3).items():
            mp.setenv(k, v)
        location = cube_location(s3_store)
        assert location == f"s3://{BUCKET}/{PREFIX}/{CUBE_DIRNAME}"
        remote = scene_contents(location)
    assert cube_location(tiny_store.data) == str(tiny_store.data / CUBE_DIRNAME)  # local again
    assert remote == scene_contents(cube_location(tiny_store.data))


Call = Callable[[str, dict[str, Any]], dict[str, Any]]


def _in_process(data: Path) -> Call:
    ctx = ServiceContext(data, signer=Signer.generate())
    return lambda name, args: run(ctx, name, args).model_dump(mode="json")


def _answers(call: Call, cell: str, flood: dict[str, Any]) -> tuple[Any, Any]:
    tr = call("trajectory", {"cell": cell, "band": "indices.ndvi"})
    clear = [p["tslot"] for p in tr["points"] if p["clear"]]
    change = call(
        "did_change", {"cell": cell, "band": "indices.ndvi", "window": [clear[0], clear[-1]]}
    )
    area = call(
        "area_over_time",
        {
            "geometry": flood["geometry"],
            "start_date": "2024-07-01",
            "end_date": flood["end"],
            "index": "ndwi",
        },
    )
    return change, area


def test_did_change_and_area_over_time_answer_from_object_storage(
    s3_store: Path, s3: s3_server.S3Server, tiny_store: IngestedSample
) -> None:
    centre = tiny_store.event("forest_clearing")["centre"]
    cell = address.encode(centre["lat"], centre["lng"])
    flood = tiny_store.event("flood")
    local = _answers(_in_process(tiny_store.data), cell, flood)
    with pytest.MonkeyPatch.context() as mp:
        for k, v in _env(s3).items():
            mp.setenv(k, v)
        remote = _answers(_in_process(s3_store), cell, flood)
    for got, want in zip(remote, local, strict=True):
        assert got["snapshot_id"] != want["snapshot_id"]  # read from the other cube
        assert _values(got) == _values(want)
    assert remote[0]["delta"] is not None
    ids = [f["fact_id"] for f in remote[0]["facts"]]
    assert ids
    assert ids == [f["fact_id"] for f in local[0]["facts"]]  # replica-stable fact ids


def _values(answer: dict[str, Any], *, keep_snapshot: bool = False) -> dict[str, Any]:
    """An answer without what names its snapshot (unless kept), its signature or its timing."""
    drop = {"receipt", "as_of", "signed_at", "elapsed_ms", "chart", "_meta"}
    if not keep_snapshot:
        drop.add("snapshot_id")
    return {k: v for k, v in answer.items() if k not in drop}


def test_ingest_publishes_the_knn_tables_and_keeps_the_inventory_in_the_cube(
    s3_store: Path, s3: s3_server.S3Server, tiny_store: IngestedSample
) -> None:
    root = ObjectRoot(BUCKET, PREFIX)
    with pytest.MonkeyPatch.context() as mp:
        for k, v in _env(s3).items():
            mp.setenv(k, v)
        names = remote_names(root, "geotessera")
        pointers = {n: read_pointer(root, n) for n in _table_names(tiny_store)}
        inventory = CubeReader(s3_store).inventory.table()["partition_key"].to_pylist()
    assert names == [str(y) for y in tiny_store.report.years]
    for name, pointer in pointers.items():
        assert pointer is not None, name
        local = KnnTable.open(tiny_store.data / "knn" / name)
        assert pointer["digest"] == local.meta["digest"]  # the same rows as the local ingest's
    assert not (s3_store / "inventory").exists()  # the inventory is the cube's
    assert sorted(inventory) == sorted(
        CubeReader(tiny_store.data).inventory.table()["partition_key"].to_pylist()
    )


def _table_names(tiny: IngestedSample) -> list[str]:
    return [*(f"geotessera/{y}" for y in tiny.report.years), "geotessera.multi_year"]


def test_replicas_on_empty_data_directories_answer_from_object_storage_and_agree(
    s3_store: Path, s3: s3_server.S3Server, tiny_store: IngestedSample, tmp_path: Path
) -> None:
    """The whole path: two ``earthmem serve`` replicas, each on a data directory holding
    nothing (no cube, no k-NN cache, no key, no memory database), given one signing key as
    a secret, answer as the ingest host does, agree with each other (values, fact ids,
    snapshot), publish one key set that verifies the other's receipts, and keep and recall
    a memory one of them is given."""
    centre = tiny_store.event("forest_clearing")["centre"]
    cell = address.encode(centre["lat"], centre["lng"])
    flood = tiny_store.event("flood")
    with pytest.MonkeyPatch.context() as mp:
        for k, v in _env(s3).items():
            mp.setenv(k, v)
        host = _in_process(s3_store)  # the ingest host: its cache is what the ingest wrote
        want = [*_answers(host, cell, flood), host("find_similar", {"key": cell, "k": 5})]
    secret = tmp_path / "signing.key"  # as a mounted secret: outside every data directory
    secret.write_bytes(os.urandom(32))
    os.chmod(secret, 0o400)
    replicas = [tmp_path / "replica_a", tmp_path / "replica_b"]
    for r in replicas:
        r.mkdir()
    memory_url = f"sqlite:///{tmp_path / 'memory.sqlite'}"
    memories = open_store(memory_url)
    token = issue_token(memories, "ranchi", ("read", "write"))[0]
    memories.close()
    env = {**_env(s3), "EARTHMEM_MEMORY_URL": memory_url, KEY_FILE_ENV: str(secret)}
    with (
        _serve(replicas[0], env, tmp_path / "serve_a.log") as base_a,
        _serve(replicas[1], env, tmp_path / "serve_b.log") as base_b,
        httpx.Client(base_url=base_a, timeout=120) as http,
        httpx.Client(base_url=base_b, timeout=120) as http_b,
    ):
        published = [
            {
                k["key_id"]: bytes.fromhex(k["public_key"])
                for k in c.get("/.well-known/earthmem.json").json()["keys"]
            }
            for c in (http, http_b)
        ]

        def caller(client: httpx.Client) -> Callable[[str, dict[str, Any]], dict[str, Any]]:
            def call(name: str, args: dict[str, Any]) -> dict[str, Any]:
                resp = client.post(f"/v1/{name}", json=args)
                assert resp.status_code == 200, resp.text
                doc: dict[str, Any] = resp.json()
                for keys in published:  # verifies against either replica's published set
                    assert verify_answer(doc, public_keys=keys).ok
                return doc

            return call

        got, got_b = (
            [*_answers(caller(c), cell, flood), caller(c)("find_similar", {"key": cell, "k": 5})]
            for c in (http, http_b)
        )
        on_b = http_b.post("/v1/verify_receipt", json={"answer": got[0]}).json()
        assert on_b["valid"], on_b  # A's receipt, checked by B
        assert on_b["signed_by_this_server"], on_b
        auth = {"Authorization": f"Bearer {token}"}
        created = http.post(
            "/v1/memory_create",
            headers=auth,
            json={
                "type": "observation",
                "title": "fields under water",
                "statement": "the paddy fields by the river were flooded",
                "tags": ["flood"],
                "where": {"lat": flood["centre"]["lat"], "lng": flood["centre"]["lng"]},
            },
        )
        assert created.status_code == 200, created.text
        item_id = created.json()["result"]["item"]["id"]
        recalled = http_b.post("/v1/recall", headers=auth, json={"query": "paddy flooded"})
        assert recalled.status_code == 200, recalled.text
        assert [h["id"] for h in recalled.json()["hits"]] == [item_id]  # written on A
    assert published[0] == published[1]
    assert len(published[0]) == 1
    key_bytes = secret.read_bytes()
    for name in s3.keys(BUCKET):  # the signing key is never stored in the object store
        assert key_bytes not in s3.get(BUCKET, name), name
        assert key_bytes.hex() not in s3.get(BUCKET, name).decode("latin-1"), name
    assert set(published[0]) != {Signer.load_or_create(tmp_path / "own").key_id}
    for a, b in zip(got, got_b, strict=True):  # the replicas agree
        assert _values(a, keep_snapshot=True) == _values(b, keep_snapshot=True)
        assert a["receipt"]["fact_ids"] == b["receipt"]["fact_ids"]
    for g, w in zip(got, want, strict=True):  # and answer as the ingest host does
        assert _values(g, keep_snapshot=True) == _values(w, keep_snapshot=True)
    assert got[2]["returned_k"] == 5
    assert got[0]["facts"]
    for r in replicas:
        assert not (r / CUBE_DIRNAME).exists()
        assert not (r / KEY_FILE).exists()  # the secret was used, no key of its own
        for name in _table_names(tiny_store):  # the cache, filled from object storage
            assert (r / "knn" / name).is_symlink()
            assert (
                KnnTable.open(r / "knn" / name).meta["digest"]
                == (KnnTable.open(s3_store / "knn" / name).meta["digest"])
            )


@contextmanager
def _serve(data: Path, env: dict[str, str], log: Path) -> Iterator[str]:
    """``earthmem serve`` as its own process on a free loopback port, until the block ends."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = int(s.getsockname()[1])
    cmd = [sys.executable, "-m", "cli.main", "serve", "--data", str(data), "--port", str(port)]
    full_env = {**os.environ, "PYTHONPATH": str(REPO), **env}
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [*cmd, "--no-access-log"], cwd=REPO, env=full_env, stdout=out, stderr=subprocess.STDOUT
        )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120  # a bound for a server that never starts
        while True:
            assert proc.poll() is None, log.read_text()[-2000:]
            try:
                if httpx.get(url + "/healthz", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline, log.read_text()[-2000:]
            time.sleep(0.3)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
