"""make run's memories: one corroborated, one contradicted, one superseded; a rerun replays."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from api.context import ServiceContext
from cli.demo_memories import DEMO_PROJECT, write_demo_memories
from store.memory.model import ItemFilter


def test_demo_memories_are_checked_and_idempotent(
    tiny_store: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = tmp_path / "data"
    data.mkdir()
    for name in ("cube.icechunk", "inventory", "knn"):
        (data / name).symlink_to(tiny_store.data / name, target_is_directory=True)
    manifest_path = tiny_store.sample / "manifest.json"
    write_demo_memories(data, tiny_store.manifest, manifest_path)
    write_demo_memories(data, tiny_store.manifest, manifest_path)  # a rerun of make run
    out = capsys.readouterr().out
    assert "corroborated" in out
    store = ServiceContext(data, manifest_path=manifest_path).memory()
    everything = ItemFilter(statuses=("active", "superseded", "potentially_stale", "deleted"))
    items = store.list_items(DEMO_PROJECT, everything, limit=50).items
    assert sorted(i.status for i in items) == ["active", "active", "superseded"]
    verdicts = {i.title: i.verdict for i in items if i.status == "active"}
    assert "corroborated" in verdicts.values()
    # the clearing (2024-03-15) is bare soil on the cloud-free 2024-03-27 overpass
    assert verdicts["Forest canopy intact at the clearing"] == "contradicted"
    assert len(store.history(DEMO_PROJECT)) == 4  # 2 creates, a supersede and its create
