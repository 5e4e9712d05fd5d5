"""k-NN tables on object storage and a server's local cache of them (store.knn.remote).

Against a real S3-compatible server (moto in server mode on loopback, tests/s3_server.py):
a table published from one data directory is copied into an empty cache and scans the
same; a new table is swapped in while readers of the old keep theirs; the cache keeps its
size bound (evicting the least recently used table, refusing a table larger than the bound);
a copy that does not match its pointer is refused with nothing swapped in.
"""

from __future__ import annotations

import fcntl
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import numpy as np
import pytest

from store import knn as V
from store.errors import StorageUnavailable, VectorTableError
from store.knn.remote import (
    CACHE_BYTES_ENV,
    KNN_PREFIX,
    LocalTables,
    TableCache,
    _current_on_storage,
    publish_table,
    read_pointer,
    remote_names,
    table_source,
    upgrade_tables,
)
from store.leftovers import WRITERS_LOCK_FILENAME
from store.objects import ObjectRoot
from store.snapshots import OBJECT_STORE_ENV
from tests import s3_server
from tests.store.knn.older import leave_as_older_code

BUCKET = "knn-tables"
META = {"band": "geotessera", "tslot": 54, "vintage": 2024}


@pytest.fixture(scope="module")
def s3(tmp_path_factory: pytest.TempPathFactory) -> Iterator[s3_server.S3Server]:
    server = s3_server.start(tmp_path_factory.mktemp("moto") / "moto.log")
    try:
        server.create_bucket(BUCKET)
        with pytest.MonkeyPatch.context() as mp:
            for k, v in server.env().items():
                mp.setenv(k, v)
            yield server
    finally:
        server.stop()


@pytest.fixture
def root(s3: s3_server.S3Server, request: pytest.FixtureRequest) -> ObjectRoot:
    """A fresh prefix per test."""
    return ObjectRoot(BUCKET, f"t/{request.node.name}")


def _table(path: Path, seed: int, n: int = 400) -> V.KnnTable:
    rng = np.random.default_rng(seed)
    vec = rng.integers(-127, 128, (n, 128), dtype=np.int8)
    cells = np.sort(rng.choice(2**40, n, replace=False)).astype(np.uint64)
    scales = rng.uniform(0.001, 0.1, n).astype(np.float32)
    V.write_table(path, cells, vec, scales, META, replace=True, calibrate=False)
    return V.KnnTable.open(path)


def _same(a: V.KnnTable, b: V.KnnTable) -> None:
    assert a.meta == b.meta
    np.testing.assert_array_equal(np.asarray(a.cells), np.asarray(b.cells))
    np.testing.assert_array_equal(np.asarray(a.vectors), np.asarray(b.vectors))
    for mode in ("cosine", "hamming_then_rerank"):
        ra, rb = a.search_row(7, k=10, mode=mode), b.search_row(7, k=10, mode=mode)
        np.testing.assert_array_equal(ra.rows, rb.rows)
        np.testing.assert_array_equal(ra.scores, rb.scores)


def test_an_empty_cache_gets_the_published_table(root: ObjectRoot, tmp_path: Path) -> None:
    built = _table(tmp_path / "host" / "knn" / "geotessera" / "2024", seed=1)
    digest = publish_table(root, "geotessera/2024", tmp_path / "host" / "knn" / "geotessera/2024")
    assert digest == built.meta["digest"]
    assert remote_names(root, "geotessera") == ["2024"]
    cache = TableCache(root, tmp_path / "replica" / "knn")
    assert cache.years() == [2024]
    local = cache.directory_of("geotessera/2024")
    assert local == tmp_path / "replica" / "knn" / "geotessera" / "2024"
    assert local.is_symlink()
    _same(V.KnnTable.open(local), built)
    # publishing the same table again uploads nothing new
    keys = root.keys(KNN_PREFIX)
    assert publish_table(root, "geotessera/2024", built.path) == digest
    assert root.keys(KNN_PREFIX) == keys


def test_no_table_is_none(root: ObjectRoot, tmp_path: Path) -> None:
    cache = TableCache(root, tmp_path / "knn")
    assert cache.directory_of("geotessera/1999") is None
    assert cache.years() == []
    assert not (tmp_path / "knn").exists()


