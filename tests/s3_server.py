"""A throwaway S3-compatible server on loopback for the tests: moto in server mode.

``moto_server`` runs as its own process on 127.0.0.1 (a free port), so the code under
test talks to it over HTTP exactly as to S3; :func:`s3_env` is the environment a process
needs to use it (credentials, region, endpoint — never written to a file).

moto 5.2.5 implements the conditional writes icechunk relies on (``If-None-Match: *`` and
``If-Match`` on PutObject and CompleteMultipartUpload, 412 PreconditionFailed otherwise);
its check and its write are two steps in a threaded server, not one atomic operation, so
it orders commits that race over the network but is not a proof of S3's atomicity.
"""

from __future__ import annotations

import socket
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

MOTO = str(Path(sys.executable).with_name("moto_server"))


@dataclass
class S3Server:
    """A running moto server."""

    endpoint: str
    process: subprocess.Popen[bytes]

    def env(self) -> dict[str, str]:
        """What a process needs to use this server through ``s3://`` URLs."""
        return {
            "AWS_ACCESS_KEY_ID": "earthmem-test",
            "AWS_SECRET_ACCESS_KEY": "earthmem-test-secret",
            "AWS_REGION": "us-east-1",
            "AWS_ENDPOINT_URL": self.endpoint,
        }

    def create_bucket(self, name: str) -> None:
        import boto3

        boto3.client("s3", **_client_args(self)).create_bucket(Bucket=name)

    def keys(self, bucket: str, prefix: str = "") -> list[str]:
        import boto3

        pages = boto3.client("s3", **_client_args(self)).get_paginator("list_objects_v2")
        return [
            o["Key"]
            for p in pages.paginate(Bucket=bucket, Prefix=prefix)
            for o in p.get("Contents", [])
        ]

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def _client_args(server: S3Server) -> dict[str, str]:
    env = server.env()
    return {
        "endpoint_url": server.endpoint,
        "aws_access_key_id": env["AWS_ACCESS_KEY_ID"],
        "aws_secret_access_key": env["AWS_SECRET_ACCESS_KEY"],
        "region_name": env["AWS_REGION"],
    }


def start(log: Path | None = None) -> S3Server:
    """Start ``moto_server`` on a free loopback port and wait until it answers."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    out = open(log, "ab") if log else subprocess.DEVNULL  # noqa: SIM115
    proc = subprocess.Popen([MOTO, "-H", "127.0.0.1", "-p", str(port)], stdout=out, stderr=out)
    endpoint = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while True:
        try:
            urllib.request.urlopen(f"{endpoint}/moto-api/", timeout=2).close()
            return S3Server(endpoint, proc)
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                raise RuntimeError(f"moto_server did not start on {endpoint}") from None
            time.sleep(0.2)
