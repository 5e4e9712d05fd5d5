"""How many costly requests run at once: one bounded gate per cost class.

A primitive declares its cost class with its description (:mod:`api.registry`):
``"light"`` (one cell, one place: bounded by its arguments' caps) or
``"heavy"`` (work that grows with the request: areas, k-NN scans, ``ask``).
:mod:`api.dispatch` runs every heavy call through :data:`HEAVY`, a
:class:`Limiter`: at most ``concurrency`` run at once, at most ``queue`` more
wait (each up to ``wait_s`` seconds) and any other is refused at once with a
typed :class:`~api.errors.Busy` (503, ``retry_after``). The gate is per
process (each server worker has its own). After the last running heavy call
ends, if it ran for at least :data:`TRIM_AFTER_S` and the process's anonymous
resident memory has grown by :data:`TRIM_GROWTH_BYTES` since the last time it
gave memory back, the process gives freed heap pages back to the system (glibc
``malloc_trim``), so a burst of large requests does not leave the server
holding their memory, while the pages an ordinary heavy call reuses stay mapped.

Memory writes are also rate limited per token by a :class:`RateLimiter` (a token
bucket per process: each ``earthmem serve`` worker keeps its own): beyond the rate
a write answers 429 ``rate_limited`` with ``retry_after`` seconds.

Limits come from the environment when the process starts:
``EARTHMEM_HEAVY_CONCURRENCY`` (default 2), ``EARTHMEM_HEAVY_QUEUE`` (default 4)
and ``EARTHMEM_HEAVY_WAIT_S`` (default 10); ``EARTHMEM_WRITE_RATE`` (writes/s per
token, default 50) and ``EARTHMEM_WRITE_BURST`` (default 200) for memory writes
(:meth:`RateLimiter.from_env`). A malformed value falls back to the default.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import math
import os
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from api.errors import ApiError, Busy

__all__ = [
    "DEFAULT_WRITE_BURST",
    "DEFAULT_WRITE_RATE",
    "HEAVY",
    "TRIM_AFTER_S",
    "TRIM_GROWTH_BYTES",
    "Limiter",
    "RateLimiter",
    "anon_rss_bytes",
    "release_memory",
]

DEFAULT_WRITE_RATE = 50.0
"""Memory writes per second a token may sustain (per server process)."""
DEFAULT_WRITE_BURST = 200
"""Memory writes a token may make at once before the rate applies."""

_ALPHA = 0.3  # weight of the latest duration in the running mean

TRIM_AFTER_S = 0.05
"""Heap pages are given back only after a heavy call that ran this long (short calls allocate
little, and trimming after each would cost every small request)."""
TRIM_GROWTH_BYTES = 64 << 20
"""Heap pages are given back only when the anonymous resident memory is also this much above
what it was after the last trim. Trimming after every heavy call gave back the pages the next call needs again: a
warm ~1 km^2 area_over_time then faulted ~6 MB of fresh pages in (~1,400 page faults) and
spent ~20 % more CPU, after each cold call and, once a call took over 50 ms, after every one."""


class Limiter:
    """At most ``concurrency`` holders at once, ``queue`` waiters, the rest refused.

    Args:
        cost_class: Name of the class (in error details).
        concurrency: Calls running at once (>= 1).
        queue: Calls that may wait for a slot (>= 0).
        wait_s: Longest wait for a slot before :class:`~api.errors.Busy`.
        trim: Return freed heap pages to the system when the last holder leaves.
    """

    def __init__(
        self, cost_class: str, concurrency: int, queue: int, wait_s: float, *, trim: bool = True
    ) -> None:
        if concurrency < 1 or queue < 0 or wait_s < 0:
            raise ValueError("concurrency >= 1, queue >= 0 and wait_s >= 0")
        self.cost_class = cost_class
        self.concurrency = concurrency
        self.queue = queue
        self.wait_s = wait_s
        self.trim = trim
        self._cond = threading.Condition()
        self._running = 0
        self._waiting = 0
        self._mean_s = 1.0
        self._rss_after_trim: int | None = None

    def info(self) -> dict[str, Any]:
        """Running and waiting calls and the limits (for health and tests)."""
        with self._cond:
            return {
                "cost_class": self.cost_class,
                "running": self._running,
                "waiting": self._waiting,
                "concurrency": self.concurrency,
                "queue": self.queue,
                "wait_s": self.wait_s,
            }

    def _busy(self, why: str) -> Busy:
        ahead = self._running + self._waiting
        retry = max(1, min(60, math.ceil(self._mean_s * max(1, ahead) / self.concurrency)))
        return Busy(
            f"{self._running} {self.cost_class} requests are running and {self._waiting} waiting "
            f"(limits {self.concurrency} and {self.queue}); {why}: retry after {retry} s",
            details={
                "retry_after": retry,
                "cost_class": self.cost_class,
                "concurrency": self.concurrency,
                "queue": self.queue,
            },
        )

    @contextmanager
    def slot(self) -> Iterator[None]:
        """Hold one slot for the duration of the block.

        Raises:
            Busy: the queue is full, or no slot freed within ``wait_s``.
        """
        with self._cond:
            if self._running >= self.concurrency:
                if self._waiting >= self.queue:
                    raise self._busy("the queue is full")
                self._waiting += 1
                deadline = time.monotonic() + self.wait_s
                try:
                    while self._running >= self.concurrency:
                        left = deadline - time.monotonic()
                        if left <= 0:
                            raise self._busy(f"no slot freed within {self.wait_s:g} s")
                        self._cond.wait(left)
                finally:
                    self._waiting -= 1
            self._running += 1
        start = time.monotonic()
        try:
            yield
        finally:
            with self._cond:
                self._running -= 1
                took = time.monotonic() - start
                self._mean_s = (1 - _ALPHA) * self._mean_s + _ALPHA * took
                last = self._running == 0
                self._cond.notify()
            if last and self.trim and took >= TRIM_AFTER_S:
                self._release()

    def _release(self) -> None:
        """Trim the heap if the memory held grew by :data:`TRIM_GROWTH_BYTES` since the last trim."""
        held = anon_rss_bytes()
        kept = self._rss_after_trim
        if held is not None and kept is not None and held - kept < TRIM_GROWTH_BYTES:
            return
        if release_memory():
            self._rss_after_trim = anon_rss_bytes()


_libc: Any = None
_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def anon_rss_bytes() -> int | None:
    """Anonymous resident memory of this process (``/proc/self/statm``: resident - shared), or None."""
    try:
        with open("/proc/self/statm", "rb") as f:
            fields = f.read().split()
        return (int(fields[1]) - int(fields[2])) * _PAGE
    except (OSError, ValueError, IndexError):
        return None


def release_memory() -> bool:
    """Give freed heap pages back to the system (glibc ``malloc_trim(0)``); false elsewhere."""
    global _libc
    if _libc is None:
        name = ctypes.util.find_library("c")
        try:
            lib = ctypes.CDLL(name) if name else None
            _libc = lib if lib is not None and hasattr(lib, "malloc_trim") else False
        except OSError:
            _libc = False
    if not _libc:
        return False
    _libc.malloc_trim(0)
    return True


def _env_int(name: str, default: int, low: int) -> int:
    try:
        return max(low, int(os.environ.get(name, default)))
    except ValueError:
        return default


def _env_float(name: str, default: float) -> float:
    try:
        value = float(os.environ.get(name, default))
    except ValueError:
        return default
    return value if math.isfinite(value) and value >= 0 else default


HEAVY = Limiter(
    "heavy",
    _env_int("EARTHMEM_HEAVY_CONCURRENCY", 2, 1),
    _env_int("EARTHMEM_HEAVY_QUEUE", 4, 0),
    _env_float("EARTHMEM_HEAVY_WAIT_S", 10.0),
)
"""The gate of the heavy primitives in this process."""


class RateLimiter:
    """Token buckets per key (thread-safe): memory writes per token."""

    def __init__(self, rate: float = DEFAULT_WRITE_RATE, burst: int = DEFAULT_WRITE_BURST) -> None:
        self.rate = float(rate)
        self.burst = int(burst)
        self._lock = threading.Lock()
        self._buckets: dict[str, tuple[float, float]] = {}

    @classmethod
    def from_env(cls) -> RateLimiter:
        """The write limiter of ``EARTHMEM_WRITE_RATE`` / ``EARTHMEM_WRITE_BURST`` (or the defaults)."""
        rate = _env_float("EARTHMEM_WRITE_RATE", DEFAULT_WRITE_RATE)
        burst = _env_int("EARTHMEM_WRITE_BURST", DEFAULT_WRITE_BURST, 0)
        return cls(
            rate if rate > 0 else DEFAULT_WRITE_RATE, burst if burst > 0 else DEFAULT_WRITE_BURST
        )

    def take(self, key: str) -> None:
        """Spend one unit of ``key``'s bucket.

        Raises:
            ApiError: 429 ``rate_limited`` with ``details.retry_after`` (seconds).
        """
        now = time.monotonic()
        with self._lock:
            level, last = self._buckets.get(key, (float(self.burst), now))
            level = min(float(self.burst), level + (now - last) * self.rate)
            if level < 1.0:
                wait = (1.0 - level) / self.rate
                self._buckets[key] = (level, now)
                raise ApiError(
                    "rate_limited",
                    f"write rate above {self.rate:g}/s for this token; retry in {wait:.2f} s",
                    429,
                    {"retry_after": round(wait, 3)},
                )
            self._buckets[key] = (level - 1.0, now)
            if len(self._buckets) > 10_000:
                self._buckets.pop(next(iter(self._buckets)))
