"""Where a run's scene work executes: in the run's own process, or on a Dask cluster.

:func:`choose_executor` is the one place that decides, from the run's ``dask`` resource
(:class:`DaskResource`) and the environment read at run time:

- ``EARTHMEM_INGEST_EXECUTOR``: ``local`` (the default: the run's process reads each week
  and commits it behind the next read) or ``dask``;
- ``EARTHMEM_DASK_SCHEDULER``: the address of a running Dask scheduler (``tcp://host:8786``);
  setting it implies ``dask``. Without it, ``dask`` starts a ``LocalCluster`` of worker
  processes on this machine, once per process;
- ``EARTHMEM_DASK_WORKERS``: that LocalCluster's worker processes (default 2), started with
  :data:`CLUSTER_CONFIG` (glibc's malloc defaults, no profiler, slow house-keeping loops).

The Dask client is a resource the cube assets use inside their step rather than Dagster's
``dagster-dask`` executor: that executor ships whole Dagster steps to Dask, but a step here
is a block's range of weeks whose weeks must be read in parallel and committed together by
one coordinator (icechunk's fork / merge, :mod:`store.cube.cooperative`), and Dagster's
per-step overhead and event log stay in the run's process. The tasks themselves are plain
functions (:mod:`pipelines.family_dask`).
"""

from __future__ import annotations

import atexit
import os
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Literal

from dagster import ConfigurableResource

__all__ = [
    "CLUSTER_CONFIG",
    "CONNECT_TIMEOUT_S",
    "EXECUTOR_ENV",
    "SCHEDULER_ENV",
    "WORKERS_ENV",
    "ClusterError",
    "ClusterUnavailable",
    "DaskResource",
    "ExecutorChoice",
    "choose_executor",
    "dask_client",
    "gather_all",
    "is_cluster_failure",
]

EXECUTOR_ENV = "EARTHMEM_INGEST_EXECUTOR"
SCHEDULER_ENV = "EARTHMEM_DASK_SCHEDULER"
WORKERS_ENV = "EARTHMEM_DASK_WORKERS"
CONNECT_TIMEOUT_S = 10.0
"""How long a run waits for a configured scheduler to answer before it fails."""
MAX_LOCAL_WORKERS = 64

Executor = Literal["local", "dask"]


class ClusterError(RuntimeError):
    """The Dask cluster is misconfigured, unreachable, or lost a task for good."""


class ClusterUnavailable(ClusterError, ConnectionError):
    """The configured scheduler does not answer (nothing was written)."""


@dataclass(frozen=True)
class ExecutorChoice:
    """How a run's scene partitions are executed."""

    kind: Executor
    """``local``: in the run's process; ``dask``: tasks on a Dask cluster."""
    scheduler: str | None = None
    """Address of the scheduler to connect to; None: a LocalCluster on this machine."""
    workers: int = 2
    """Worker processes of the LocalCluster (unused with a scheduler address)."""
    connect_timeout: float = CONNECT_TIMEOUT_S
    """Seconds to wait for the scheduler to answer."""


def choose_executor(
    executor: str = "",
    scheduler: str = "",
    workers: int = 0,
    env: Mapping[str, str] | None = None,
) -> ExecutorChoice:
    """The executor of a run: explicit settings first, then the environment, then ``local``.

    Raises:
        ClusterError: An unknown executor, a scheduler address that is not ``tcp://`` or
            ``tls://``, or a worker count outside 1..64.
    """
    env = os.environ if env is None else env
    address = (scheduler or env.get(SCHEDULER_ENV, "")).strip()
    kind = (executor or env.get(EXECUTOR_ENV, "")).strip().lower() or (
        "dask" if address else "local"
    )
    if kind not in ("local", "dask"):
        raise ClusterError(f"{EXECUTOR_ENV} must be 'local' or 'dask', got {kind!r}")
    if kind == "local":
        return ExecutorChoice("local")
    if address and not address.startswith(("tcp://", "tls://")):
        raise ClusterError(
            f"{SCHEDULER_ENV} must be a tcp:// or tls:// scheduler address, got {address!r}"
        )
    raw = workers or env.get(WORKERS_ENV, "") or 2
    try:
        n = int(raw)
    except ValueError:
        raise ClusterError(f"{WORKERS_ENV} must be an integer, got {raw!r}") from None
    if not 1 <= n <= MAX_LOCAL_WORKERS:
        raise ClusterError(f"{WORKERS_ENV} must be within 1..{MAX_LOCAL_WORKERS}, got {n}")
    return ExecutorChoice("dask", address or None, n)


class DaskResource(ConfigurableResource):
    """The run's executor setting (empty fields: the environment decides, see the module)."""

    executor: str = ""
    scheduler: str = ""
    workers: int = 0

    def choice(self) -> ExecutorChoice:
        """The executor this run uses (:func:`choose_executor`, environment read now)."""
        return choose_executor(self.executor, self.scheduler, self.workers)


