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
