"""store/deadline.py: calls given up on, and the bound on the threads they leave waiting."""

from __future__ import annotations

import threading
import time

import pytest

from store import deadline
from store.errors import StorageTimeout


def _storage_threads() -> set[threading.Thread]:
    return {t for t in threading.enumerate() if t.name == "earthmem-storage-call"}


@pytest.fixture(autouse=True)
def _own_count(monkeypatch) -> None:
    """This test's own set of abandoned calls (others' threads may still wait in this process)."""
    monkeypatch.setattr(deadline, "_ABANDONED", set())


def test_a_call_in_time_returns_its_value_or_raises_its_error(monkeypatch) -> None:
    monkeypatch.setenv(deadline.TIMEOUT_ENV, "5")
    assert deadline.within_deadline(lambda: 42, "reading", deadline.UNSENT) == 42

    def fail() -> None:
        raise KeyError("gone")

    with pytest.raises(KeyError, match="gone"):
        deadline.within_deadline(fail, "reading", deadline.UNSENT)
    assert deadline.abandoned_calls() == 0


def test_abandoned_calls_are_bounded_and_counted_until_they_end(monkeypatch) -> None:
    """A store that never answers: each call is given up after the deadline, its thread left
    waiting; past MAX_ABANDONED waiting threads a call fails at once, without being made;
    once the store answers, the threads end and calls are made again."""
    monkeypatch.setenv(deadline.TIMEOUT_ENV, "0.05")
    monkeypatch.setattr(deadline, "MAX_ABANDONED", 2)
    store_answers = threading.Event()
    made: list[int] = []

    def hang(i: int) -> int:
        made.append(i)
        store_answers.wait(30)
        return i

    try:
        for i in range(2):
            with pytest.raises(StorageTimeout, match=r"did not answer within 0\.05 s"):
                deadline.within_deadline(lambda i=i: hang(i), f"call {i}", deadline.UNSENT)
        assert deadline.abandoned_calls() == 2
        before = _storage_threads()
        with pytest.raises(StorageTimeout, match=r"2 earlier calls .* not tried; nothing sent"):
            deadline.within_deadline(lambda: hang(9), "call 9", deadline.UNSENT)
        assert made == [0, 1]  # the third was never made
        assert _storage_threads() <= before  # and started no thread
    finally:
        store_answers.set()
    end = time.monotonic() + 10
    while deadline.abandoned_calls() and time.monotonic() < end:
        time.sleep(0.01)
    assert deadline.abandoned_calls() == 0
    assert deadline.within_deadline(lambda: hang(3), "call 3", deadline.UNSENT) == 3
