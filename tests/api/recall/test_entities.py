"""Entities: the sample's named features and gazetteer places, with ids stable across
processes, and the links items get from their stored anchors."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from api.context import ServiceContext
from api.recall.entities import (
    FEATURE_LINK_M,
    feature_entities,
    get_entity,
    is_entity_id,
    links_of,
)
from tests.api.recall.graph_helpers import call, centre, code_of, make_ctx, observe, token_for

REPO = Path(__file__).resolve().parents[3]


@pytest.fixture
def ctx(tiny_sample_dir: Path, tmp_path: Path) -> ServiceContext:
    return make_ctx(tiny_sample_dir, tmp_path, tmp_path / "memory.sqlite")


def test_features_and_places_are_entities_with_stable_ids(
    ctx: ServiceContext, tiny_sample_dir: Path
) -> None:
    ids = [e.id for e in feature_entities(ctx)]
    assert "feature:kanke-lake" in ids
    assert "feature:jumar-river" in ids
    lake = get_entity(ctx, "feature:kanke-lake")
    assert lake is not None
    assert lake.kind == "lake"
    assert lake.name == "Kanke Lake"
    assert lake.bbox is not None
    assert lake.bbox[0] < lake.lat < lake.bbox[2]
    ranchi = get_entity(ctx, "place:1258526")
    assert ranchi is not None
    assert ranchi.name == "Ranchi"
    assert ranchi.kind == "city"
    assert get_entity(ctx, "feature:nowhere") is None
    assert get_entity(ctx, "place:0") is None
    assert is_entity_id("feature:kanke-lake")
    assert not is_entity_id("01JABCDEF")

    # Another process, another context over the same manifest: the same ids.
    script = (
        "import json, sys\n"
        "from api.context import ServiceContext\n"
        "from api.recall.entities import feature_entities, get_entity\n"
        "ctx = ServiceContext(sys.argv[1], manifest_path=sys.argv[2])\n"
        "print(json.dumps([[e.id, e.name] for e in feature_entities(ctx)]"
        " + [[get_entity(ctx, 'place:1258526').name]]))\n"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    out = subprocess.run(
        [
            sys.executable,
            "-c",
            script,
            str(tiny_sample_dir),
            str(tiny_sample_dir / "manifest.json"),
        ],
        capture_output=True,
        text=True,
        check=True,
        env=env,
        timeout=120,
    )
    theirs = json.loads(out.stdout)
    assert theirs[:-1] == [[e.id, e.name] for e in feature_entities(ctx)]
    assert theirs[-1] == ["Ranchi"]


def test_an_item_anchored_by_place_name_links_to_the_entity(ctx: ServiceContext) -> None:
    token = token_for(ctx, "ranchi")
    named = observe(ctx, token, "water level high", {"place": "Kanke Lake"})
    item = ctx.memory().get("ranchi", named)
    assert item is not None
    assert [(lk.entity_id, lk.how) for lk in links_of(ctx, item)] == [
        ("feature:kanke-lake", "anchor")
    ]
    city = observe(ctx, token, "busy market day", {"place": "Ranchi"})
    city_item = ctx.memory().get("ranchi", city)
    assert city_item is not None
    assert [lk.entity_id for lk in links_of(ctx, city_item)] == ["place:1258526"]

    got = call(ctx, "memory_get", {"id": "feature:kanke-lake"}, token)["result"]
    assert got["entity"]["name"] == "Kanke Lake"
    assert got["entity"]["kind"] == "lake"
    assert got["entity"]["bbox"]["min_lat"] < centre(ctx, "feature:kanke-lake")[0]
    assert got["linked_items"] == [named]
    assert got["relations"] == [
        {
            "src_id": named,
            "dst_id": "feature:kanke-lake",
            "kind": "anchored_at",
            "how": "anchor",
            "distance_m": 0.0,
        }
    ]
    assert call(ctx, "memory_get", {"id": "place:1258526"}, token)["result"]["linked_items"] == [
        city
    ]
    # item ids keep working as before
    assert call(ctx, "memory_get", {"id": named}, token)["result"]["item"]["id"] == named


def test_point_items_link_to_the_feature_containing_or_nearest(ctx: ServiceContext) -> None:
    token = token_for(ctx, "ranchi")
    lake = get_entity(ctx, "feature:kanke-lake")
    assert lake is not None
    assert lake.bbox is not None
    inside = observe(ctx, token, "inside", {"lat": lake.lat, "lng": lake.lng})
    # ~70 m north-east of the lake's outline, further from every other feature
    beside = observe(ctx, token, "beside", {"lat": lake.bbox[2] + 0.0006, "lng": lake.lng + 0.0004})
    far = observe(ctx, token, "far", {"lat": 23.40, "lng": 85.40})
    store = ctx.memory()

    def links(item_id: str) -> list[tuple[str, str]]:
        item = store.get("ranchi", item_id)
        assert item is not None
        return [
            (lk.entity_id, lk.how)
            for lk in links_of(ctx, item)
            if lk.entity_id.startswith("feature:")
        ]

    assert links(inside) == [("feature:kanke-lake", "contains")]
    assert links(beside) == [("feature:kanke-lake", "nearest")]
    # a brief's links (remembered by its stored anchor) are its item's, read again or not
    for item_id in (inside, beside, far):
        item = store.get("ranchi", item_id)
        assert item is not None
        for only in (None, "feature", "place"):
            want = links_of(ctx, item, only)  # type: ignore[arg-type]
            for _ in range(2):
                (brief,) = store.get_briefs("ranchi", [item_id])
                assert links_of(ctx, brief, only) == want  # type: ignore[arg-type]
    beside_item = store.get("ranchi", beside)
    assert beside_item is not None
    d = next(lk.distance_m for lk in links_of(ctx, beside_item))
    assert 30 < d <= FEATURE_LINK_M
    assert links(far) == []
    here = centre(ctx, "feature:kanke-reference-field")
    field = observe(ctx, token, "field", {"lat": here[0], "lng": here[1]})
    assert links(field) == [("feature:kanke-reference-field", "contains")]
    linked = call(ctx, "memory_get", {"id": "feature:kanke-lake"}, token)["result"]["linked_items"]
    assert sorted(linked) == sorted([inside, beside])


def test_entity_get_errors_and_token_scoping(ctx: ServiceContext) -> None:
    token = token_for(ctx, "ranchi")
    observe(ctx, token, "water level high", {"place": "Kanke Lake"})
    assert code_of(ctx, "memory_get", {"id": "feature:nowhere"}, token) == (404, "entity_not_found")
    assert code_of(ctx, "memory_get", {"id": "place:0"}, token) == (404, "entity_not_found")
    assert code_of(ctx, "memory_get", {"id": "feature:kanke-lake"}, None) == (401, "token_missing")
    other = token_for(ctx, "elsewhere")
    seen: dict[str, Any] = call(ctx, "memory_get", {"id": "feature:kanke-lake"}, other)["result"]
    assert seen["entity"]["id"] == "feature:kanke-lake"
    assert seen["linked_items"] == []
    assert seen["relations"] == []
