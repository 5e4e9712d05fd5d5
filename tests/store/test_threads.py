"""The process-wide worker pool: one pool, created once, at most MAX_WORKERS threads."""

from __future__ import annotations

import threading

from store import threads


def test_one_pool_for_the_process() -> None:
    pools: list[object] = []
    starters = [
        threading.Thread(target=lambda: pools.append(threads.worker_pool())) for _ in range(8)
    ]
    for t in starters:
        t.start()
    for t in starters:
        t.join()
    assert len({id(p) for p in pools}) == 1
    assert pools[0] is threads.worker_pool()


def test_pool_size_and_work() -> None:
    pool = threads.worker_pool()
    assert 1 <= pool._max_workers <= min(threads.MAX_WORKERS, threads.core_count())
    assert pool.submit(sum, [1, 2, 3]).result() == 6
