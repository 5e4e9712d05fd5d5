"""The memory store: typed, place-anchored memories that agents write, in a real database.

* :mod:`store.memory.model` — the item and its parts (frozen dataclasses);
* :mod:`store.memory.interface` — the storage interface (:class:`MemoryStore`);
* :mod:`store.memory.group` — group commit of concurrent writes (a savepoint each);
* :mod:`store.memory.writer` — the connection the group commit's batches run on, kept open;
* :mod:`store.memory.prepared` — the write path's statements, compiled once;
* :mod:`store.memory.sql` — its implementation over SQLAlchemy Core, shared by
* :mod:`store.memory.sqlite` (embedded default, WAL, FTS5, R*Tree) and
  :mod:`store.memory.postgres` (a server: several API processes or machines);
* :mod:`store.memory.migrations` — alembic migrations for both.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

from store.errors import InvalidMemoryUrl
from store.memory.interface import MemoryStore

if TYPE_CHECKING:
    from store.memory.postgres import PostgresMemoryStore
    from store.memory.sqlite import SqliteMemoryStore

__all__ = ["DEFAULT_FILE", "MEMORY_URL_ENV", "URL_ENV", "backend", "default_url", "open_store"]

DEFAULT_FILE = "memory.sqlite"
"""The embedded database's file name under the data directory."""

URL_ENV = "EARTHMEM_MEMORY_URL"
"""Environment variable the *caller* (CLI, server) reads to choose the database (never read here)."""
MEMORY_URL_ENV = URL_ENV
"""Alias of :data:`URL_ENV`."""


def default_url(data_dir: str | os.PathLike[str]) -> str:
    """``sqlite:///<data_dir>/memory.sqlite`` (absolute): the embedded default."""
    return f"sqlite:///{(Path(data_dir).resolve() / DEFAULT_FILE).as_posix()}"


def _scheme(url: str) -> str:
    return url.split(":", 1)[0].split("+", 1)[0].lower()


def backend(url: str) -> type[SqliteMemoryStore] | type[PostgresMemoryStore]:
    """The store class of ``url``'s scheme, its module imported (nothing is opened).

    Importing a backend loads SQLAlchemy's dialect and alembic; a server does it at
    start (:meth:`api.context.ServiceContext.warm`) so its first memory call does not.

    Raises:
        InvalidMemoryUrl: an unknown scheme.
    """
    scheme = _scheme(url)
    if scheme == "sqlite":
        from store.memory.sqlite import SqliteMemoryStore

        return SqliteMemoryStore
    if scheme in ("postgresql", "postgres"):
        from store.memory.postgres import PostgresMemoryStore

        return PostgresMemoryStore
    raise InvalidMemoryUrl(
        f"unknown memory database URL scheme {scheme!r} (use sqlite:/// or postgresql://)"
    )


def open_store(url: str, *, migrate: bool = True) -> MemoryStore:
    """Open the memory store at ``url``, upgrading its schema to the newest revision.

    Args:
        url: ``sqlite:///<path>`` (the file and its directory are created on first
            use) or ``postgresql://user[:password]@host[:port]/database``.
        migrate: Upgrade the schema (idempotent; concurrent openers are serialised).

    Raises:
        InvalidMemoryUrl: an unknown scheme, or a URL its backend does not take.
        MemoryBackendUnavailable: a database that cannot be
            opened or reached.
    """
    cls = backend(url)
    if _scheme(url) != "sqlite":  # postgres:// and postgresql+driver:// as postgresql://
        url = "postgresql" + url[len(url.split(":", 1)[0]) :]
    store: MemoryStore = cls(url)
    if migrate:
        try:
            store.migrate()
        except BaseException:
            store.close()
            raise
    return store
