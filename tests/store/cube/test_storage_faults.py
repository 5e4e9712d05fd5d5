"""Object storage that fails: a missing bucket, a server gone before the commit — typed errors.

Against a real S3-compatible server on loopback (moto, tests/s3_server.py).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from store.cube.cooperative import CooperativeCommit, write_in_fork
from store.cube.write import CubeWriter
from store.errors import StorageUnavailable
from tests import s3_server

pytestmark = pytest.mark.slow  # a moto server process, and the client's retries


@pytest.fixture
def server(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[s3_server.S3Server]:
    srv = s3_server.start(tmp_path / "moto.log")
    for k, v in srv.env().items():
        monkeypatch.setenv(k, v)
    try:
        yield srv
    finally:
        srv.stop()


def test_a_missing_bucket_is_storage_unavailable(
    server: s3_server.S3Server, tmp_path: Path
) -> None:
    with pytest.raises(StorageUnavailable, match="no-such-bucket"):
        CubeWriter(tmp_path, storage="s3://no-such-bucket/cube")


def test_storage_gone_before_the_commit_is_storage_unavailable(
    server: s3_server.S3Server, tmp_path: Path
) -> None:
    server.create_bucket("faults")
    writer = CubeWriter(tmp_path, storage="s3://faults/cube")
    values = np.ones((7, 128, 128))
    with CooperativeCommit(writer) as coop:
        fork = coop.fork()
        written = write_in_fork(
            fork, "p", lambda tx: tx.write("indices.ndvi", np.arange(7), 128000, 256000, values)
        )
        server.stop()
        with pytest.raises(StorageUnavailable, match="nothing committed"):
            coop.commit([written], ["p"], "never lands")
