"""The one choice of where a run's scene work executes (pipelines/cluster.py)."""

from __future__ import annotations

import pytest

from pipelines.cluster import ClusterError, ExecutorChoice, choose_executor


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
