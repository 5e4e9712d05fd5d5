"""recall through the one dispatch: token scoping, the receipt, never a write, weak matches."""

from __future__ import annotations

from api.memory.auth import issue_token
from api.receipts import verify_answer
from tests.api.recall.backends import BOTH_BACKENDS
from tests.api.recall.conftest import Memory


@BOTH_BACKENDS
def test_recall_finds_ranks_and_signs(mem: Memory) -> None:
    flood = mem.write("fields under water", "the paddy fields beside the river were flooded")
    mem.write("road closed", "the road to the market was closed for repairs")
    answer = mem.recall("Were the paddy fields flooded?")
    assert answer["hits"][0]["id"] == flood["id"]
    top = answer["hits"][0]
    assert top["item"]["id"] == flood["id"]
    assert top["kind"] == "observation"
    assert 0 < top["fusedScore"] <= 1
    assert set(top["components"]) >= {"fts"}
    assert top["verdict"] == "unknown"
    assert top["place"]["cell"]
    assert answer["lanes"][0] == "fts"
    assert answer["fusion"] == "weighted"
    assert answer["weak_match"] is False
    assert answer["degraded"] is True  # no vector lane here, and the answer says so
    assert any("vector" in n for n in answer["notes"])
    assert verify_answer(answer).ok
    head = answer["head"]
    assert answer["receipt"]["snapshot_id"] == f"memory:ranchi:{head['seq']}:{head['hash']}"
    assert flood["where"]["cell"] in answer["receipt"]["cells"]


@BOTH_BACKENDS
def test_a_subject_not_in_memory_is_a_weak_match(mem: Memory) -> None:
    mem.write("fields under water", "the paddy fields beside the river were flooded")
    mem.write("road closed", "the road to the market was closed for repairs")
    answer = mem.recall("what is the price of bitcoin on the stock exchange?")
    assert answer["weak_match"] is True
    assert answer["hits"] == []  # no content word matches: nothing confident to return
    answer = mem.recall("flooded bitcoin exchange price volatility")
    assert answer["weak_match"] is True  # one word of five: a weak match, said so
    assert mem.recall("paddy fields flooded")["weak_match"] is False


@BOTH_BACKENDS
def test_a_token_sees_only_its_project_and_recall_never_writes(mem: Memory) -> None:
    mine = mem.write("fields under water", "the paddy fields were flooded")
    other = issue_token(mem.ctx.memory(), "elsewhere", ("read", "write"), actor="agent:x")[0]
    theirs = mem.write("paddy flooded too", "the paddy fields were flooded", token=other)
    assert mem.ids("paddy flooded") == [mine["id"]]
    assert mem.ids("paddy flooded", token=other) == [theirs["id"]]
    assert mem.error({"query": "paddy"}, token=None) == (401, "token_missing")
    assert mem.error({"query": "paddy"}, token="em_nope") == (401, "token_invalid")
    reader = issue_token(mem.ctx.memory(), "ranchi", ("read",))[0]
    assert mem.ids("paddy", token=reader) == [mine["id"]]
    store = mem.ctx.memory()
    before = store.head("ranchi"), store.history("ranchi")
    mem.recall("paddy", explain=True, near={"lat": mem.centre[0], "lng": mem.centre[1],
                                            "radius_m": 1000}, at="2024-08-10", asOf="2030-01-01")  # fmt: skip
    assert (store.head("ranchi"), store.history("ranchi")) == before