def test_a_new_table_is_swapped_in_and_the_old_readers_keep_theirs(
    root: ObjectRoot, tmp_path: Path
) -> None:
    host = tmp_path / "host" / "knn" / "geotessera" / "2024"
    first = _table(host, seed=1)
    first_vectors = np.array(first.vectors)
    publish_table(root, "geotessera/2024", host)
    cache = TableCache(root, tmp_path / "replica" / "knn")
    held = V.KnnTable.open(cache.directory_of("geotessera/2024"))  # type: ignore[arg-type]
    digests = [first.meta["digest"]]
    for seed in (2, 3):
        digests.append(_table(host, seed=seed).meta["digest"])
        publish_table(root, "geotessera/2024", host)
        now = V.KnnTable.open(cache.directory_of("geotessera/2024"))  # type: ignore[arg-type]
        assert now.meta["digest"] == digests[-1]
        _same(now, V.KnnTable.open(host))
    np.testing.assert_array_equal(np.asarray(held.vectors), first_vectors)  # still mapped
    assert held.search_row(3, k=5).rows.size == 5
    versions = [p for p in (tmp_path / "replica" / "knn" / "geotessera").iterdir() if "@" in p.name]
    assert len(versions) == 1  # the older copies were removed when their successor landed
    remote = {k.split("/")[3] for k in root.keys(f"{KNN_PREFIX}/geotessera/2024/")}
    assert remote == {"CURRENT.json", digests[1], digests[2]}  # current and the one before


def test_the_cache_keeps_its_bound(root: ObjectRoot, tmp_path: Path) -> None:
    sizes = {}
    for year in (2022, 2023, 2024):
        path = tmp_path / "host" / "knn" / "geotessera" / str(year)
        _table(path, seed=year)
        publish_table(root, f"geotessera/{year}", path)
        sizes[year] = sum(f.stat().st_size for f in Path(os.path.realpath(path)).iterdir())
    bound = sizes[2022] + sizes[2023] + sizes[2024] // 2  # two tables fit, not three
    cache = TableCache(root, tmp_path / "replica" / "knn", max_bytes=bound)
    assert cache.warm() == ["geotessera/2024", "geotessera/2023"]  # newest first, no eviction
    cache.directory_of("geotessera/2024")  # used: 2023 is now the least recently used
    os.utime(os.path.realpath(tmp_path / "replica" / "knn" / "geotessera" / "2023"), (1, 1))
    cache.directory_of("geotessera/2022")
    held = {p.name for p in (tmp_path / "replica" / "knn" / "geotessera").iterdir()}
    assert {"2022", "2024"} <= held
    assert "2023" not in held
    assert _cached_bytes(tmp_path / "replica" / "knn") <= bound
    tiny = TableCache(root, tmp_path / "tiny" / "knn", max_bytes=sizes[2024] - 1)
    with pytest.raises(VectorTableError, match=CACHE_BYTES_ENV):
        tiny.directory_of("geotessera/2024")
    assert not (tmp_path / "tiny" / "knn" / "geotessera" / "2024").exists()


def _cached_bytes(directory: Path) -> int:
    """Bytes of the table files under a cache folder (symlinks not followed)."""
    return sum(
        os.path.getsize(os.path.join(top, f))
        for top, _, files in os.walk(directory)
        for f in files
        if f.endswith((".npy", ".json"))
    )


def test_a_copy_that_does_not_match_its_pointer_is_refused(
    root: ObjectRoot, s3: s3_server.S3Server, tmp_path: Path
) -> None:
    host = tmp_path / "host" / "knn" / "geotessera" / "2024"
    built = _table(host, seed=1)
    digest = publish_table(root, "geotessera/2024", host)
    client = boto3.client("s3", endpoint_url=s3.endpoint, region_name="us-east-1")
    key = root.key(f"{KNN_PREFIX}/geotessera/2024/{digest}/vectors.npy")
    original = client.get_object(Bucket=BUCKET, Key=key)["Body"].read()
    body = bytearray(original)
    body[-1] ^= 0xFF  # same size, one flipped byte
    client.put_object(Bucket=BUCKET, Key=key, Body=bytes(body))
    cache = TableCache(root, tmp_path / "replica" / "knn")
    with pytest.raises(VectorTableError, match="does not match its pointer"):
        cache.directory_of("geotessera/2024")
    parent = tmp_path / "replica" / "knn" / "geotessera"
    assert [p.name for p in parent.iterdir() if p.name != ".writers.lock"] == []
    assert read_pointer(root, "geotessera/2024")["digest"] == digest  # type: ignore[index]
    client.put_object(Bucket=BUCKET, Key=key, Body=original)  # repaired: the next try copies
    _same(V.KnnTable.open(cache.directory_of("geotessera/2024")), built)  # type: ignore[arg-type]


