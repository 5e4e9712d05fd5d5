"""How this process writes the local Dagster instance's SQLite files (``$DAGSTER_HOME``).

Dagster's SQLite storages open a new engine for every statement group and commit each
event on its own; with SQLite's default ``synchronous=FULL`` every commit, and every
close of the last connection (a WAL checkpoint), waits for the disk. Profiled on the
tiny sample, that fsync traffic was most of an ``earthmem ingest`` (one event costs
several commits). This module sets ``PRAGMA synchronous=OFF`` on the connections this
process opens to SQLite files under the instance's home, and on no other database.

Why that is acceptable here: OFF is safe against a crash of the process (SQLite's
own guarantee); only an operating-system crash or a power cut in the seconds after a
write can lose or damage recent *run history*. The run history is not the data: the
cube (icechunk), its scene inventory and the memory database keep their own
durability and are not touched, and the STAC sensor and ``earthmem ingest`` start from
the cube's inventory, not from Dagster's records, so a damaged home can be deleted
and rebuilt by re-ingesting without losing anything stored. Deployments that need
durable run history use PostgreSQL for Dagster's storage.

:func:`install` is idempotent and runs when :mod:`pipelines.instance` is imported,
so the CLI's ingest, the code server and the run workers of ``make dagster`` apply
it (Dagster's own webserver and daemon processes keep SQLite's defaults).
"""

from __future__ import annotations

import functools
import os
import sqlite3
from pathlib import Path
from typing import Any

from sqlalchemy import event
from sqlalchemy.engine import Engine

__all__ = ["PRAGMA", "install", "is_instance_file"]

PRAGMA = "PRAGMA synchronous=OFF"
"""What a connection to the instance's SQLite files runs when it opens."""

_installed = False


@functools.lru_cache(maxsize=4096)
def is_instance_file(path: str, home: str | None) -> bool:
    """Whether a SQLite database file lies under the Dagster home ``home``.

    Remembered per (file, home): Dagster opens a connection per statement group.
    """
    root = home
    if not root or not path:
        return False
    try:
        return Path(path).resolve().is_relative_to(Path(root).resolve())
    except OSError:
        return False


def _on_connect(dbapi_connection: Any, _record: Any) -> None:
    if not isinstance(dbapi_connection, sqlite3.Connection):
        return
    row = dbapi_connection.execute("PRAGMA database_list").fetchone()
    if row is not None and is_instance_file(row[2], os.environ.get("DAGSTER_HOME")):
        dbapi_connection.execute(PRAGMA)


def install() -> None:
    """Apply :data:`PRAGMA` to every SQLite connection this process opens under the home."""
    global _installed
    if not _installed:
        event.listen(Engine, "connect", _on_connect)
        _installed = True
