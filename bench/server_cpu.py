"""A server process's CPU from ``/proc``, and waiting for its start-up warm-up to be over.

``earthmem serve`` answers ``/healthz`` while its background warm-up (the cube reader, the k-NN
tables' imports, then ``gc.freeze``) still runs: ~1.3 s of CPU a worker process. A bench row
whose clock starts before it ends measures the warm-up too. :func:`settle` waits until the
server's CPU idles; :func:`tree_cpu_s` is the CPU it is judged by (a process and its children).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path

__all__ = ["SETTLE_QUIET_CPU_S", "SETTLE_TIMEOUT_S", "SETTLE_WINDOW_S", "settle", "tree_cpu_s"]


def tree_cpu_s(pid: int) -> float:
    """User + system CPU seconds of a process and its descendants (Linux ``/proc``)."""
    tick = os.sysconf("SC_CLK_TCK")
    total, todo, seen = 0.0, [pid], set()
    while todo:
        p = todo.pop()
        if p in seen:
            continue
        seen.add(p)
        try:
            fields = Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()
            total += (int(fields[11]) + int(fields[12])) / tick  # utime, stime
            for task in Path(f"/proc/{p}/task").iterdir():
                todo += [int(c) for c in (task / "children").read_text().split()]
        except (OSError, ValueError, IndexError):
            continue  # a process that ended meanwhile
    return total


SETTLE_WINDOW_S = 0.5
"""How long the server must stay (almost) idle before a row's clock may start."""
SETTLE_QUIET_CPU_S = 0.025
"""CPU seconds within one window below which the server counts as idle (5 %)."""
SETTLE_TIMEOUT_S = 30.0
"""Start anyway after this long (a server that never idles is measured as it is)."""


def settle(
    cpu: Callable[[], float],
    *,
    window_s: float = SETTLE_WINDOW_S,
    quiet_cpu_s: float = SETTLE_QUIET_CPU_S,
    timeout_s: float = SETTLE_TIMEOUT_S,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
) -> bool:
    """Wait until what ``cpu()`` measures (CPU seconds so far) used less than ``quiet_cpu_s``
    in one ``window_s``: a started server's background warm-up has finished. False when it
    did not settle within ``timeout_s``."""
    deadline = clock() + timeout_s
    before = cpu()
    while clock() < deadline:
        sleep(window_s)
        now = cpu()
        if now - before < quiet_cpu_s:
            return True
        before = now
    return False
