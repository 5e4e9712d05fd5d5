"""The process-wide worker threads of the store's compiled and decode work.

One pool per process, one thread per core (at most 4), created on first use.
Chunk decoding and the area statistics kernels release the GIL, so their work
runs here while the calling thread goes on; sharing one pool keeps the number
of busy threads bounded by the cores whatever mix of requests is running.
"""

from __future__ import annotations

import os
import threading
from concurrent.futures import ThreadPoolExecutor

__all__ = ["MAX_WORKERS", "worker_pool"]

MAX_WORKERS = 4
"""Upper bound of the pool's threads."""

_POOL: list[ThreadPoolExecutor] = []
_LOCK = threading.Lock()


def worker_pool() -> ThreadPoolExecutor:
    """The process-wide pool (one thread per core, at most :data:`MAX_WORKERS`)."""
    with _LOCK:
        if not _POOL:
            workers = max(1, min(MAX_WORKERS, os.cpu_count() or 1))
            _POOL.append(ThreadPoolExecutor(workers, thread_name_prefix="earthmem-worker"))
        return _POOL[0]
