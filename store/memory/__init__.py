"""The memory store: typed, place-anchored memories that agents write, in a real database.

* :mod:`store.memory.model` — the item and its parts (frozen dataclasses);
* :mod:`store.memory.interface` — the storage interface (:class:`MemoryStore`);
* :mod:`store.memory.sql` — its implementation over SQLAlchemy Core, shared by
* :mod:`store.memory.sqlite` (embedded default, WAL, FTS5, R*Tree) and
  :mod:`store.memory.postgres` (a server: several API processes or machines);
* :mod:`store.memory.migrations` — alembic migrations for both.
"""