def test_a_malformed_pointer_is_a_typed_error(root: ObjectRoot, tmp_path: Path) -> None:
    root.put(f"{KNN_PREFIX}/geotessera/2024/CURRENT.json", json.dumps({"files": 3}).encode())
    with pytest.raises(VectorTableError, match="malformed"):
        TableCache(root, tmp_path / "knn").directory_of("geotessera/2024")


def test_unreachable_storage_is_a_typed_error(s3: s3_server.S3Server, tmp_path: Path) -> None:
    missing = TableCache(ObjectRoot("no-such-bucket", "x"), tmp_path / "knn")
    with pytest.raises(StorageUnavailable):
        missing.directory_of("geotessera/2024")
    with pytest.raises(StorageUnavailable):
        missing.years()


def test_the_data_directory_is_the_default_source(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(OBJECT_STORE_ENV, raising=False)
    source = table_source(tmp_path)
    assert isinstance(source, LocalTables)
    _table(tmp_path / "knn" / "geotessera" / "2024", seed=1)
    assert source.years() == [2024]
    assert source.directory_of("geotessera/2024") == tmp_path / "knn" / "geotessera" / "2024"
    assert source.directory_of("geotessera/2023") is None
    monkeypatch.setenv(OBJECT_STORE_ENV, f"s3://{BUCKET}/p")
    remote: Any = table_source(tmp_path)
    assert isinstance(remote, TableCache)
    assert remote.directory == tmp_path / "knn"
    monkeypatch.setenv(CACHE_BYTES_ENV, "lots")
    with pytest.raises(VectorTableError, match=CACHE_BYTES_ENV):
        table_source(tmp_path)


def test_upgrade_tables_on_object_storage_publishes_the_new_layout(
    root: ObjectRoot, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A table an older version published is read through the cache, rewritten into the data
    directory and published: a fresh cache on another machine gets the new layout, with the
    same rows and exact answers; a second upgrade finds it current from its published meta.json
    without copying it."""
    host = tmp_path / "host"
    built = _table(host / "knn" / "geotessera" / "2024", seed=3, n=2000)
    leave_as_older_code(host / "knn" / "geotessera" / "2024")
    old = publish_table(root, "geotessera/2024", host / "knn" / "geotessera" / "2024")
    monkeypatch.setenv(OBJECT_STORE_ENV, f"s3://{root.bucket}/{root.prefix}")
    admin = tmp_path / "admin"
    killed = admin / ".knn-upgrade-killed"  # what an upgrade killed mid-way left
    (killed / "t").mkdir(parents=True)
    with open(admin / WRITERS_LOCK_FILENAME, "a+b") as live:  # another upgrade still running
        fcntl.flock(live.fileno(), fcntl.LOCK_SH)
        assert upgrade_tables(admin) == {"geotessera/2024": True}
        assert killed.exists()  # kept: it may be the live upgrade's
    assert [p.name for p in admin.glob(".knn-upgrade-*")] == [killed.name]  # its own is gone
    assert upgrade_tables(admin) == {"geotessera/2024": False}  # current now: nothing copied
    assert not killed.exists()  # swept once no other upgrade was live
    pointer = read_pointer(root, "geotessera/2024")
    assert pointer is not None
    assert pointer["digest"] != old
    replica = TableCache(root, tmp_path / "replica" / "knn").directory_of("geotessera/2024")
    assert replica is not None
    new = V.KnnTable.open(replica)
    assert new.head_blocks is not None
    np.testing.assert_array_equal(np.asarray(new.cells), np.asarray(built.cells))
    np.testing.assert_array_equal(np.asarray(new.vectors), np.asarray(built.vectors))
    ra, rb = new.search_row(7, k=10), built.search_row(7, k=10)  # exact cosine
    np.testing.assert_array_equal(ra.rows, rb.rows)
    np.testing.assert_array_equal(ra.scores, rb.scores)
    other = tmp_path / "other"
    assert upgrade_tables(other) == {"geotessera/2024": False}
    assert not (other / "knn" / "geotessera" / "2024").exists()  # told by its meta: not copied
    assert _current_on_storage(root, "geotessera/2024") is True
    # a meta.json that is not the one the pointer names (size, hash) is not believed
    root.put(f"knn/geotessera/2024/{pointer['digest']}/meta.json", b'{"n": 1, "d": 128}')
    assert _current_on_storage(root, "geotessera/2024") is False
