"""The memories ``make run`` writes about the demo area: one corroborated, one contradicted,
one superseded — each checked against the cube, each with a signed receipt.

The token is created for project ``demo`` and saved in ``<data>/answers/demo.token`` (a
demo convenience: a real token is shown once and kept by its owner).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from api.context import ServiceContext
from api.dispatch import call_primitive
from api.errors import ApiError
from api.memory.auth import issue_token

__all__ = ["DEMO_PROJECT", "write_demo_memories"]

DEMO_PROJECT = "demo"
"""The project the demo's memories belong to."""


def _event(manifest: dict[str, Any], kind: str) -> dict[str, Any]:
    return next(e for e in manifest["events"] if e["kind"] == kind)


def demo_memories(manifest: dict[str, Any]) -> list[dict[str, Any]]:
    """The demo's memory_create arguments, aimed at the sample's planted events."""
    flood = _event(manifest, "flood")["centre"]
    cut = _event(manifest, "forest_clearing")["centre"]
    return [
        {
            "type": "observation",
            "title": "Fields beside the Jumar River under water",
            "statement": "The fields beside the Jumar River were under water on 2024-08-10.",
            "tags": ["flood", "field-report"],
            "asserted_by": "user",
            "where": {"lat": flood["lat"], "lng": flood["lng"]},
            "valid_at": "2024-08-10",
            "claim": {"band": "indices.ndwi", "op": "gt", "value": 0, "date": "2024-08-10"},
            "operation_id": "demo-flood",
        },
        {
            "type": "observation",
            "title": "Forest canopy intact at the clearing",
            # 2024-03-27: a date the sample renders cloud-free at both sizes, twelve days
            # after the patch is felled, so the cube can decide: contradicted
            "statement": "The forest canopy at the patch near Pithoria was intact on 2024-03-27.",
            "tags": ["forest"],
            "where": {"lat": cut["lat"], "lng": cut["lng"]},
            "valid_at": "2024-03-27",
            "claim": {"band": "indices.ndvi", "op": "gt", "value": 0.6, "date": "2024-03-27"},
            "operation_id": "demo-canopy",
        },
    ]


def write_demo_memories(data: Path, manifest: dict[str, Any], manifest_path: Path) -> None:
    """Write and print the demo's memories (idempotent: operation ids make reruns replay)."""
    ctx = ServiceContext(data, manifest_path=manifest_path)
    token, _ = issue_token(ctx.memory(), DEMO_PROJECT, ("read", "write"), actor="demo:make-run")
    out = data / "answers"
    out.mkdir(parents=True, exist_ok=True)
    (out / "demo.token").write_text(token + "\n", encoding="utf-8")
    items = []
    try:
        for args in demo_memories(manifest):
            answer = call_primitive(ctx, "memory_create", args, token=token)
            items.append(answer["result"]["item"])
        flood = items[0]
        update = {
            **demo_memories(manifest)[0],
            "id": flood["id"],
            "expected_version": flood["version"],
            "statement": "The fields beside the Jumar River were under water from 2024-08-01 to "
            "2024-08-25 (the flood's whole span).",
            "valid_from": "2024-08-01",
            "valid_to": "2024-08-25",
            "operation_id": "demo-flood-span",
        }
        update.pop("valid_at")
        newer = call_primitive(ctx, "memory_update", update, token=token)["result"]["item"]
    except ApiError as exc:
        if exc.code not in ("version_conflict", "invalid_transition", "operation_conflict"):
            raise
        print(f"  memories already written ({exc.code}: a rerun replays, nothing is duplicated)")
        return
    superseded = call_primitive(ctx, "memory_get", {"id": flood["id"]}, token=token)
    for item in (*items, newer, superseded["result"]["item"]):
        print(
            f"  memory {item['id']} [{item['status']}] {item['title']!r}: "
            f"claim {item['verdict'] or '-'}"
        )
    print(
        f"  read them with: EARTHMEM_TOKEN=$(cat {out}/demo.token) .venv/bin/earthmem memory "
        f'history \'{{"id": "{newer["id"]}"}}\' --data {data}'
    )
