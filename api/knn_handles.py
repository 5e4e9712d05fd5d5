"""The service context's k-NN table handles: the tables' source and the open tables.

A table is opened (memory-mapped) once and reused; at most every ``refresh`` seconds
its directory is resolved again, and a table whose symlink moved (a new table landed)
is reopened. On object storage the source copies tables into a local cache first
(:mod:`store.knn.remote`). The numba-backed modules are imported on first use.
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING

from api.errors import NotFound, Unavailable, store_errors
from store.errors import StoreError

if TYPE_CHECKING:
    from store.knn import KnnTable
    from store.knn.remote import TableSource

__all__ = ["TableHandles"]


class TableHandles:
    """The k-NN tables of one data directory, opened lazily and cached (thread-safe)."""

    def __init__(self, data_dir: Path) -> None:
        self.data_dir = data_dir
        self._lock = threading.Lock()
        self._source: TableSource | None = None
        self._tables: dict[str, tuple[str, KnnTable]] = {}
        self._checked: dict[str, float] = {}

    def source(self, refresh: float) -> TableSource:
        """The tables' source (:func:`store.knn.remote.table_source`), made once."""
        if self._source is None:
            from store.knn.remote import table_source

            with store_errors():
                self._source = table_source(self.data_dir, refresh)
        return self._source

    def table(self, name: str, refresh: float) -> KnnTable:
        """Open (memory-mapped, cached) ``knn/geotessera/<year>`` or ``knn/geotessera.multi_year``.

        Raises:
            NotFound: no such table (``no_table``).
            Unavailable: the table is malformed, or its copy from object storage failed.
        """
        now = time.monotonic()
        with self._lock:
            cached = self._tables.get(name)
            if cached is not None and now - self._checked.get(name, 0.0) < refresh:
                return cached[1]
        with store_errors():
            directory = self.source(refresh).directory_of(name)
        if directory is None:
            raise NotFound(f"no k-NN table {name!r} in the store", code="no_table")
        resolved = os.path.realpath(directory)
        if cached is not None and cached[0] == resolved:
            with self._lock:
                self._checked[name] = now
            return cached[1]
        from store.knn import KnnTable

        try:
            table = KnnTable.open(directory)
        except StoreError as exc:
            raise Unavailable(str(exc), code="vector_table_error") from exc
        with self._lock:
            self._tables[name] = (str(table.path), table)
            self._checked[name] = now
        return table
