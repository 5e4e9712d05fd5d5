"""A small bounded, thread-safe memo for values computed from immutable inputs.

The service context keeps one for per-cell series of a snapshot (a snapshot never
changes, so a remembered series is the one a new read would give), one for the
areas of area_over_time calls (an area's cells depend on its geometry only), and
:func:`store.facts.fact_record` one for fact records (a pure function of its
arguments); the least recently used entry is dropped past the bound.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Any

__all__ = ["BoundedMemo"]


class BoundedMemo:
    """``get(key, make)``: the remembered value of ``key``, else ``make()`` remembered.

    Args:
        max_entries: Entries kept (least recently used dropped first).
    """

    def __init__(self, max_entries: int) -> None:
        self.max_entries = int(max_entries)
        self._lock = threading.Lock()
        self._entries: OrderedDict[Hashable, Any] = OrderedDict()

    def get(
        self,
        key: Hashable,
        make: Callable[[], Any],
        remember: Callable[[Any], bool] | None = None,
    ) -> Any:
        """The value of ``key`` (``make()`` runs outside the lock on a miss; an error is not
        remembered, nor a value for which ``remember`` says false)."""
        with self._lock:
            value = self._entries.get(key, _MISSING)
            if value is not _MISSING:
                self._entries.move_to_end(key)
                return value
        value = make()
        if remember is not None and not remember(value):
            return value
        with self._lock:
            self._entries[key] = value
            while len(self._entries) > self.max_entries:
                self._entries.popitem(last=False)
        return value

    def put(self, key: Hashable, value: Any) -> None:
        """Remember ``value`` under ``key`` (replacing what was there)."""
        with self._lock:
            self._entries[key] = value
            self._entries.move_to_end(key)
            while len(self._entries) > self.max_entries:
                self._entries.popitem(last=False)

    def __len__(self) -> int:
        return len(self._entries)


_MISSING = object()
