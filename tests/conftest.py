"""Shared fixtures: the tiny sample area, built once and ingested once through Dagster."""

from __future__ import annotations

import json
import os
import pickle
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, settings

# Hypothesis's 200 ms per-example deadline fails on a loaded 2-core machine, and when the
# first example pays a numba compile or cache load (a fresh clone: reproduced, 1.2 s).
settings.register_profile("earthmem", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("earthmem")

# Every answer a primitive signs without building its model (api.queries._common.finish_exact)
# is checked against that model in the suite, servers it starts included (their environment
# is this one). tests/api/test_exact_answers.py runs the unchecked path too.
os.environ.setdefault("EARTHMEM_CHECK_ANSWERS", "1")


@dataclass(frozen=True)
class IngestedSample:
    """A tiny sample area ingested into a data directory."""

    sample: Path
    """Sample root (catalog.json, manifest.json, scenes)."""
    data: Path
    """Data directory (cube.icechunk with its inventory, knn/)."""
    manifest: dict[str, Any]
    """The ground-truth manifest."""
    report: Any
    """The :class:`pipelines.run.IngestReport`."""

    @property
    def catalog(self) -> Path:
        return self.sample / "catalog.json"

    def event(self, kind: str) -> dict[str, Any]:
        return next(e for e in self.manifest["events"] if e["kind"] == kind)


BUILDS_ENV = "EARTHMEM_TEST_BUILDS"
"""A directory the session builds (tiny sample, its ingest) are kept in across pytest runs.

``.ci/run`` sets it to a fresh directory (one per CI run); a later pytest run given the same
directory (e.g. ``make clients-test`` after ``make pytest``) reuses the builds; unset, each run
builds its own.
"""


def _run_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The directory the session builds go to, shared by every process of this run.

    ``EARTHMEM_TEST_BUILDS`` when set; else under pytest-xdist the parent of the
    worker's basetemp (``<run>/popen-gwN``: the run's, shared by the workers);
    without xdist the basetemp itself.
    """
    if os.environ.get(BUILDS_ENV):
        root = Path(os.environ[BUILDS_ENV])
        root.mkdir(parents=True, exist_ok=True)
        return root
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


def _built_once(root: Path, name: str, build: Callable[[Path], Any]) -> Any:
    """``build(root / name)`` once per run, whichever process asks first; its pickled result.

    A file lock makes the other xdist workers wait for the first one's build and then
    read its result, instead of building the same thing again on the same cores.
    """
    from filelock import FileLock

    target, result = root / name, root / f"{name}.pickle"
    with FileLock(str(root / f"{name}.lock")):
        if result.exists():
            return pickle.loads(result.read_bytes())
        shutil.rmtree(target, ignore_errors=True)  # a build that failed half-way
        value = build(target)
        result.write_bytes(pickle.dumps(value))
        return value


def _build_tiny_sample(root: Path) -> None:
    from pipelines.sample import build_sample

    root.mkdir(parents=True)
    build_sample(root, size="tiny", seed=0)


@pytest.fixture(scope="session")
def tiny_sample_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny sample area (built once per run, read-only for the tests)."""
    root = _run_root(tmp_path_factory)
    _built_once(root, "tiny_sample", _build_tiny_sample)
    return root / "tiny_sample"


def _ingest_tiny(sample: Path) -> Callable[[Path], Any]:
    def build(data: Path) -> Any:
        from pipelines.run import ingest_area
        from tests.dagster_instance import ephemeral as ephemeral_instance

        data.mkdir(parents=True)
        with ephemeral_instance() as instance:
            return ingest_area(
                data, sample / "catalog.json", sample / "manifest.json", instance=instance
            )

    return build


