"""End to end: a claim-bearing memory, then a cube commit that changes its fact, then the
pipeline's re-check marks it potentially_stale with a history entry by actor ``pipeline``."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import numpy as np
from dagster import materialize

from api.context import ServiceContext
from api.dispatch import call_primitive
from api.memory.audit import audit_project
from api.memory.auth import issue_token
from pipelines.memory.assets import memory_rechecks
from pipelines.resources import StoreResource
from store import address
from store.cube import CubeWriter
from tests.dagster_instance import ephemeral as ephemeral_instance


def test_a_changed_fact_makes_the_memory_stale(tiny_store: Any, tmp_path: Path) -> None:
    data = tmp_path / "data"
    shutil.copytree(tiny_store.data, data, symlinks=True)
    # the API signs with the data directory's key, as `earthmem serve` does
    ctx = ServiceContext(data, manifest_path=tiny_store.sample / "manifest.json")
    token = issue_token(ctx.memory(), "ranchi", ("read", "write"))[0]
    ev = tiny_store.event("flood")
    lat, lng = ev["centre"]["lat"], ev["centre"]["lng"]
    created = call_primitive(
        ctx,
        "memory_create",
        {
            "type": "observation",
            "title": "flooded field",
            "statement": "the field was under water on 2024-08-10",
            "tags": ["flood"],
            "where": {"lat": lat, "lng": lng},
            "claim": {"band": "indices.ndwi", "op": "gt", "value": 0, "date": "2024-08-10"},
        },
        token=token,
    )["result"]["item"]
    assert created["verdict"] == "corroborated"
    facts = call_primitive(ctx, "memory_get", {"id": created["id"]}, token=token)["result"]
    cited = facts["item"]["verdict_facts"]
    assert cited

    # a later ingest rewrites the week: the flood's NDWI is now dry land at this cell
    claim_slots = [int(t) for t in created["claim"]["window"]]
    lat_q, lng_q = address.encode_q(lat, lng)
    writer = CubeWriter(data)
    t0, t1 = claim_slots
    slots = np.arange(t0, t1 + 1)
    dry = np.full((slots.size, 1, 1), -0.5, np.float32)
    writer.write_region("indices.ndwi", slots, lat_q, lng_q, dry, partition_key="reprocessed")

    with ephemeral_instance() as instance:
        result = materialize(
            [memory_rechecks],
            resources={"store": StoreResource(data_dir=str(data))},
            instance=instance,
        )
    assert result.success
    meta = result.asset_materializations_for_node("memory_rechecks")[0].metadata
    assert meta["became_stale"].value == 1
    after = call_primitive(
        ctx, "memory_get", {"id": created["id"], "include_history": True}, token=token
    )["result"]
    assert after["item"]["status"] == "potentially_stale"
    assert after["item"]["verdict"] == "contradicted"
    last = after["history"][-1]
    assert last["actor"] == "pipeline"
    assert last["action"] == "stale"
    # the pipeline signed the head it wrote with the same key: the audit finds no unsigned tail
    assert str(last["head_signature"]).startswith(f"{ctx.signer.key_id}:")
    report = audit_project(ctx.memory(), "ranchi", {ctx.signer.key_id: ctx.signer.public_key})
    assert report.ok, report.problems
    assert report.warnings == []


def test_a_data_directory_without_a_cube_rechecks_nothing(tmp_path: Path) -> None:
    """Before the first ingest the asset succeeds with its check (it raised Dagster's
    'Length mismatch' for want of the declared check result)."""
    with ephemeral_instance() as inst:
        result = materialize(
            [memory_rechecks],
            resources={"store": StoreResource(data_dir=str(tmp_path / "data"))},
            instance=inst,
        )
    assert result.success
    [check] = result.get_asset_check_evaluations()
    assert check.passed
    assert check.metadata["note"].value == "no cube yet: nothing re-checked"
