"""alembic environment: migrate the connection the memory store passes in (online only)."""

from __future__ import annotations

from alembic import context

from store.memory.migrations import VERSION_TABLE

connection = context.config.attributes.get("connection")
if connection is None:  # pragma: no cover - the store always passes its connection
    raise RuntimeError("run memory migrations through MemoryStore.migrate()")
context.configure(connection=connection, target_metadata=None, version_table=VERSION_TABLE)
with context.begin_transaction():
    context.run_migrations()
