"""memory_neighbors and memory_relations over a small graph: relation edges both ways,
shared features, spatial neighbours, depth and limit caps, typed errors, token scoping,
and the three surfaces (REST route, MCP tool with read-only annotations, CLI verb)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from api.context import ServiceContext
from api.dispatch import PRIMITIVES
from api.rest import create_app
from cli.memory import VERBS
from tests.api.recall.graph_helpers import call, centre, code_of, make_ctx, observe, token_for


@pytest.fixture
def ctx(tiny_sample_dir: Path, tmp_path: Path) -> ServiceContext:
    return make_ctx(tiny_sample_dir, tmp_path, tmp_path / "memory.sqlite")


@pytest.fixture
def graph(ctx: ServiceContext) -> dict[str, Any]:
    """A at Kanke Lake (by name), B in the lake (a point), C in the forest related to B,
    D in the field, C depends on D; E at the lake in another project."""
    token = token_for(ctx, "ranchi")
    lake = centre(ctx, "feature:kanke-lake")
    forest = centre(ctx, "feature:pithoria-forest")
    field = centre(ctx, "feature:kanke-reference-field")
    ids = {
        "A": observe(ctx, token, "lake full", {"place": "Kanke Lake"}),
        "B": observe(ctx, token, "boats out", {"lat": lake[0], "lng": lake[1]}),
        "C": observe(ctx, token, "sal felled", {"lat": forest[0], "lng": forest[1]}),
        "D": observe(ctx, token, "rabi sown", {"lat": field[0], "lng": field[1]}),
    }
    call(ctx, "memory_relate", {"src_id": ids["B"], "dst_id": ids["C"], "kind": "related"}, token)
    call(
        ctx, "memory_relate", {"src_id": ids["C"], "dst_id": ids["D"], "kind": "depends_on"}, token
    )
    other = token_for(ctx, "elsewhere")
    ids["E"] = observe(ctx, other, "their lake note", {"place": "Kanke Lake"})
    return {"ids": ids, "token": token, "other": other}


def _walk(ctx: ServiceContext, token: str, node: str, **args: Any) -> dict[str, Any]:
    answer = call(ctx, "memory_neighbors", {"id": node, "radius_m": 5.0, **args}, token)
    return dict(answer["result"])


def _ids(result: dict[str, Any]) -> dict[str, int]:
    return {n["id"]: n["depth"] for n in result["neighbors"]}


def test_neighbors_walk_relations_shared_features_and_depth(
    ctx: ServiceContext, graph: dict[str, Any]
) -> None:
    ids, token = graph["ids"], graph["token"]
    one = _walk(ctx, token, ids["A"])
    assert _ids(one) == {"feature:kanke-lake": 1, ids["B"]: 1}
    by_id = {n["id"]: n for n in one["neighbors"]}
    assert by_id["feature:kanke-lake"]["edge"] == {
        "kind": "anchored_at",
        "direction": "out",
        "how": "anchor",
        "distance_m": 0.0,
    }
    assert by_id["feature:kanke-lake"]["node"] == "entity"
    assert by_id[ids["B"]]["edge"]["kind"] == "shared_place"
    assert by_id[ids["B"]]["edge"]["via"] == "feature:kanke-lake"
    assert by_id[ids["B"]]["title"] == "boats out"
    assert one["truncated"] is False

    two = _ids(_walk(ctx, token, ids["A"], depth=2))
    assert two == {"feature:kanke-lake": 1, ids["B"]: 1, ids["C"]: 2}
    three = _ids(_walk(ctx, token, ids["A"], depth=3))
    assert three[ids["D"]] == 3
    assert three["feature:pithoria-forest"] == 3
    assert ids["E"] not in three  # another project's item never appears

    # relations are walked both ways: from D, C is one hop back along depends_on
    back = {n["id"]: n for n in _walk(ctx, token, ids["D"])["neighbors"]}
    assert back[ids["C"]]["edge"] == {"kind": "depends_on", "direction": "in"}

    # an entity's neighbours are the items anchored at it
    lake = _walk(ctx, token, "feature:kanke-lake")
    assert set(_ids(lake)) == {ids["A"], ids["B"]}
    assert {n["edge"]["how"] for n in lake["neighbors"]} == {"anchor", "contains"}

    limited = _walk(ctx, token, ids["A"], depth=3, limit=1)
    assert len(limited["neighbors"]) == 1
    assert limited["truncated"] is True


def test_spatial_neighbours_within_the_radius(ctx: ServiceContext) -> None:
    token = token_for(ctx, "ranchi")
    x = observe(ctx, token, "x", {"lat": 23.40, "lng": 85.40})
    # ~22 m north (point anchors sit at their cell's centre, so not closer than a cell)
    y = observe(ctx, token, "y", {"lat": 23.4002, "lng": 85.40})
    near = call(ctx, "memory_neighbors", {"id": x, "radius_m": 40.0}, token)["result"]
    assert [(n["id"], n["edge"]["kind"]) for n in near["neighbors"]] == [(y, "near")]
    assert 12.0 < near["neighbors"][0]["edge"]["distance_m"] < 32.0
    assert (
        call(ctx, "memory_neighbors", {"id": x, "radius_m": 5.0}, token)["result"]["neighbors"]
        == []
    )


def test_deleted_items_are_hidden_unless_asked_for(
    ctx: ServiceContext, graph: dict[str, Any]
) -> None:
    ids, token = graph["ids"], graph["token"]
    item = call(ctx, "memory_get", {"id": ids["D"]}, token)["result"]["item"]
    call(
        ctx,
        "memory_delete",
        {"id": ids["D"], "expected_version": item["version"], "reason": "wrong field"},
        token,
    )
    assert ids["D"] not in _ids(_walk(ctx, token, ids["C"]))
    assert ids["D"] in _ids(_walk(ctx, token, ids["C"], include_inactive=True))


def test_relations_are_the_authoritative_links(ctx: ServiceContext, graph: dict[str, Any]) -> None:
    ids, token = graph["ids"], graph["token"]
    rows = call(ctx, "memory_relations", {"id": ids["C"]}, token)["result"]["relations"]
    kinds = {(r["src_id"], r["dst_id"], r["kind"]) for r in rows}
    assert (ids["B"], ids["C"], "related") in kinds
    assert (ids["C"], ids["D"], "depends_on") in kinds
    assert (ids["C"], "feature:pithoria-forest", "anchored_at") in kinds

    lake = call(ctx, "memory_relations", {"id": "feature:kanke-lake"}, token)["result"]
    assert {(r["src_id"], r["how"]) for r in lake["relations"]} == {
        (ids["A"], "anchor"),
        (ids["B"], "contains"),
    }
    assert lake["total"] == 2
    assert lake["truncated"] is False
    one = call(ctx, "memory_relations", {"id": "feature:kanke-lake", "limit": 1}, token)
    assert len(one["result"]["relations"]) == 1
    assert one["result"]["truncated"] is True

    theirs = call(ctx, "memory_relations", {"id": "feature:kanke-lake"}, graph["other"])
    assert [r["src_id"] for r in theirs["result"]["relations"]] == [ids["E"]]


@pytest.mark.parametrize("name", ["memory_neighbors", "memory_relations"])
def test_typed_errors_and_tokens(ctx: ServiceContext, graph: dict[str, Any], name: str) -> None:
    ids, token = graph["ids"], graph["token"]
    assert code_of(ctx, name, {"id": "01NOSUCHITEM"}, token) == (404, "memory_not_found")
    assert code_of(ctx, name, {"id": "feature:nowhere"}, token) == (404, "entity_not_found")
    assert code_of(ctx, name, {"id": ids["A"]}, None) == (401, "token_missing")
    assert code_of(ctx, name, {"id": ids["A"]}, "em_nope") == (401, "token_invalid")
    # another project's item is absent, not forbidden
    assert code_of(ctx, name, {"id": ids["A"]}, graph["other"]) == (404, "memory_not_found")
    assert code_of(ctx, name, {"id": ids["A"], "limit": 0}, token)[0] == 422
    if name == "memory_neighbors":
        for depth in (0, 7, "2"):
            assert code_of(ctx, name, {"id": ids["A"], "depth": depth}, token) == (
                422,
                "invalid_argument",
            )
        assert code_of(ctx, name, {"id": ids["A"], "limit": 101}, token)[0] == 422
        assert code_of(ctx, name, {"id": ids["A"], "radius_m": 5001.0}, token)[0] == 422


def test_surfaces(ctx: ServiceContext, graph: dict[str, Any]) -> None:
    for name in ("memory_neighbors", "memory_relations"):
        prim = PRIMITIVES[name]
        assert prim.access == "read"
        assert prim.read_only
    # (tests/api/test_mcp.py lists every primitive's MCP tool and checks its annotations)
    assert {"neighbors", "relations"} <= set(VERBS)
    client = TestClient(create_app(ctx, mount_mcp=False), raise_server_exceptions=False)
    body = {"id": "feature:kanke-lake"}
    assert client.post("/v1/memory_relations", json=body).status_code == 401
    ok = client.post(
        "/v1/memory_neighbors",
        json=body,
        headers={"Authorization": f"Bearer {graph['token']}"},
    )
    assert ok.status_code == 200, ok.text
    assert {n["id"] for n in ok.json()["result"]["neighbors"]} >= {graph["ids"]["A"]}
    assert json.loads(ok.text)["receipt"]["snapshot_id"].startswith("memory:ranchi:")
