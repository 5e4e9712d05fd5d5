"""Recall tests that run the whole call on both memory backends."""

from __future__ import annotations

import pytest

__all__ = ["BOTH_BACKENDS"]

BOTH_BACKENDS = pytest.mark.parametrize(
    "memory_url", ["sqlite", "postgresql"], indirect=True, ids=["sqlite", "postgresql"]
)
"""Run a test (through the ``memory_url`` fixture) on SQLite and on PostgreSQL."""
