"""The one choice of where a run's scene work executes (pipelines/cluster.py)."""

from __future__ import annotations

import pytest

from pipelines.cluster import ClusterError, ExecutorChoice, choose_executor, dask_client


def test_in_process_unless_dask_is_asked_for() -> None:
    assert choose_executor(env={}) == ExecutorChoice("local")
    assert choose_executor(env={"EARTHMEM_DASK_WORKERS": "4"}).kind == "local"


def test_a_scheduler_address_implies_dask() -> None:
    choice = choose_executor(env={"EARTHMEM_DASK_SCHEDULER": "tcp://10.0.0.5:8786"})
    assert (choice.kind, choice.scheduler) == ("dask", "tcp://10.0.0.5:8786")


def test_dask_without_an_address_is_a_local_cluster() -> None:
    env = {"EARTHMEM_INGEST_EXECUTOR": "Dask", "EARTHMEM_DASK_WORKERS": "3"}
    assert choose_executor(env=env) == ExecutorChoice("dask", None, 3)


def test_explicit_settings_win_over_the_environment() -> None:
    env = {"EARTHMEM_DASK_SCHEDULER": "tcp://a:1"}
    assert choose_executor("local", env=env).kind == "local"
    assert choose_executor(scheduler="tcp://b:2", env=env).scheduler == "tcp://b:2"


@pytest.mark.parametrize(
    ("env", "match"),
    [
        ({"EARTHMEM_INGEST_EXECUTOR": "spark"}, "'local' or 'dask'"),
        ({"EARTHMEM_DASK_SCHEDULER": "http://a:1"}, "tcp:// or tls://"),
        ({"EARTHMEM_INGEST_EXECUTOR": "dask", "EARTHMEM_DASK_WORKERS": "many"}, "integer"),
        ({"EARTHMEM_INGEST_EXECUTOR": "dask", "EARTHMEM_DASK_WORKERS": "0"}, "1..64"),
    ],
)
def test_bad_settings_are_typed_errors(env: dict[str, str], match: str) -> None:
    with pytest.raises(ClusterError, match=match):
        choose_executor(env=env)


@pytest.mark.slow  # starts a LocalCluster of one worker process
def test_runs_of_a_process_share_its_local_cluster_client() -> None:
    choice = choose_executor("dask", workers=1)
    with dask_client(choice) as first:
        assert first.submit(sum, [1, 2]).result() == 3
    with dask_client(choice) as second:  # the next run: the same client, still connected
        assert second is first
        assert second.status == "running"
        assert second.submit(sum, [3, 4]).result() == 7


def _worker_settings() -> tuple[str | None, bool, str]:
    import os

    import dask

    return (
        os.environ.get("MALLOC_TRIM_THRESHOLD_"),
        bool(dask.config.get("distributed.worker.profile.enabled")),
        os.environ.get("OMP_NUM_THREADS", ""),
    )


@pytest.mark.slow  # starts a LocalCluster of one worker process
def test_local_cluster_workers_keep_glibc_malloc_and_no_profiler() -> None:
    """A LocalCluster worker runs without Dask's 64 KiB malloc trim threshold (a page fault
    for every array a task allocates) and without the statistical profiler; the one-thread
    limit of OpenMP/BLAS stays."""
    with dask_client(choose_executor("dask", workers=1)) as client:
        (settings,) = client.run(_worker_settings).values()
    assert settings == (None, False, "1")