CLUSTER_CONFIG: dict[str, Any] = {
    # Dask's default 64 KiB trim threshold also freezes glibc's mmap threshold at 128 KiB, so
    # every array a task allocates (MBs each) was a fresh mmap: 2.5 M page faults a worker for
    # 104 partitions of the demo, against 0.1 M in process. Unset, glibc's defaults reuse the
    # freed heap (the BLAS/OpenMP thread limits of the same setting stay at 1).
    "distributed.nanny.pre-spawn-environ.MALLOC_TRIM_THRESHOLD_": None,
    # the statistical profiler samples every thread's stack each 10 ms (for the dashboard,
    # which a LocalCluster here does not serve)
    "distributed.worker.profile.enabled": False,
    # house-keeping loops of the scheduler, the nannies (both in the coordinator's process)
    # and the workers, at rates meant for interactive dashboards: the event loop's health
    # tick (20 ms), resource sampling (500 ms), the memory monitor (100 ms) and work stealing
    # (tasks here are uniform and queued on the scheduler)
    "distributed.admin.tick.interval": "1s",
    "distributed.admin.system-monitor.interval": "5s",
    "distributed.worker.memory.monitor-interval": "1s",
    "distributed.scheduler.work-stealing": False,
}
"""Dask settings of this process's LocalCluster (:func:`_local_client`): its scheduler, nannies
and workers. Workers of a cluster started elsewhere take theirs from their own Dask
configuration (docs/SCALING.md)."""

_LOCAL: dict[int, tuple[Any, Any]] = {}
"""Worker count -> (LocalCluster, its Client): started once a process, closed at exit."""
_LOCAL_LOCK = threading.Lock()


def _local_client(workers: int) -> Any:
    """The Client of this process's LocalCluster with ``workers`` worker processes.

    The cluster and one client connected to it are started once a process and closed at
    exit: every run of the process submits through the same client (a client per run cost
    the coordinator a connection, a scheduler registration and a handshake each time).
    """
    import dask
    from distributed import Client, LocalCluster

    with _LOCAL_LOCK:
        entry = _LOCAL.get(workers)
        if entry is None or entry[1].status != "running":
            if entry is not None:
                _close(entry)
            with dask.config.set(CLUSTER_CONFIG):  # read as the scheduler and nannies start
                cluster = LocalCluster(
                    n_workers=workers,
                    threads_per_worker=1,
                    processes=True,
                    dashboard_address=None,
                    silence_logs=40,  # logging.ERROR
                )
            entry = (cluster, Client(cluster, set_as_default=False))
            _LOCAL[workers] = entry
            if len(_LOCAL) == 1:
                atexit.register(_close_local)
        return entry[1]


def local_clusters() -> list[Any]:
    """The LocalClusters this process started (for diagnostics: the bench's CPU accounting)."""
    with _LOCAL_LOCK:
        return [cluster for cluster, _ in _LOCAL.values()]


def _close(entry: tuple[Any, Any]) -> None:
    cluster, client = entry
    try:
        client.close()
    finally:
        cluster.close()


def _close_local() -> None:
    with _LOCAL_LOCK:
        for entry in _LOCAL.values():
            _close(entry)
        _LOCAL.clear()


@contextmanager
def dask_client(choice: ExecutorChoice) -> Iterator[Any]:
    """A ``distributed.Client`` for a ``dask`` choice.

    A configured scheduler gets a client of its own, closed on exit; a LocalCluster's client
    is the process's one (:func:`_local_client`), left open for the next run.

    Raises:
        ClusterUnavailable: The scheduler does not answer within the choice's timeout.
    """
    from distributed import Client

    if choice.kind != "dask":
        raise ClusterError("dask_client needs a 'dask' executor choice")
    if choice.scheduler is None:
        yield _local_client(choice.workers)
        return
    try:
        client = Client(choice.scheduler, timeout=choice.connect_timeout, set_as_default=False)
    except (OSError, TimeoutError) as exc:
        raise ClusterUnavailable(
            f"Dask scheduler {choice.scheduler} did not answer within"
            f" {choice.connect_timeout:g} s"
            f" ({type(exc).__name__}: {exc}); nothing was written"
        ) from exc
    try:
        yield client
    finally:
        client.close()


def is_cluster_failure(exc: BaseException) -> bool:
    """Whether an exception from ``gather`` is the cluster's (a dead worker, a lost connection)."""
    from distributed.client import FutureCancelledError
    from distributed.comm.core import CommClosedError
    from distributed.scheduler import KilledWorker

    return isinstance(
        exc, (KilledWorker, CommClosedError, FutureCancelledError, OSError, TimeoutError)
    )


def gather_all(client: Any, futures: list[Any], what: str, rerun: str) -> list[Any]:
    """The futures' results, in order; a task lost on the cluster is a :class:`ClusterError`.

    Args:
        what: Names the work in the message (``"s2_indices: a task of the range"``).
        rerun: What to rerun (``"rerun the range"``).
    """
    try:
        return list(client.gather(futures))
    except Exception as exc:
        if is_cluster_failure(exc):
            raise ClusterError(
                f"{what} was lost on the Dask cluster ({type(exc).__name__}: {exc});"
                f" nothing was committed, {rerun}"
            ) from exc
        raise
