"""The name lane: entity names (features, cities) and item titles matched to the query,
relative geography ("the reservoir north-east of the town"), project scoping."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from api.context import ServiceContext
from api.recall.lanes import RecallQuery
from api.recall.names import SCORE_NAME, SCORE_RELATIVE, match_entities, name_lane
from store.memory.model import ItemFilter
from tests.api.recall.graph_helpers import centre, make_ctx, observe, token_for


@pytest.fixture
def ctx(tiny_sample_dir: Path, tmp_path: Path) -> ServiceContext:
    return make_ctx(tiny_sample_dir, tmp_path, tmp_path / "memory.sqlite")


@pytest.fixture
def items(ctx: ServiceContext) -> dict[str, str]:
    token = token_for(ctx, "ranchi")
    forest = centre(ctx, "feature:pithoria-forest")
    lake = centre(ctx, "feature:kanke-lake")
    out = {
        "lake_named": observe(ctx, token, "water level high", {"place": "Kanke Lake"}),
        "lake_point": observe(ctx, token, "boats out", {"lat": lake[0], "lng": lake[1]}),
        "forest": observe(ctx, token, "sal felled", {"lat": forest[0], "lng": forest[1]}),
        "titled": observe(
            ctx,
            token,
            "monsoon embankment breach",
            {"lat": 23.40, "lng": 85.40},
            statement="the embankment gave way in the monsoon",
        ),
        "city": observe(ctx, token, "busy market day", {"place": "Ranchi"}),
    }
    other = token_for(ctx, "elsewhere")
    out["theirs"] = observe(ctx, other, "their lake note", {"place": "Kanke Lake"})
    return out


def _lane(ctx: ServiceContext, text: str, project: str = "ranchi") -> dict[str, float]:
    hits = name_lane(ctx, ctx.memory(), RecallQuery(project=project, text=text, where=ItemFilter()))
    assert hits.lane == "name"
    assert hits.ran
    return dict(hits.scores)


def test_a_query_naming_a_feature_finds_the_items_linked_to_it(
    ctx: ServiceContext, items: dict[str, str]
) -> None:
    for text in ("what do we know about Kanke Lake?", "KANKE LAKES", "kanke lak levels"):
        scores = _lane(ctx, text)
        assert {items["lake_named"], items["lake_point"]} <= set(scores), text
        assert items["forest"] not in scores
        assert items["theirs"] not in scores  # never another project's items
    exact = _lane(ctx, "Kanke Lake")
    assert exact[items["lake_named"]] == SCORE_NAME
    assert _lane(ctx, "kanke lak")[items["lake_named"]] < SCORE_NAME  # near spelling: lower
    assert _lane(ctx, "notes from Ranchi") == {items["city"]: pytest.approx(0.63)}
    # the other project sees its own item through the same entity
    assert set(_lane(ctx, "Kanke Lake", project="elsewhere")) == {items["theirs"]}


def test_relative_geography_finds_the_feature_in_that_direction(
    ctx: ServiceContext, items: dict[str, str]
) -> None:
    [match] = match_entities(ctx, "the reservoir north-east of the town")
    assert match.entity.id == "feature:kanke-lake"
    assert match.how == "relative"
    assert "Kanke Bazar" in match.why
    scores = _lane(ctx, "the reservoir north-east of the town")
    assert scores == {
        items["lake_named"]: SCORE_RELATIVE,
        items["lake_point"]: SCORE_RELATIVE,
    }
    # the lake is not south-west of the town: nothing (not the only lake as a guess)
    assert _lane(ctx, "the reservoir south-west of the town") == {}
    west = _lane(ctx, "the forest west of the lake")
    assert west == {items["forest"]: SCORE_RELATIVE}


def test_titles_and_nothing_named(ctx: ServiceContext, items: dict[str, str]) -> None:
    scores = _lane(ctx, "embankment breach")
    assert set(scores) == {items["titled"]}
    assert 0 < scores[items["titled"]] <= 0.8
    hits = name_lane(
        ctx, ctx.memory(), RecallQuery(project="ranchi", text="zzz qqq", where=ItemFilter())
    )
    assert dict(hits.scores) == {}
    assert hits.note == "no entity name or item title in the query"


def test_the_where_filter_is_applied(ctx: ServiceContext, items: dict[str, Any]) -> None:
    only_places = ItemFilter(types=("decision",))
    hits = name_lane(
        ctx, ctx.memory(), RecallQuery(project="ranchi", text="Kanke Lake", where=only_places)
    )
    assert dict(hits.scores) == {}
