"""recall's answer: fusion modes, compact, maxTokens, explain; and every bad input typed."""

from __future__ import annotations

import pytest

from tests.api.recall.conftest import Memory


def _three(mem: Memory) -> list[dict]:
    return [
        mem.write("dam spillway", "the dam spillway opened at noon " * 3),
        mem.write("dam crest", "cracks along the dam crest " * 6),
        mem.write("dam gauge", "the dam gauge reads high " * 9),
    ]


def test_fusion_modes(mem: Memory) -> None:
    _three(mem)
    weighted = mem.recall("dam spillway")
    rrf = mem.recall("dam spillway", fusion="rrf")
    assert weighted["fusion"] == "weighted"
    assert rrf["fusion"] == "rrf"
    assert weighted["hits"][0]["fusedScore"] == 1.0  # normalised: the best text hit is 1
    top = rrf["hits"][0]
    assert top["fusedScore"] == pytest.approx(sum(top["components"].values()), abs=1e-5)
    assert top["components"]["fts"] == pytest.approx(1 / 61, abs=1e-6)  # rank 1 in the text lane
    assert all(v <= 1 / 61 + 1e-9 for h in rrf["hits"] for v in h["components"].values())
    assert weighted["hits"][0]["id"] == rrf["hits"][0]["id"]


def test_compact_max_tokens_and_explain(mem: Memory) -> None:
    _three(mem)
    compact = mem.recall("dam", compact=True)
    assert set(compact["hits"][0]) == {"id", "name", "kind", "snippet", "fusedScore", "entities"}
    full = mem.recall("dam")
    assert len(full["hits"]) == 3
    assert "_meta" not in full or full["_meta"] is None
    small = mem.recall("dam", maxTokens=1)
    assert [h["id"] for h in small["hits"]] == [full["hits"][0]["id"]]  # the top hit is kept
    assert any("maxTokens" in n for n in small["notes"])
    two = mem.recall("dam", compact=True, maxTokens=len(str(compact["hits"][:2])) // 4 + 5)
    assert 1 <= len(two["hits"]) < 3
    explained = mem.recall("dam", explain=True)
    meta = explained["_meta"]
    assert meta["lanes"]["fts"]["candidates"] == 3
    assert meta["lanes"]["time"]["ran"] is False
    assert meta["wall_ms"] >= 0
    assert meta["visible_candidates"] == 3


@pytest.mark.parametrize(
    ("args", "code"),
    [
        ({"query": "x", "scopes": ["galaxy"]}, "unknown_scope"),
        ({"query": "x", "scopes": []}, "unknown_scope"),
        ({"query": "x", "kinds": ["episode"]}, "unknown_kind"),
        ({"query": "x", "anchorDepth": 0}, "invalid_argument"),
        ({"query": "x", "anchorDepth": 7}, "invalid_argument"),
        ({"query": "x", "asOfEventUID": 1, "asOf": "2024-01-01"}, "conflicting_time_anchors"),
        ({"query": "x", "asOfEventUID": 1, "at": "2024-01-01"}, "conflicting_time_anchors"),
        ({"query": "x", "asOfEventUID": 999}, "event_not_found"),
        ({"query": "x", "asOfEventUID": "01NOPE"}, "event_not_found"),
        ({"query": "x", "asOfEventUID": 0}, "invalid_event"),
        ({"query": "x", "currentDate": "next tuesday", "rewriteQuery": True},
         "invalid_current_date"),
        ({"query": "x", "at": "yesterday"}, "invalid_date"),
        ({"query": "x", "asOf": "2024-13-45"}, "invalid_date"),
        ({"query": "x", "near": {"lat": 23.3, "lng": 85.3, "radius_m": 1e6}}, "radius_too_large"),
        ({"query": "x", "near": {"lat": 23.3, "lng": 85.3, "radius_m": 0}}, "invalid_near"),
        ({"query": "x", "near": {"lat": 23.3, "radius_m": 10}}, "invalid_near"),
        ({"query": "x", "near": {"radius_m": 10}}, "invalid_near"),
        ({"query": "x", "near": {"place": "Kanke Lake", "cell": "x", "radius_m": 10}},
         "invalid_near"),
        ({"query": "x", "near": {"lat": 23.3, "lng": 85.3}}, "invalid_argument"),
        ({"query": "x", "near": {"cell": "zzzz", "radius_m": 10}}, "invalid_cell"),
        ({"query": "x", "near": {"place": "Atlantis Under The Sea Nowhere", "radius_m": 10}},
         "place_not_found"),
        ({"query": "x" * 2001}, "invalid_argument"),
        ({"query": "   "}, "invalid_query"),
        ({"query": "x", "limit": 0}, "invalid_argument"),
        ({"query": "x", "limit": 101}, "invalid_argument"),
        ({"query": "x", "fusion": "max"}, "invalid_argument"),
        ({"query": "x", "bogus": 1}, "invalid_argument"),
    ],
)  # fmt: skip
def test_bad_input_is_a_typed_error(mem: Memory, args: dict, code: str) -> None:
    status, got = mem.error(args)
    assert got == code
    assert status in (404, 422)
