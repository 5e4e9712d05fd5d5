"""The loopback S3 server orders racing conditional writes as S3 does (:mod:`tests.moto_atomic`)."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from tests import moto_atomic, s3_server


def _race(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, atomic: bool) -> list[str]:
    """Two ``PutObject If-None-Match: *`` of one key at once, each object lookup followed by
    0.5 s: the outcomes."""
    import boto3
    from botocore.exceptions import ClientError

    tmp_path.mkdir(parents=True, exist_ok=True)
    monkeypatch.setenv(moto_atomic.WIDEN_ENV, "0.5")
    monkeypatch.setenv(moto_atomic.ATOMIC_ENV, "1" if atomic else "0")
    server = s3_server.start(tmp_path / "moto.log")
    try:
        server.create_bucket("race-probe")
        client = boto3.client("s3", **s3_server._client_args(server))
        # a first request beforehand: the client's lazy set-up (endpoints, credentials, the
        # connection pool) would otherwise delay one thread's request past the other's window
        client.put_object(Bucket="race-probe", Key="warm-up", Body=b"")
        out: list[str] = []
        go = threading.Barrier(2)

        def put(body: bytes) -> None:
            go.wait()
            try:
                client.put_object(Bucket="race-probe", Key="ref", Body=body, IfNoneMatch="*")
                out.append("ok")
            except ClientError as e:
                out.append(str(e.response["Error"]["Code"]))

        threads = [threading.Thread(target=put, args=(b,)) for b in (b"a", b"b")]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=60)
        return sorted(out)
    finally:
        server.stop()


@pytest.mark.slow  # two moto servers
def test_racing_conditional_writes_one_lands(tmp_path, monkeypatch) -> None:
    # moto alone (5.2.5, pinned): both checks pass before either writes, both writes land;
    # a moto that makes them atomic itself fails here, and this wrapper can then go
    assert _race(tmp_path / "plain", monkeypatch, atomic=False) == ["ok", "ok"]
    # the test server: the later check sees the earlier write
    assert _race(tmp_path / "atomic", monkeypatch, atomic=True) == ["PreconditionFailed", "ok"]
