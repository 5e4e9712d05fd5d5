"""ask and what_is_here consult memory for a caller with a token: the top items near the
located place, each with its corroboration verdict and fact ids, cited by id in one
sentence; without a token they say memory was not consulted; never another project's."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from api.context import ServiceContext
from api.recall.consult import NOT_CONSULTED
from api.receipts import verify_answer
from api.rest import create_app
from tests.api.recall.graph_helpers import call, code_of, make_ctx, observe, token_for

QUESTION = {"description": "was it flooded in 2024?", "place": "Jumar River"}


@pytest.fixture
def ctx(tiny_store: Any, tmp_path: Path) -> ServiceContext:
    return make_ctx(tiny_store.sample, tiny_store.data, tmp_path / "memory.sqlite")


@pytest.fixture
def flood(ctx: ServiceContext, tiny_store: Any) -> dict[str, Any]:
    ev = tiny_store.event("flood")["centre"]
    token = token_for(ctx, "ranchi")
    where = {"lat": ev["lat"], "lng": ev["lng"]}
    corroborated = observe(
        ctx,
        token,
        "fields under water beside the river",
        where,
        valid_at="2024-08-10",
        importance=0.9,
        claim={"band": "indices.ndwi", "op": "gt", "value": 0, "date": "2024-08-10"},
    )
    plain = observe(
        ctx,
        token,
        "river over its banks",
        {"lat": ev["lat"] + 0.0003, "lng": ev["lng"]},
        valid_at="2024-08-10",
    )
    other = token_for(ctx, "elsewhere")
    theirs = observe(ctx, other, "their flood note", where, valid_at="2024-08-10")
    got = call(ctx, "memory_get", {"id": corroborated}, token)["result"]["item"]
    assert got["verdict"] == "corroborated"
    return {
        "token": token,
        "other": other,
        "corroborated": corroborated,
        "plain": plain,
        "theirs": theirs,
        "facts": got["verdict_facts"],
    }


def test_ask_with_a_token_cites_memory_next_to_the_satellite_facts(
    ctx: ServiceContext, flood: dict[str, Any]
) -> None:
    a = call(ctx, "ask", QUESTION, flood["token"])
    assert a["status"] == "answered"
    memory = a["memory"]
    assert memory["consulted"] is True
    ids = [i["id"] for i in memory["items"]]
    assert ids == [flood["corroborated"], flood["plain"]]  # importance ranks it first
    assert flood["theirs"] not in str(a)
    first = memory["items"][0]
    assert first["verdict"] == "corroborated"
    assert first["verdict_facts"] == flood["facts"]
    sentence = memory["sentence"]
    assert sentence.startswith("Two observations near Jumar River report:")
    assert flood["corroborated"] in sentence
    assert flood["plain"] in sentence
    assert "the NDWI record corroborates one of them" in sentence
    assert "one carries no claim to check" in sentence
    assert a["answer"].endswith(sentence)
    assert set(flood["facts"]) <= set(a["receipt"]["fact_ids"])
    assert memory["head"]["state"].startswith("memory:ranchi:")
    assert verify_answer(a).ok

    # the other project's token sees its own note, not ranchi's
    theirs = call(ctx, "ask", QUESTION, flood["other"])["memory"]
    assert [i["id"] for i in theirs["items"]] == [flood["theirs"]]


def test_ask_without_a_token_says_memory_was_not_consulted(
    ctx: ServiceContext, flood: dict[str, Any]
) -> None:
    a = call(ctx, "ask", QUESTION, None)
    assert a["status"] == "answered"
    assert a["memory"]["consulted"] is False
    assert a["memory"]["note"] == NOT_CONSULTED
    assert a["memory"]["items"] == []
    assert a["answer"].endswith("Memory was not consulted (no token).")
    assert flood["corroborated"] not in str(a)
    assert set(flood["facts"]).isdisjoint(
        set(a["receipt"]["fact_ids"]) - {f for r in a["results"] for f in _facts(r)}
    )
    # a token that is presented must be valid
    assert code_of(ctx, "ask", QUESTION, "em_nope") == (401, "token_invalid")


def _facts(result: dict[str, Any]) -> list[str]:
    return list(((result.get("answer") or {}).get("receipt") or {}).get("fact_ids", ()))


def test_what_is_here_consults_memory_with_a_token(
    ctx: ServiceContext, flood: dict[str, Any]
) -> None:
    with_token = call(ctx, "what_is_here", {"place": "Jumar River"}, flood["token"])
    assert [i["id"] for i in with_token["memory"]["items"]] == [
        flood["corroborated"],
        flood["plain"],
    ]
    assert "Jumar River" in with_token["memory"]["sentence"]
    without = call(ctx, "what_is_here", {"place": "Jumar River"}, None)
    assert without["memory"]["consulted"] is False
    assert without["summary"] == with_token["summary"]  # the cube's part is unchanged

    client = TestClient(create_app(ctx, mount_mcp=False), raise_server_exceptions=False)
    rest = client.post(
        "/v1/ask", json=QUESTION, headers={"Authorization": f"Bearer {flood['token']}"}
    )
    assert rest.status_code == 200, rest.text
    assert flood["corroborated"] in rest.json()["memory"]["sentence"]
