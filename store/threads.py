"""The process-wide worker threads.

One pool for the whole process, so that code paths running work off the
calling thread (chunk decoding, per-scene statistics) share the cores instead
of each growing its own pool. The work handed to it must release the GIL
(compiled kernels, codecs, numpy sorts) to gain anything, and must not wait
on other work submitted to the same pool.
"""

from __future__ import annotations

import os
import threading
from concurrent.futures import ThreadPoolExecutor

__all__ = ["MAX_WORKERS", "core_count", "worker_pool"]

MAX_WORKERS = 4
"""Most threads in the pool, whatever the core count."""

_POOL: list[ThreadPoolExecutor] = []
_POOL_LOCK = threading.Lock()


def core_count() -> int:
    """Cores the process may use (at least 1)."""
    return os.cpu_count() or 1


def worker_pool() -> ThreadPoolExecutor:
    """The process-wide pool: one thread per core, at most :data:`MAX_WORKERS`.

    Created on first use, under a lock, and kept for the life of the process.
    """
    with _POOL_LOCK:
        if not _POOL:
            workers = max(1, min(MAX_WORKERS, core_count()))
            _POOL.append(ThreadPoolExecutor(workers, thread_name_prefix="earthmem-worker"))
        return _POOL[0]
