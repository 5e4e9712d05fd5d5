"""Retention never removes a snapshot a memory cites (the memory issue's promise to the gc)."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import numpy as np

from api.context import ServiceContext
from api.dispatch import call_primitive
from api.memory.auth import issue_token
from api.receipts import Signer
from pipelines.retention import CITED_TAG_PREFIX, collect
from store import address
from store.cube import CubeReader, CubeWriter
from store.snapshots import cube_location, open_repository, open_storage


def test_gc_keeps_the_snapshot_a_memory_cites(tiny_store: Any, tmp_path: Path) -> None:
    data = tmp_path / "data"
    shutil.copytree(tiny_store.data, data, symlinks=True)
    ctx = ServiceContext(
        data, signer=Signer.generate(), manifest_path=tiny_store.sample / "manifest.json"
    )
    token = issue_token(ctx.memory(), "ranchi", ("read", "write"))[0]
    ev = tiny_store.event("flood")["centre"]
    item = call_primitive(
        ctx,
        "memory_create",
        {
            "type": "observation",
            "title": "flooded",
            "statement": "under water",
            "tags": ["flood"],
            "where": {"lat": ev["lat"], "lng": ev["lng"]},
            "claim": {"band": "indices.ndwi", "op": "gt", "value": 0, "date": "2024-08-10"},
        },
        token=token,
    )["result"]["item"]
    cited = item["claim"]["snapshot_id"]
    n_before = len(CubeReader(data).list_snapshots())
    lat_q, lng_q = address.encode_q(ev["lat"], ev["lng"])
    CubeWriter(data).write_region(
        "indices.ndwi", [19000], lat_q, lng_q, np.full((1, 1, 1), 0.1, np.float32),
        partition_key="later",
    )  # fmt: skip
    collect(data, None, keep_days=0)
    kept = CubeReader(data).list_snapshots()
    assert len(kept) < n_before  # retention did collect
    assert CubeReader(data, snapshot_id=cited).snapshot_id == cited  # the cited one stays
    tags = open_repository(open_storage(cube_location(data))).list_tags()
    assert f"{CITED_TAG_PREFIX}{cited}" in tags