@pytest.fixture(scope="session")
def tiny_store(tiny_sample_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> IngestedSample:
    """The tiny sample ingested through the real Dagster assets (ephemeral instance).

    Ingested once per run; each process (xdist worker) gets its own copy of the data
    directory, so a test that writes to it (memories, ...) affects only its own
    process's later tests, as in a serial run.
    """
    root = _run_root(tmp_path_factory)
    report = _built_once(root, "tiny_data", _ingest_tiny(tiny_sample_dir))
    data = tmp_path_factory.mktemp("tiny_data")
    shutil.copytree(root / "tiny_data", data, dirs_exist_ok=True, symlinks=True)
    manifest = json.loads((tiny_sample_dir / "manifest.json").read_text())
    return IngestedSample(tiny_sample_dir, data, manifest, report)


# --------------------------------------------------------------------------- parallel order

LONG_MODULES = (
    "tests/test_readme.py",
    "tests/bench/test_bench_smoke.py",
    "tests/clients/test_inspector.py",
    "tests/clients/test_inspector_http.py",
    "tests/clients/test_schemathesis.py",
    "tests/cli/test_gc.py",
    "tests/clients/test_inspector_recall.py",
    "tests/clients/test_inspector_memory.py",
    "tests/pipelines/test_instance_setup.py",
    "tests/store/knn/test_table.py",
    "tests/pipelines/test_ingest_integrity.py",
    "tests/pipelines/test_dask_ingest.py",
    "tests/pipelines/test_dask_faults.py",
    "tests/pipelines/test_s3_store.py",
)
"""The modules that run for minutes, longest first (CI's ``--durations``; the outside clients'
modules run in the same pytest-xdist run under ``make ci-tests``)."""


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Under pytest-xdist: the longest modules first, so none starts last and runs alone.

    ``make pytest`` hands out whole modules (``--dist loadscope --no-loadscope-reorder``)
    in this order: :data:`LONG_MODULES`, then the other modules with a ``slow`` test,
    then the rest by number of tests (xdist's own order). Within a module the order is
    kept. A serial run keeps the collection order.
    """
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        return
    modules: dict[str, list[pytest.Item]] = {}
    for item in items:
        modules.setdefault(item.nodeid.split("::", 1)[0], []).append(item)

    def rank(name: str) -> tuple[int, int]:
        group = modules[name]
        if name in LONG_MODULES:
            return (0, LONG_MODULES.index(name))
        return (1 if any(i.get_closest_marker("slow") for i in group) else 2, -len(group))

    items[:] = [i for name in sorted(modules, key=rank) for i in modules[name]]


# --------------------------------------------------------------------------- memory store backends

MEMORY_BACKENDS_RAN: set[str] = set()
"""Memory-store backends that at least one test ran against (printed in the summary)."""
_PG_SKIPPED: list[str] = []


@pytest.fixture(scope="session")
def pg_server() -> Any:
    """A throwaway PostgreSQL server for the session (tests/pg_server.py).

    Under ``CI=true`` a server that cannot start fails the run; elsewhere the
    PostgreSQL tests are skipped with the reason.
    """
    import os

    from tests import pg_server as pgs

    try:
        server = pgs.start()
    except pgs.PgUnavailable as exc:
        reason = f"PostgreSQL server unavailable: {exc}"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"{reason} (CI=true: the PostgreSQL backend must run)", pytrace=False)
        _PG_SKIPPED.append(reason)
        pytest.skip(reason)
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def postgres_url(pg_server: Any) -> str:
    """A fresh, empty database on the session's PostgreSQL server (its URL)."""
    MEMORY_BACKENDS_RAN.add("postgresql")
    return str(pg_server.create_database())


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    """A fresh SQLite memory database URL (the file is created on first use)."""
    MEMORY_BACKENDS_RAN.add("sqlite")
    return f"sqlite:///{(tmp_path / 'memory.sqlite').as_posix()}"


def pytest_sessionfinish(session: pytest.Session) -> None:
    """On an xdist worker: hand what it ran to the controller (``pytest_testnodedown``)."""
    out = getattr(session.config, "workeroutput", None)
    if out is not None:
        out["memory_backends_ran"] = sorted(MEMORY_BACKENDS_RAN)
        out["memory_pg_skipped"] = list(_PG_SKIPPED)


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: Any, error: Any) -> None:
    """On the xdist controller: add up what each worker ran, for the summary."""
    out = getattr(node, "workeroutput", None) or {}
    MEMORY_BACKENDS_RAN.update(out.get("memory_backends_ran", ()))
    _PG_SKIPPED.extend(out.get("memory_pg_skipped", ()))


def pytest_terminal_summary(terminalreporter: Any) -> None:
    """Say which memory-store backends ran (and why PostgreSQL did not, when it did not).

    Under pytest-xdist the controller prints it once, from what every worker reported.
    """
    if getattr(terminalreporter.config, "workeroutput", None) is not None:
        return  # a worker: its controller prints the summary
    if MEMORY_BACKENDS_RAN or _PG_SKIPPED:
        ran = ", ".join(sorted(MEMORY_BACKENDS_RAN)) or "none"
        terminalreporter.write_line(f"memory backends: {ran}")
        for reason in _PG_SKIPPED[:1]:
            terminalreporter.write_line(f"memory backends: postgresql skipped: {reason}")


# --------------------------------------------------------------------------- recall's text embedder


@pytest.fixture(scope="session")
def recall_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A small real model2vec model trained here on generated text (tests/recall_model.py)."""
    from tests.recall_model import build_model

    return build_model(tmp_path_factory.mktemp("recall_model"))
