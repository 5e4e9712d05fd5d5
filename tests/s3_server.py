"""A throwaway S3-compatible server on loopback for the tests: moto in server mode.

``moto_server`` runs as its own process on 127.0.0.1 (a free port), so the code under
test talks to it over HTTP exactly as to S3; :func:`s3_env` is the environment a process
needs to use it (credentials, region, endpoint — never written to a file).

moto 5.2.5 implements the conditional writes icechunk relies on (``If-None-Match: *`` and
``If-Match`` on PutObject, ``If-None-Match: *`` on CompleteMultipartUpload; 412
PreconditionFailed otherwise), but its check and its write are two steps in a threaded
server: two commits that race can both pass the check and both land. The server runs through :mod:`tests.moto_atomic`, which
makes each conditional write one step, as S3 does.
"""

from __future__ import annotations

import socket
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

MOTO = [sys.executable, "-P", str(Path(__file__).with_name("moto_atomic.py"))]
"""``moto_server`` with atomic conditional writes (:mod:`tests.moto_atomic`)."""


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

    def get(self, bucket: str, key: str) -> bytes:
        """One object's bytes."""
        import boto3

        body = boto3.client("s3", **_client_args(self)).get_object(Bucket=bucket, Key=key)["Body"]
        return bytes(body.read())

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
    proc = subprocess.Popen([*MOTO, "-H", "127.0.0.1", "-p", str(port)], stdout=out, stderr=out)
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


class FaultProxy:
    """A loopback HTTP proxy in front of an S3 server that lets reads through and fails writes:
    ``mode="refuse"`` answers every PUT, POST and DELETE ``403 AccessDenied`` (a bucket policy
    or credentials that may only read); ``mode="stall"`` never answers them (a store that
    stops responding); ``"stall_all"`` answers nothing; ``"pass"`` forwards everything.
    :attr:`mode` may change while it runs. Point ``AWS_ENDPOINT_URL`` at :attr:`endpoint`.
    """

    def __init__(self, target: str, mode: str) -> None:
        import http.client
        import threading
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
        from urllib.parse import urlsplit

        if mode not in self.MODES:
            raise ValueError(mode)
        self.mode = mode
        """What the proxy does now (one of :attr:`MODES`)."""
        up = urlsplit(target)
        stop = threading.Event()
        self._stop = stop
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: object) -> None:  # quiet
                return

            def _body(self) -> bytes:
                if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
                    parts: list[bytes] = []
                    while True:
                        size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                        if size == 0:
                            while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                                pass
                            return b"".join(parts)
                        parts.append(self.rfile.read(size))
                        self.rfile.readline()
                return self.rfile.read(int(self.headers.get("Content-Length") or 0))

            def _stall(self) -> None:
                """Answer nothing until the proxy stops, then drop the connection (the
                client's abandoned call then fails and its thread ends)."""
                stop.wait(600)
                self.close_connection = True

            def _forward(self) -> None:
                if proxy.mode == "stall_all":
                    self._body()
                    return self._stall()
                self._send(self._body())

            def _send(self, body: bytes) -> None:
                conn = http.client.HTTPConnection(up.hostname or "127.0.0.1", up.port, timeout=60)
                headers = {
                    k: v for k, v in self.headers.items() if k.lower() != "transfer-encoding"
                }
                if body or self.command in ("PUT", "POST"):
                    headers["Content-Length"] = str(len(body))
                try:
                    conn.request(self.command, self.path, body=body, headers=headers)
                    resp = conn.getresponse()
                    data = resp.read()
                    length = resp.getheader("Content-Length") or "0"
                finally:
                    conn.close()
                self.send_response(resp.status, resp.reason)
                for k, v in resp.getheaders():
                    if k.lower() not in ("transfer-encoding", "content-length", "connection"):
                        self.send_header(k, v)
                # a HEAD answer keeps the object's size
                self.send_header(
                    "Content-Length", length if self.command == "HEAD" else str(len(data))
                )
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(data)

            def _fail(self) -> None:
                body = self._body()
                if proxy.mode == "pass":
                    return self._send(body)
                if proxy.mode in ("stall", "stall_all"):
                    return self._stall()
                data = (
                    b'<?xml version="1.0" encoding="UTF-8"?><Error><Code>AccessDenied</Code>'
                    b"<Message>Access Denied</Message></Error>"
                )
                self.send_response(403, "Forbidden")
                self.send_header("Content-Type", "application/xml")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:
                self._forward()

            def do_HEAD(self) -> None:
                self._forward()

            def do_PUT(self) -> None:
                self._fail()

            def do_POST(self) -> None:
                self._fail()

            def do_DELETE(self) -> None:
                self._fail()

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.endpoint = f"http://127.0.0.1:{self._server.server_address[1]}"
        """Where clients send their requests."""
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    MODES = ("pass", "refuse", "stall", "stall_all")

    def stop(self) -> None:
        self._stop.set()
        self._server.shutdown()
        self._server.server_close()
