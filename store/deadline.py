"""A deadline on writes and commits to object storage, which may stop answering.

icechunk 1.1's S3 client has no per-operation timeout: a store that accepts a connection and
never answers a ``PUT`` holds the call for ever (measured: > 300 s, with its
``network_stream_timeout_seconds`` at 5 s, which only guards streams that stall mid-body).
:func:`within_deadline` runs such a call on a daemon thread and gives up waiting after
:func:`storage_timeout` seconds (``EARTHMEM_STORAGE_TIMEOUT_SECONDS``, default
:data:`DEFAULT_TIMEOUT_S`), raising :class:`~store.errors.StorageTimeout` to the caller.

The abandoned call is not cancelled (the Rust future cannot be stopped from here): it ends
when the store answers or drops the connection, and its thread with it. Once
:data:`MAX_ABANDONED` such threads wait in a process, a new call fails at once (nothing sent)
until some of them end, so a store that holds connections open for hours cannot make a process
pile up threads: at most :data:`MAX_ABANDONED` plus the calls already in flight when the limit
was reached (bounded by the callers' own threads). Reads through :func:`bounded_sync` leave no
thread (their coroutine ends on zarr's loop) and are not counted. What an abandoned call
means, by the call:

* storing a transaction's or a fork's chunks: they stay unreachable (no commit names them)
  and garbage collection removes them later;
* a commit: the caller is told the outcome is unknown. A commit is atomic, so it either lands
  whole later or never; a rerun of the partition writes the same contents either way.

Callers must not touch the session after a timeout (the abandoned call still holds it, and
icechunk's session waits on its lock: ``has_uncommitted_changes`` would block until the store
answers). Used on object storage only: on local disk a commit holds the host's commit lock, which the caller
would release while the abandoned commit still ran.

Reads (:class:`store.cube.read.CubeReader`: opening a snapshot, its inventory, listing and
fetching chunks) take the same deadline on object storage through :func:`bounded_sync` and
:func:`within_deadline`, so a query server whose store stops answering answers
``storage_timeout`` (503) instead of holding the request; the abandoned read ends when the
store answers or drops the connection.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Coroutine, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

from store.errors import StorageTimeout, UnsupportedStorage

__all__ = [
    "BACKOFF_S",
    "DEFAULT_TIMEOUT_S",
    "MAX_ABANDONED",
    "SENT",
    "TIMEOUT_ENV",
    "UNSENT",
    "Backoff",
    "abandoned_calls",
    "bounded_sync",
    "storage_timeout",
    "within_deadline",
]

T = TypeVar("T")

TIMEOUT_ENV = "EARTHMEM_STORAGE_TIMEOUT_SECONDS"
"""Environment variable: seconds a write or commit to object storage may take."""
DEFAULT_TIMEOUT_S = 300.0
"""Default deadline: well above a partition's chunk upload or a commit on a slow link."""
UNSENT = "nothing committed"
"""The outcome of a timed-out call made before any commit."""
SENT = (
    "the commit was sent and may still land, whole (commits are atomic); rerun the partition"
    " to converge"
)
"""The outcome of a timed-out commit."""


def storage_timeout() -> float:
    """The deadline in seconds (from :data:`TIMEOUT_ENV`, else the default).

    Raises:
        UnsupportedStorage: the setting is not a positive number of seconds.
    """
    text = os.environ.get(TIMEOUT_ENV, "").strip()
    if not text:
        return DEFAULT_TIMEOUT_S
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not (value > 0 and value != float("inf")):
        raise UnsupportedStorage(f"{TIMEOUT_ENV} must be a number of seconds > 0, got {text!r}")
    return value


MAX_ABANDONED = 16
"""Abandoned storage calls (threads still waiting on the store) a process keeps at most."""

_ABANDONED_LOCK = threading.Lock()
_ABANDONED: set[object] = set()
"""One token per abandoned call whose thread still waits on the store."""


