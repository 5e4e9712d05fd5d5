"""WriteBehind: weekly writes run in order on one thread behind the reads, and never get lost."""

from __future__ import annotations

import threading
import time

import pytest

from pipelines.scenes import WriteBehind


def test_writes_run_in_order_off_the_calling_thread_and_report_their_snapshots() -> None:
    order: list[str] = []
    threads: set[int] = set()

    def write(week: str) -> str:
        time.sleep(0.01)
        order.append(week)
        threads.add(threading.get_ident())
        return f"snap-{week}"

    weeks = [f"2024-01-{d:02d}" for d in range(1, 8)]
    with WriteBehind() as behind:
        for w in weeks:
            behind.submit(w, lambda w=w: write(w))
    assert order == weeks
    assert len(threads) == 1
    assert threading.get_ident() not in threads
    assert behind.results() == {w: f"snap-{w}" for w in weeks}


def test_at_most_depth_writes_are_pending() -> None:
    running = threading.Event()
    release = threading.Event()

    def slow() -> str:
        running.set()
        release.wait(5)
        return "a"

    with WriteBehind(depth=1) as behind:
        behind.submit("a", slow)
        running.wait(5)
        t = threading.Timer(0.2, release.set)
        t0 = time.perf_counter()  # before the timer starts: it cannot fire within 0.2 s of t0
        t.start()
        behind.submit("b", lambda: "b")  # waits for "a" first
        assert time.perf_counter() - t0 >= 0.15
        assert behind.results() == {"a": "a"}
    assert behind.results() == {"a": "a", "b": "b"}


def test_a_failed_write_stops_the_range_at_the_next_submit() -> None:
    done: list[str] = []

    def boom() -> str:
        raise RuntimeError("commit failed")

    def run() -> None:
        with WriteBehind() as behind:
            behind.submit("w1", boom)
            behind.submit("w2", lambda: done.append("w2") or "s2")  # raises: w1 failed
            behind.submit("w3", lambda: done.append("w3") or "s3")

    with pytest.raises(RuntimeError, match="commit failed"):
        run()
    assert done == []


def test_a_failed_last_write_raises_on_exit() -> None:
    def boom() -> str:
        raise ValueError("disk full")

    behind = WriteBehind()

    def run() -> None:
        with behind:
            behind.submit("w1", lambda: "s1")
            behind.submit("w2", boom)

    with pytest.raises(ValueError, match="disk full"):
        run()
    assert behind.results() == {"w1": "s1"}


def test_an_error_in_the_body_still_lets_handed_over_weeks_commit() -> None:
    committed: list[str] = []

    def write() -> str:
        time.sleep(0.05)
        committed.append("w1")
        return "s1"

    behind = WriteBehind()

    def run() -> None:
        with behind:
            behind.submit("w1", write)
            raise KeyError("reading the next week failed")

    with pytest.raises(KeyError, match="next week"):
        run()
    assert committed == ["w1"]
    assert behind.results() == {"w1": "s1"}


def test_submit_outside_the_block_is_an_error() -> None:
    behind = WriteBehind()
    with pytest.raises(RuntimeError, match="outside its with block"):
        behind.submit("w", lambda: "s")
    with pytest.raises(ValueError, match="depth"):
        WriteBehind(depth=0)
