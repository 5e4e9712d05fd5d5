"""store/memo.py: the bounded memo behind the context's per-cell series and the fact records."""

from __future__ import annotations

import pytest

from store.memo import BoundedMemo


def test_memo_remembers_drops_the_least_recent_and_not_errors() -> None:
    memo = BoundedMemo(2)
    made: list[str] = []

    def make(key: str) -> str:
        made.append(key)
        return key.upper()

    assert memo.get("a", lambda: make("a")) == "A"
    assert memo.get("b", lambda: make("b")) == "B"
    assert memo.get("a", lambda: make("a")) == "A"  # remembered; now the most recent
    assert memo.get("c", lambda: make("c")) == "C"  # drops b, the least recent
    assert len(memo) == 2
    assert memo.get("a", lambda: make("a")) == "A"
    assert memo.get("b", lambda: make("b")) == "B"  # made again
    assert made == ["a", "b", "c", "b"]

    def fail() -> str:
        raise ValueError("no")

    with pytest.raises(ValueError, match="no"):
        memo.get("d", fail)
    assert memo.get("d", lambda: make("d")) == "D"  # the error was not remembered


def test_memo_does_not_remember_what_remember_refuses() -> None:
    memo = BoundedMemo(4)
    made: list[int] = []

    def make(n: int) -> int:
        made.append(n)
        return n

    def small(v: int) -> bool:
        return v < 10

    assert memo.get(1, lambda: make(1), remember=small) == 1
    assert memo.get(1, lambda: make(1), remember=small) == 1  # remembered
    assert memo.get(50, lambda: make(50), remember=small) == 50
    assert memo.get(50, lambda: make(50), remember=small) == 50  # made again
    assert made == [1, 50, 50]
    assert len(memo) == 1


def test_memo_put_replaces_and_keeps_the_bound() -> None:
    memo = BoundedMemo(2)
    memo.put("a", 1)
    memo.put("b", 2)
    memo.put("a", 3)  # replaced, and now the most recent
    assert memo.get("a", lambda: 0) == 3
    memo.put("c", 4)  # drops b, the least recent
    assert len(memo) == 2
    assert memo.get("b", lambda: 5) == 5
