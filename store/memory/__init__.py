"""The memory store: typed, place-anchored memories that agents write, in a real database.

* :mod:`store.memory.model` — the item and its parts (frozen dataclasses);
* :mod:`store.memory.interface` — the storage interface (:class:`MemoryStore`);
* :mod:`store.memory.sql` — its implementation over SQLAlchemy Core, shared by
* :mod:`store.memory.sqlite` (embedded default, WAL, FTS5, R*Tree) and
  :mod:`store.memory.postgres` (a server: several API processes or machines);
* :mod:`store.memory.migrations` — alembic migrations for both.
"""

from __future__ import annotations

import os
from pathlib import Path

from store.errors import MemoryBackendUnavailable
from store.memory.interface import MemoryStore

__all__ = ["DEFAULT_FILE", "MEMORY_URL_ENV", "MemoryStore", "default_url", "open_store"]

MEMORY_URL_ENV = "EARTHMEM_MEMORY_URL"
"""Environment variable naming the memory database (read by the caller, never at import)."""

DEFAULT_FILE = "memory.sqlite"
"""The embedded database's file under the data directory."""


def default_url(data_dir: str | os.PathLike[str]) -> str:
    """``sqlite:///<data_dir>/memory.sqlite``: the embedded default."""
    return f"sqlite:///{Path(data_dir).resolve() / DEFAULT_FILE}"


def open_store(url: str) -> MemoryStore:
    """Open the memory store at ``sqlite:///<path>`` or ``postgresql://...``.

    Raises:
        MemoryBackendUnavailable: an unknown scheme, or a database that cannot be opened.
    """
    if url.startswith("sqlite:///"):
        from store.memory.sqlite import SqliteMemoryStore  # the backend modules load drivers

        return SqliteMemoryStore(url)
    if url.startswith(("postgresql://", "postgres://", "postgresql+psycopg://")):
        from store.memory.postgres import PostgresMemoryStore

        return PostgresMemoryStore(url)
    raise MemoryBackendUnavailable(
        f"memory database URL must be sqlite:///<path> or postgresql://..., got {url[:80]!r}"
    )
