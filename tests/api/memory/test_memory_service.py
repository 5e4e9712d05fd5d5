"""The memory primitives through the one dispatch, on the tiny cube and an embedded database.

Writes are authenticated, idempotent and audited; claims are checked against the
cube (the sample's planted flood and clearing); projects never see each other.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from api.context import ServiceContext
from api.dispatch import call_primitive, describe_error
from api.errors import ApiError
from api.memory.audit import audit_project
from api.memory.auth import issue_token
from api.receipts import Signer, verify_answer
from store import address
from store.errors import StoreError
from store.memory.interface import entry_content, entry_hash


@pytest.fixture
def ctx(tiny_store: Any, tmp_path: Path) -> ServiceContext:
    return ServiceContext(
        tiny_store.data,
        signer=Signer.generate(),
        manifest_path=tiny_store.sample / "manifest.json",
        memory_url=f"sqlite:///{tmp_path / 'memory.sqlite'}",
    )


@pytest.fixture
def token(ctx: ServiceContext) -> str:
    return issue_token(ctx.memory(), "ranchi", ("read", "write"), actor="agent:test")[0]


def _call(ctx: ServiceContext, name: str, args: dict[str, Any], token: str | None) -> Any:
    return call_primitive(ctx, name, args, token=token)


def _code(
    ctx: ServiceContext, name: str, args: dict[str, Any], token: str | None
) -> tuple[int, str]:
    with pytest.raises((ApiError, StoreError, ValidationError)) as info:
        _call(ctx, name, args, token)
    described = describe_error(info.value)
    assert described is not None, info.value
    return described[0], described[1]["error"]["code"]


def _flood(tiny_store: Any) -> dict[str, Any]:
    ev = tiny_store.event("flood")
    return {
        "type": "observation",
        "title": "fields under water beside the river",
        "statement": "the fields beside the river were flooded in mid August 2024",
        "tags": ["flood", "field-report"],
        "where": {"lat": ev["centre"]["lat"], "lng": ev["centre"]["lng"]},
        "valid_at": "2024-08-10",
        "claim": {"band": "indices.ndwi", "op": "gt", "value": 0, "date": "2024-08-10"},
    }


def test_create_checks_the_claim_against_the_cube(
    ctx: ServiceContext, token: str, tiny_store: Any
) -> None:
    answer = _call(ctx, "memory_create", _flood(tiny_store), token)
    item = answer["result"]["item"]
    assert item["verdict"] == "corroborated", answer["result"]["claim_check"]
    assert item["verdict_facts"]
    assert item["confidence"] == 0.6  # agent, derived
    assert answer["result"]["applied"]["confidence"].startswith("0.6")
    assert verify_answer(answer).ok
    assert answer["receipt"]["snapshot_id"].startswith("memory:ranchi:1:")
    assert set(item["verdict_facts"]) <= set(answer["receipt"]["fact_ids"])

    ev = tiny_store.event("forest_clearing")
    contradicted = _call(
        ctx,
        "memory_create",
        {
            "type": "observation",
            "title": "canopy intact at the clearing",
            "statement": "the forest canopy was intact at the patch on 2024-03-27",
            "tags": ["forest"],
            "where": {"lat": ev["centre"]["lat"], "lng": ev["centre"]["lng"]},
            "claim": {"band": "ndvi", "op": "gt", "value": 0.6, "date": "2024-03-27"},
        },
        token,
    )
    # felled on the event's date; the sample's 2024-03-27 overpass is cloud-free and bare soil
    assert ev["end"] < "2024-03-27"
    assert contradicted["result"]["item"]["verdict"] == "contradicted"
    assert contradicted["result"]["item"]["verdict_facts"]

    # 2024-06-01 has no clear overpass within 7 days in the tiny sample: the cube cannot decide
    undecided = _call(
        ctx,
        "memory_create",
        {
            "type": "observation",
            "title": "canopy intact at the clearing in June",
            "statement": "the forest canopy was intact at the patch on 2024-06-01",
            "tags": ["forest"],
            "where": {"lat": ev["centre"]["lat"], "lng": ev["centre"]["lng"]},
            "claim": {"band": "ndvi", "op": "gt", "value": 0.6, "date": "2024-06-01"},
        },
        token,
    )
    assert undecided["result"]["item"]["verdict"] == "unknown"


def test_tokens_decide_who_writes_and_what_is_visible(
    ctx: ServiceContext, token: str, tiny_store: Any
) -> None:
    assert _code(ctx, "memory_create", _flood(tiny_store), None) == (401, "token_missing")
    assert _code(ctx, "memory_create", _flood(tiny_store), "em_nope") == (401, "token_invalid")
    reader = issue_token(ctx.memory(), "ranchi", ("read",))[0]
    assert _code(ctx, "memory_create", _flood(tiny_store), reader) == (
        403,
        "insufficient_permission",
    )
    created = _call(ctx, "memory_create", _flood(tiny_store), token)["result"]["item"]
    assert _call(ctx, "memory_get", {"id": created["id"]}, reader)["result"]["item"]["id"]
    other = issue_token(ctx.memory(), "elsewhere", ("read", "write"))[0]
    assert _code(ctx, "memory_get", {"id": created["id"]}, other) == (404, "memory_not_found")
    assert _call(ctx, "memory_list", {}, other)["result"]["items"] == []
    record = next(t for t in ctx.memory().list_tokens("ranchi") if t.can == ("read",))
    ctx.memory().revoke_token(record.id, dt.datetime.now(dt.UTC))
    assert _code(ctx, "memory_get", {"id": created["id"]}, reader) == (401, "token_revoked")


def test_operation_ids_apply_once(ctx: ServiceContext, token: str, tiny_store: Any) -> None:
    args = {**_flood(tiny_store), "operation_id": "op-1"}
    first = _call(ctx, "memory_create", args, token)["result"]
    again = _call(ctx, "memory_create", args, token)["result"]
    assert again["replayed"] is True
    assert again["item"]["id"] == first["item"]["id"]
    history = _call(ctx, "memory_history", {}, token)["result"]["entries"]
    assert len(history) == 1
    changed = {**args, "title": "another title"}
    assert _code(ctx, "memory_create", changed, token) == (409, "operation_conflict")
    assert len(_call(ctx, "memory_history", {}, token)["result"]["entries"]) == 1


def test_update_supersedes_with_optimistic_versions(
    ctx: ServiceContext, token: str, tiny_store: Any
) -> None:
    old = _call(ctx, "memory_create", _flood(tiny_store), token)["result"]["item"]
    new_args = {**_flood(tiny_store), "id": old["id"], "expected_version": old["version"]}
    new_args["statement"] = "the fields were flooded from 1 to 25 August 2024"
    new = _call(ctx, "memory_update", new_args, token)["result"]["item"]
    assert new["supersedes_id"] == old["id"]
    stored_old = _call(ctx, "memory_get", {"id": old["id"]}, token)["result"]["item"]
    assert stored_old["status"] == "superseded"
    listed = [i["id"] for i in _call(ctx, "memory_list", {}, token)["result"]["items"]]
    assert new["id"] in listed
    assert old["id"] not in listed
    status, code = _code(ctx, "memory_update", new_args, token)  # the old version again
    assert status == 409
    assert code in ("version_conflict", "invalid_transition")


def test_writer_rules(ctx: ServiceContext, token: str, tiny_store: Any) -> None:
    base = _flood(tiny_store)
    hyp = _call(ctx, "memory_create", {**base, "type": "hypothesis", "confidence": 0.9}, token)
    assert hyp["result"]["item"]["confidence"] == 0.4
    assert any("capped" in w for w in hyp["result"]["warnings"])
    decision = {k: v for k, v in base.items() if k not in ("where", "claim", "valid_at")}
    dec = _call(ctx, "memory_create", {**decision, "type": "decision"}, token)
    assert dec["result"]["item"]["where"] is None
    assert any("rationale" in w for w in dec["result"]["warnings"])
    cases = [
        ({**base, "type": "invariant"}, "invariant_needs_verification"),
        ({**base, "tags": []}, "invalid_argument"),
        ({**base, "confidence": 1.5}, "invalid_argument"),
        ({**base, "type": "spell"}, "invalid_argument"),
        ({**decision, "type": "observation"}, "place_required"),
        ({**base, "where": {"place": "Atlantis Under The Sea Nowhere"}}, "place_not_found"),
        ({**base, "claim": {"band": "nope", "op": "gt", "value": 1}}, "unknown_band"),
        ({**base, "supersedes_id": "mem_missing"}, "memory_not_found"),
        ({**base, "related_memory_ids": ["mem_missing"]}, "memory_not_found"),
        ({**base, "evidence": [{"kind": "rumour"}]}, "invalid_evidence"),
        ({**base, "metadata": {"x": "y" * 20_000}}, "metadata_too_large"),
    ]
    for args, want in cases:
        assert _code(ctx, "memory_create", args, token)[1] == want, args
    assert _call(ctx, "memory_history", {}, token)["result"]["entries"][-1]["seq"] == 2


def test_fact_evidence_is_verified(ctx: ServiceContext, token: str, tiny_store: Any) -> None:
    ev = tiny_store.event("flood")
    cell = address.encode(ev["centre"]["lat"], ev["centre"]["lng"])
    traj = call_primitive(ctx, "trajectory", {"cell": cell, "band": "indices.ndwi"})
    point = next(p for p in traj["points"] if p["clear"])
    fact = next(f for f in traj["facts"] if f["tslot"] == point["tslot"])
    evidence = {"kind": "fact", **{k: fact[k] for k in ("fact_id", "cell", "band", "tslot")}}
    ok = _call(ctx, "memory_create", {**_flood(tiny_store), "evidence": [evidence]}, token)
    assert ok["result"]["item"]["evidence"][0]["fact_id"] == fact["fact_id"]
    forged = {**evidence, "fact_id": "f" * len(fact["fact_id"])}
    bad = {**_flood(tiny_store), "evidence": [forged]}
    assert _code(ctx, "memory_create", bad, token) == (422, "evidence_unverified")
    signed = {"kind": "answer", "answer": traj}
    assert _call(ctx, "memory_create", {**_flood(tiny_store), "evidence": [signed]}, token)
    tampered = {"kind": "answer", "answer": {**traj, "band": "indices.ndvi"}}
    bad2 = {**_flood(tiny_store), "evidence": [tampered]}
    assert _code(ctx, "memory_create", bad2, token) == (422, "evidence_unverified")


def test_audit_detects_a_rewritten_history(
    ctx: ServiceContext, token: str, tiny_store: Any, tmp_path: Path
) -> None:
    for title in ("one", "two", "three"):
        _call(ctx, "memory_create", {**_flood(tiny_store), "title": title}, token)
    keys = {ctx.signer.key_id: ctx.signer.public_key}
    assert audit_project(ctx.memory(), "ranchi", keys).ok
    # rewrite entry 2 and every later hash, as an attacker with database access could
    entries = ctx.memory().history("ranchi")
    db = sqlite3.connect(tmp_path / "memory.sqlite")
    prev = entries[0].hash
    for e in entries[1:]:
        change = dict(e.change)
        if e.seq == 2:
            change = {**change, "title": "rewritten"}
        forged = entry_hash(prev, {**entry_content(e), "change": change})
        table = _history_table(db)
        db.execute(
            f"UPDATE {table} SET prev_hash = ?, hash = ? WHERE project = ? AND seq = ?",
            (prev, forged, "ranchi", e.seq),
        )
        prev = forged
    db.commit()
    db.close()
    report = audit_project(ctx.memory(), "ranchi", keys)
    assert not report.ok
    assert any("signature" in p for p in report.problems)


def _history_table(db: sqlite3.Connection) -> str:
    names = [r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
    return next(n for n in names if "history" in n and "fts" not in n)


def test_memory_writes_never_touch_the_cube(
    ctx: ServiceContext, token: str, tiny_store: Any
) -> None:
    def digest_tree(root: Path) -> str:
        h = hashlib.sha256()
        for p in sorted(root.rglob("*")):
            if p.is_file():
                h.update(str(p.relative_to(root)).encode())
                h.update(p.read_bytes())
        return h.hexdigest()

    before = digest_tree(tiny_store.data / "cube.icechunk")
    for i in range(20):
        _call(ctx, "memory_create", {**_flood(tiny_store), "title": f"n{i}"}, token)
    assert digest_tree(tiny_store.data / "cube.icechunk") == before


def test_rate_limit_is_typed(ctx: ServiceContext, token: str, tiny_store: Any) -> None:
    ctx.write_limiter.rate, ctx.write_limiter.burst = 0.001, 1
    _call(ctx, "memory_create", _flood(tiny_store), token)
    with pytest.raises(ApiError) as info:
        _call(ctx, "memory_create", {**_flood(tiny_store), "title": "again"}, token)
    assert info.value.status == 429
    assert info.value.details["retry_after"] > 0


def test_rest_routes_take_the_bearer_token(
    ctx: ServiceContext, token: str, tiny_store: Any
) -> None:
    from fastapi.testclient import TestClient

    from api.rest import create_app

    with TestClient(create_app(ctx, mount_mcp=False)) as client:
        anon = client.post("/v1/memory_create", json=_flood(tiny_store))
        assert anon.status_code == 401
        assert anon.json()["error"]["code"] == "token_missing"
        auth = {"Authorization": f"Bearer {token}"}
        made = client.post("/v1/memory_create", json=_flood(tiny_store), headers=auth)
        assert made.status_code == 200, made.text
        assert verify_answer(made.json()).ok
        item_id = made.json()["result"]["item"]["id"]
        # the form-encoded body curl -d sends is read as JSON too
        got = client.post("/v1/memory_get", content=f'{{"id": "{item_id}"}}', headers=auth)
        assert got.status_code == 200, got.text
        assert got.json()["result"]["item"]["id"] == item_id
        spec = client.get("/openapi.json").json()
        assert "/v1/memory_create" in spec["paths"]


def test_the_read_token_setting_puts_cube_primitives_behind_a_token(
    tiny_store: Any, tmp_path: Path
) -> None:
    ctx = ServiceContext(
        tiny_store.data,
        signer=Signer.generate(),
        memory_url=f"sqlite:///{tmp_path / 'memory.sqlite'}",
        require_token=True,
    )
    ev = tiny_store.event("forest_clearing")["centre"]
    args = {"cell": address.encode(ev["lat"], ev["lng"]), "band": "indices.ndvi"}
    assert _code(ctx, "trajectory", args, None) == (401, "token_missing")
    reader = issue_token(ctx.memory(), "any-project", ("read",))[0]
    assert _call(ctx, "trajectory", args, reader)["points"]


def test_a_seq_past_64_bits_is_a_typed_422(ctx: ServiceContext, token: str) -> None:
    # found by schemathesis: {"after_seq": 358994781961462284288} was a 500 (SQLite overflow)
    huge = 358994781961462284288
    assert _code(ctx, "memory_history", {"after_seq": huge}, token) == (422, "invalid_argument")
    args = {"id": "mem_x", "expected_version": huge, "reason": "r"}
    assert _code(ctx, "memory_delete", args, token) == (422, "invalid_argument")
