"""Alembic migrations of the memory database (both backends), run by ``MemoryStore.migrate()``.

``env.py`` runs on the connection the store hands over (``config.attributes["connection"]``),
inside the store's own transaction (serialised against concurrent migrations), with the
version table ``memory_schema_version`` (so the memory schema can share a PostgreSQL
database with other alembic users, e.g. Dagster's). Revisions live in ``versions/``;
a revision that differs per backend branches on ``op.get_bind().dialect.name``.
"""

from pathlib import Path

__all__ = ["SCRIPT_LOCATION", "VERSION_TABLE"]

SCRIPT_LOCATION = str(Path(__file__).resolve().parent)
"""alembic's ``script_location`` (this directory)."""

VERSION_TABLE = "memory_schema_version"
"""The table where alembic records the applied revision."""
