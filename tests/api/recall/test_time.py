"""recall on both time axes: valid time (at), transaction time (asOf, asOfEventUID), and the
relative-date rewrite."""

from __future__ import annotations

import datetime as dt

from tests.api.recall.backends import BOTH_BACKENDS
from tests.api.recall.conftest import Memory


def _update(mem: Memory, old: dict, statement: str) -> dict:
    from api.dispatch import call_primitive

    args = {
        "id": old["id"], "expected_version": old["version"], "type": "observation",
        "title": old["title"], "statement": statement, "tags": ["note"],
        "where": {"lat": mem.centre[0], "lng": mem.centre[1]},
    }  # fmt: skip
    return call_primitive(mem.ctx, "memory_update", args, token=mem.token)["result"]["item"]


@BOTH_BACKENDS
def test_what_did_we_know_across_a_supersession(mem: Memory) -> None:
    low = mem.write("reservoir level", "the reservoir level is low after the dry spell")
    high = _update(mem, low, "the reservoir level is high after the monsoon")
    assert mem.ids("reservoir level") == [high["id"]]
    then = mem.recall("reservoir level", asOf=low["created_at"])
    assert [h["id"] for h in then["hits"]] == [low["id"]]
    was = then["hits"][0]["item"]
    assert was["status"] == "active"  # as it was then: not yet superseded
    assert was["superseded_by"] is None
    assert then["resolved"]["asOf"] == low["created_at"]
    assert mem.ids("reservoir level", asOf=high["created_at"]) == [high["id"]]
    assert mem.ids("reservoir level", asOf="2000-01-01") == []
    both = mem.recall("reservoir level", include_superseded=True)["hits"]
    assert {h["id"]: h["item"]["status"] for h in both} == {
        low["id"]: "superseded",
        high["id"]: "active",
    }
    # as of a history entry: its seq, or an item id (that item's creation)
    assert mem.ids("reservoir level", asOfEventUID=1) == [low["id"]]
    assert mem.ids("reservoir level", asOfEventUID="1") == [low["id"]]
    by_item = mem.recall("reservoir level", asOfEventUID=low["id"])
    assert [h["id"] for h in by_item["hits"]] == [low["id"]]
    assert by_item["resolved"]["asOfEvent"]["seq"] == 1


@BOTH_BACKENDS
def test_deleted_items_show_as_of_before_the_deletion(mem: Memory) -> None:
    from api.dispatch import call_primitive

    gone = mem.write("broken culvert", "the culvert under the road is broken")
    call_primitive(
        mem.ctx, "memory_delete",
        {"id": gone["id"], "expected_version": 1, "reason": "wrong place"}, token=mem.token,
    )  # fmt: skip
    assert mem.ids("culvert") == []
    assert mem.ids("culvert", asOf=gone["created_at"]) == [gone["id"]]
    assert mem.ids("culvert", include_superseded=True) == [gone["id"]]


@BOTH_BACKENDS
def test_at_ranks_the_item_valid_then_first(mem: Memory) -> None:
    march = mem.write("river bank", "erosion of the river bank", valid_at="2024-03-01")
    august = mem.write("river bank", "erosion of the river bank", valid_at="2024-08-10")
    timeless = mem.write("river bank", "erosion of the river bank")
    got = mem.recall("river bank erosion", at="2024-08-12")
    assert [h["id"] for h in got["hits"]][:2] == [august["id"], march["id"]]
    assert timeless["id"] in [h["id"] for h in got["hits"]]  # no valid time: kept
    assert got["hits"][0]["components"]["time"] == 1.0
    assert mem.ids("river bank erosion", at="2024-03-02")[0] == march["id"]


def test_relative_dates_fill_at_and_are_reported(mem: Memory) -> None:
    mem.write("river bank", "erosion of the river bank", valid_at="2024-03-01")
    august = mem.write("river bank", "erosion of the river bank", valid_at="2024-08-10")
    got = mem.recall(
        "river bank erosion two weeks ago", currentDate="2024-08-24", rewriteQuery=True
    )
    rewrite = got["resolved"]["rewrite"]
    assert rewrite["phrase"] == "two weeks ago"
    assert rewrite["resolved"] == "2024-08-10T00:00:00Z"
    assert rewrite["query"] == "river bank erosion"
    assert rewrite["filled"] == "at"
    assert got["resolved"]["at"] == "2024-08-10T00:00:00Z"
    assert got["hits"][0]["id"] == august["id"]
    march = mem.recall("erosion in March", currentDate="2024-08-24", rewriteQuery=True)
    assert march["resolved"]["at"] == "2024-03-15T12:00:00Z"
    kept = mem.recall("erosion in March", currentDate="2024-08-24", rewriteQuery=True,
                      at="2024-08-10")  # fmt: skip
    assert kept["resolved"]["at"] == "2024-08-10T00:00:00Z"  # at set: the rewrite does not fill
    assert kept["resolved"]["rewrite"]["filled"] is None
    ignored = mem.recall("erosion last month", currentDate="2024-08-24")
    assert ignored["resolved"]["at"] is None
    assert any("rewriteQuery" in n for n in ignored["notes"])
    assert dt.datetime.fromisoformat(august["created_at"])  # written now, valid in August
