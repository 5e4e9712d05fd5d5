"""Pipeline tests: fail the test that leaves a Dagster instance entered."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest
from dagster._core.storage.defs_state.base import DefsStateStorage


@pytest.fixture(autouse=True)
def _no_dagster_instance_left_entered() -> Iterator[None]:
    """Entering a ``DagsterInstance`` sets Dagster's context-variable "definitions state
    storage" through a generator context manager. ``build_schedule_context`` and
    ``build_sensor_context`` enter an instance from the ref on first use and exit it only
    when the context is closed. A context left open is finalised whenever the garbage
    collector reaches it; the finaliser resets the variable to the storage of the test's
    (by then disposed) instance, and a later ``Definitions`` load fails with "Attempted to
    resolve undefined DagsterInstance weakref" (flaky in CI). Collecting here makes that
    happen at the end of the test that left the context open, which then fails by name.
    Close such contexts with ``with``.
    """
    yield
    gc.collect()
    left = DefsStateStorage.get()
    assert left is None, f"a Dagster instance was left entered ({type(left).__name__})"
