"""recall's filters: kinds, scopes, source, minConfidence, hasPrimarySource, limit."""

from __future__ import annotations

from api.memory.auth import issue_token
from tests.api.recall.backends import BOTH_BACKENDS
from tests.api.recall.conftest import Memory


@BOTH_BACKENDS
def test_kinds_and_limit(mem: Memory) -> None:
    obs = mem.write("canal breach", "the canal breached near the weir")
    dec = mem.write(
        "canal survey decision", "we decided to survey the canal weekly", type="decision",
        where=None, metadata={"rationale": "breaches"},
    )  # fmt: skip
    assert set(mem.ids("canal")) == {obs["id"], dec["id"]}
    assert mem.ids("canal", kinds=["decision"]) == [dec["id"]]
    assert mem.ids("canal", kinds=["observation", "observation"]) == [obs["id"]]
    assert len(mem.ids("canal", limit=1)) == 1


@BOTH_BACKENDS
def test_scopes_personal_team_project(mem: Memory) -> None:
    proj = mem.write("pump house", "the pump house roof leaks")
    mine = mem.write("pump house note", "my own pump house note", scope="user")
    team = mem.write("pump house team", "the team checks the pump house", scope="team")
    other = issue_token(mem.ctx.memory(), "ranchi", ("read", "write"), actor="agent:other")[0]
    theirs = mem.write("pump house theirs", "another agent's pump house note", scope="user",
                       token=other)  # fmt: skip
    assert set(mem.ids("pump house")) == {proj["id"], mine["id"]}  # project + personal
    assert set(mem.ids("pump house", token=other)) == {proj["id"], theirs["id"]}
    assert mem.ids("pump house", scopes=["team"]) == [team["id"]]
    assert set(mem.ids("pump house", scopes=["project", "team"])) == {proj["id"], team["id"]}


def test_source_confidence_and_primary_source_filter_after_ranking(mem: Memory) -> None:
    index = mem.ctx.overpass_index()
    scene = next(
        i for by_t in index.rows.values() for rows in by_t.values() for row in rows
        for i in row.item_ids
    )  # fmt: skip
    user = mem.write("silt bank", "silt bank silt bank grew", asserted_by="user")
    agent = mem.write("silt bank low", "a silt bank", confidence=0.3)
    sourced = mem.write(
        "silt bank scene", "the silt bank shows in the scene", evidence=[{"kind": "scene",
        "item_id": scene}],
    )  # fmt: skip
    ranked = mem.ids("silt bank")
    assert set(ranked) == {user["id"], agent["id"], sourced["id"]}
    assert mem.ids("silt bank", source=["user"]) == [user["id"]]
    by_agent = mem.ids("silt bank", source=["agent", "nobody"])
    assert by_agent == [i for i in ranked if i in {agent["id"], sourced["id"]}]  # order kept
    assert mem.ids("silt bank", source=["agent:test"]) == ranked  # the writer (actor)
    assert mem.ids("silt bank", source=["connector:none"]) == []
    assert agent["id"] not in mem.ids("silt bank", minConfidence=0.5)
    assert mem.ids("silt bank", hasPrimarySource=True) == [sourced["id"]]
    # the filter runs over the whole ranking, not over the first `limit` hits only
    assert ranked[0] != sourced["id"]
    assert mem.ids("silt bank", hasPrimarySource=True, limit=1) == [sourced["id"]]
    assert mem.ids("silt bank", source=["agent"], limit=1) == by_agent[:1]