def abandoned_calls() -> int:
    """Storage calls of this process given up on whose threads still wait on the store."""
    return len(_ABANDONED)


def _timed_out(what: str, timeout: float, outcome: str) -> StorageTimeout:
    return StorageTimeout(
        f"{what}: the object store did not answer within {timeout:g} s ({TIMEOUT_ENV}); {outcome}"
    )


def within_deadline(call: Callable[[], T], what: str, outcome: str, *, remote: bool = True) -> T:
    """``call()``, or :class:`StorageTimeout` when it has not returned within the deadline.

    Args:
        call: The storage call (its exceptions propagate unchanged).
        what: What it does, for the message (``"storing the chunks of 'p'"``).
        outcome: What the caller may assume after a timeout (``"nothing committed"``).
        remote: Whether the store is object storage; ``False`` calls ``call()`` directly (on
            local disk a commit holds the host's commit lock, which a caller given up on
            would release while the abandoned commit still ran).

    Raises:
        StorageTimeout: The call did not return in time (``outcome`` holds); or
            :data:`MAX_ABANDONED` earlier calls still wait on the store, and this one was
            not made (calls already past that check when the limit is reached may still
            be abandoned: the bound is the limit plus the calls in flight).
    """
    if not remote:
        return call()
    timeout = storage_timeout()
    registry = _ABANDONED  # this call's, whatever the module's is when its thread ends
    waiting = len(registry)
    if waiting >= MAX_ABANDONED:
        raise StorageTimeout(
            f"{what}: {waiting} earlier calls to the object store have not returned (each"
            f" given up after {timeout:g} s, {TIMEOUT_ENV}); not tried; nothing sent"
        )
    box: dict[str, object] = {}
    token = object()
    done = threading.Event()

    def run() -> None:
        try:
            box["value"] = call()
        except BaseException as exc:  # handed to the waiting caller
            box["error"] = exc
        finally:
            with _ABANDONED_LOCK:
                done.set()
                registry.discard(token)

    worker = threading.Thread(target=run, name="earthmem-storage-call", daemon=True)
    worker.start()
    worker.join(timeout)
    with _ABANDONED_LOCK:
        if not done.is_set():
            registry.add(token)
            raise _timed_out(what, timeout, outcome)
    if "error" in box:
        raise box["error"]  # type: ignore[misc]
    return box["value"]  # type: ignore[return-value]


def bounded_sync(coro: Coroutine[Any, Any, T], remote: bool, what: str) -> T:
    """zarr's ``sync(coro)``; on object storage (``remote``) with the deadline, past which the
    caller gets :class:`StorageTimeout` (the coroutine is left to end on zarr's loop)."""
    from zarr.core.sync import sync  # deferred: describing the API loads no storage library

    if not remote:
        return sync(coro)
    timeout = storage_timeout()
    try:
        return sync(coro, timeout=timeout)
    except TimeoutError:
        raise _timed_out(what, timeout, "nothing read") from None


BACKOFF_S = 5.0
"""How long :class:`Backoff` fails calls at once after a timeout."""


class Backoff:
    """After a call timed out, the calls of the next :attr:`seconds` fail at once with
    :class:`StorageTimeout` instead of each waiting out its own deadline in turn (callers
    queued behind one that timed out); then one asks the store again."""

    def __init__(self, seconds: float = BACKOFF_S) -> None:
        self.seconds = seconds
        """The back-off after a timeout."""
        self._until = 0.0

    @contextmanager
    def guard(self, what: str) -> Iterator[None]:
        """Fail at once while backing off; start backing off when the block times out."""
        if time.monotonic() < self._until:
            raise StorageTimeout(
                f"{what}: the object store did not answer the last try (within"
                f" {storage_timeout():g} s); retry in a few seconds; nothing read"
            )
        try:
            yield
        except StorageTimeout:
            self._until = time.monotonic() + self.seconds
            raise
