"""Shared fixtures: the tiny sample area, built once and ingested once through Dagster."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, settings

# Hypothesis's 200 ms per-example deadline fails on a loaded 2-core machine, and when the
# first example pays a numba compile or cache load (a fresh clone: reproduced, 1.2 s).
settings.register_profile("earthmem", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("earthmem")


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


@pytest.fixture(scope="session")
def tiny_sample_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from pipelines.sample import build_sample

    root = tmp_path_factory.mktemp("tiny_sample")
    build_sample(root, size="tiny", seed=0)
    return root


@pytest.fixture(scope="session")
def tiny_store(tiny_sample_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> IngestedSample:
    """The tiny sample ingested through the real Dagster assets (ephemeral instance)."""
    from dagster import DagsterInstance

    from pipelines.run import ingest_area

    data = tmp_path_factory.mktemp("tiny_data")
    with DagsterInstance.ephemeral() as instance:
        report = ingest_area(
            data,
            tiny_sample_dir / "catalog.json",
            tiny_sample_dir / "manifest.json",
            instance=instance,
        )
    manifest = json.loads((tiny_sample_dir / "manifest.json").read_text())
    return IngestedSample(tiny_sample_dir, data, manifest, report)


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


def pytest_terminal_summary(terminalreporter: Any) -> None:
    """Say which memory-store backends ran (and why PostgreSQL did not, when it did not)."""
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
