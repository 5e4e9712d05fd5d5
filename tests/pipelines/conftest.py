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

    The collection looks only at what the test allocated: what existed before it (the
    session's fixtures, the imported modules) is frozen (``gc.freeze``) while it runs, and
    thawed afterwards. A full collection of a worker's heap took ~1 s after every one of
    ~190 tests (0.3 s in a lone run of one module).
    """
    gc.freeze()
    try:
        yield
        gc.collect()
    finally:
        gc.unfreeze()
    left = DefsStateStorage.get()
    assert left is None, f"a Dagster instance was left entered ({type(left).__name__})"
