"""Plain objects under the object-storage data root (``s3://bucket/prefix``).

The cube lives there through icechunk's own storage (:mod:`store.snapshots`). What is not
part of the cube but must be shared by every machine of a deployment — the k-NN tables
(:mod:`store.knn.remote`) — is stored as plain objects under the same root, through this
module: get, put, upload, download, list and delete, relative to the root.

Credentials, region and endpoint come from the ``AWS_*`` environment only, as for the cube
(``AWS_ACCESS_KEY_ID``/``AWS_SECRET_ACCESS_KEY``/``AWS_SESSION_TOKEN`` through boto3's own
chain, ``AWS_REGION`` or ``AWS_DEFAULT_REGION``, ``AWS_ENDPOINT_URL_S3`` or
``AWS_ENDPOINT_URL``); nothing is read from or written to a file. A request that cannot
reach the storage, or that it refuses, is a typed :class:`~store.errors.StorageUnavailable`.
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from store.errors import StorageUnavailable, UnsupportedStorage

__all__ = ["ObjectRoot"]

_CLIENTS: dict[tuple[str | None, str | None], Any] = {}
_CLIENTS_LOCK = threading.Lock()
_MISSING = ("NoSuchKey", "404", "NotFound")


def _client() -> Any:
    """One boto3 S3 client per (endpoint, region) of the environment (clients are thread-safe)."""
    endpoint = os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL") or None
    region = os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION") or None
    with _CLIENTS_LOCK:
        client = _CLIENTS.get((endpoint, region))
        if client is None:
            import boto3
            from botocore.config import Config

            config = Config(
                connect_timeout=5,
                read_timeout=60,
                retries={"max_attempts": 3, "mode": "standard"},
                # an endpoint named explicitly (MinIO, moto, a gateway) is addressed by path,
                # as the cube's storage does
                s3={"addressing_style": "path" if endpoint else "auto"},
            )
            client = boto3.session.Session().client(
                "s3", endpoint_url=endpoint, region_name=region, config=config
            )
            _CLIENTS[(endpoint, region)] = client
        return client


def _errors() -> tuple[type[BaseException], ...]:
    """What a boto3 call raises when the storage cannot be reached or refuses (imported late:
    a deployment without object storage never imports boto3)."""
    from boto3.exceptions import Boto3Error
    from botocore.exceptions import BotoCoreError, ClientError

    return (BotoCoreError, ClientError, Boto3Error, OSError)


def _unavailable(what: str, exc: BaseException) -> StorageUnavailable:
    text = str(exc).strip().splitlines()
    return StorageUnavailable(f"object storage {what} failed: {text[0] if text else exc!r}")


def _is_missing(exc: BaseException | dict[str, Any]) -> bool:
    response = exc if isinstance(exc, dict) else getattr(exc, "response", None) or {}
    error = response.get("Error", {})
    return str(error.get("Code", "")) in _MISSING


@dataclass(frozen=True)
class ObjectRoot:
    """A bucket and key prefix: the data root on object storage. Keys are given relative to it."""

    bucket: str
    prefix: str
    """Key prefix without leading or trailing ``/`` (may be empty)."""

    @classmethod
    def from_url(cls, url: str) -> ObjectRoot:
        """Parse ``s3://bucket[/prefix]``.

        Raises:
            UnsupportedStorage: Not an ``s3://`` URL with a bucket.
        """
        if not url.startswith("s3://"):
            raise UnsupportedStorage(f"object storage URL must be s3://bucket[/prefix]: {url!r}")
        bucket, _, prefix = url[len("s3://") :].partition("/")
        if not bucket:
            raise UnsupportedStorage(f"S3 URL without a bucket: {url!r}")
        return cls(bucket, prefix.strip("/"))

    @property
    def url(self) -> str:
        """``s3://bucket/prefix``."""
        return f"s3://{self.bucket}/{self.prefix}".rstrip("/")

    def key(self, rel: str) -> str:
        """The full object key of a key relative to the root."""
        return f"{self.prefix}/{rel}" if self.prefix else rel

    def get(self, rel: str) -> bytes | None:
        """An object's bytes, or None when there is no such object.

        Raises:
            StorageUnavailable: The storage could not be read.
        """
        try:
            out = _client().get_object(Bucket=self.bucket, Key=self.key(rel))
            return bytes(out["Body"].read())
        except _errors() as exc:
            if _is_missing(exc):
                return None
            raise _unavailable(f"read of {self.url}/{rel}", exc) from exc

    def put(self, rel: str, data: bytes) -> None:
        """Write one object (a single PUT: readers see the old or the new bytes, never a mix).

        Raises:
            StorageUnavailable: The storage refused the write.
        """
        try:
            _client().put_object(Bucket=self.bucket, Key=self.key(rel), Body=data)
        except _errors() as exc:
            raise _unavailable(f"write of {self.url}/{rel}", exc) from exc

    def upload(self, rel: str, path: Path) -> None:
        """Write a local file as one object (multipart for large files, completed at once).

        Raises:
            StorageUnavailable: The storage refused the write.
        """
        try:
            _client().upload_file(str(path), self.bucket, self.key(rel))
        except _errors() as exc:
            raise _unavailable(f"upload of {self.url}/{rel}", exc) from exc

    def download(self, rel: str, path: Path) -> bool:
        """Copy an object into a local file; False when there is no such object.

        Raises:
            StorageUnavailable: The storage could not be read.
        """
        try:
            _client().download_file(self.bucket, self.key(rel), str(path))
            return True
        except _errors() as exc:
            if _is_missing(exc):
                return False
            raise _unavailable(f"download of {self.url}/{rel}", exc) from exc

    def keys(self, rel_prefix: str) -> list[str]:
        """Keys under a relative prefix, relative to the root, sorted.

        Raises:
            StorageUnavailable: The storage could not be listed.
        """
        full = self.key(rel_prefix)
        cut = len(self.prefix) + 1 if self.prefix else 0
        try:
            pages = (
                _client().get_paginator("list_objects_v2").paginate(Bucket=self.bucket, Prefix=full)
            )
            return sorted(o["Key"][cut:] for p in pages for o in p.get("Contents", []))
        except _errors() as exc:
            raise _unavailable(f"listing of {self.url}/{rel_prefix}", exc) from exc

    def delete(self, rels: list[str]) -> None:
        """Delete objects (missing ones are no error).

        Raises:
            StorageUnavailable: The storage refused the deletion.
        """
        refused: list[dict[str, Any]] = []
        try:
            for i in range(0, len(rels), 1000):
                batch = [{"Key": self.key(r)} for r in rels[i : i + 1000]]
                out = _client().delete_objects(Bucket=self.bucket, Delete={"Objects": batch})
                refused += [e for e in out.get("Errors", []) if not _is_missing({"Error": e})]
        except _errors() as exc:
            raise _unavailable(f"deletion under {self.url}", exc) from exc
        if refused:
            first = refused[0]
            raise StorageUnavailable(
                f"object storage refused deleting {first.get('Key')} under {self.url}: "
                f"{first.get('Message') or first.get('Code')}"
            )
