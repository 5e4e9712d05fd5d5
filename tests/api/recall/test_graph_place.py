"""recall's graph lane (relation hops, shared places) and near (a place name, a point, a cell)."""

from __future__ import annotations

from api.dispatch import call_primitive
from tests.api.recall.backends import BOTH_BACKENDS
from tests.api.recall.conftest import Memory


def _relate(mem: Memory, src: dict, dst: dict, kind: str) -> None:
    call_primitive(
        mem.ctx, "memory_relate", {"src_id": src["id"], "dst_id": dst["id"], "kind": kind},
        token=mem.token,
    )  # fmt: skip


@BOTH_BACKENDS
def test_anchor_depth_walks_relations_both_ways(mem: Memory) -> None:
    a = mem.write("sluice gate", "the sluice gate jammed")
    b = mem.write("gate motor", "a motor was ordered", offset=(0.2, 0.2))
    c = mem.write("motor supplier", "the supplier is late", offset=(0.3, 0.3))
    d = mem.write("monsoon schedule", "work waits for the dry season", offset=(0.4, 0.4))
    mem.write("unrelated", "a school opened", offset=(0.5, 0.5))
    _relate(mem, b, a, "refines")  # pointing at the anchor: walked backwards
    _relate(mem, b, c, "depends_on")
    _relate(mem, c, d, "related")
    one = mem.recall("elephants", anchor=a["id"], anchorDepth=1)
    assert [h["id"] for h in one["hits"]] == [b["id"]]
    assert one["lanes"] == ["graph"]
    three = mem.ids("elephants", anchor=a["id"], anchorDepth=3)
    assert three == [b["id"], c["id"], d["id"]]  # nearer hops first
    assert mem.ids("elephants", anchor=a["id"], anchorDepth=3, noGraph=True) == []
    assert mem.recall("elephants", anchor="01NOPE")["notes"]


@BOTH_BACKENDS
def test_items_sharing_a_place_with_the_top_text_hit(mem: Memory) -> None:
    lake = {"place": "Kanke Lake"}
    seed = mem.write("algal bloom", "green algal bloom on the water", where=lake)
    neighbour = mem.write("boat jetty", "the jetty planks are rotten", where=lake)
    mem.write("boat jetty far", "another jetty", offset=(0.5, 0.5))
    got = mem.recall("algal bloom")
    ids = [h["id"] for h in got["hits"]]
    assert ids[:2] == [seed["id"], neighbour["id"]]
    assert "graph" in got["hits"][1]["components"]
    assert mem.ids("algal bloom", noGraph=True) == [seed["id"]]


def test_near_a_place_name_is_resolved_and_reported(mem: Memory) -> None:
    at_lake = mem.write("lake shore", "the lake shore flooded", where={"place": "Kanke Lake"})
    far = mem.write("lake shore far", "a lake shore flooded elsewhere", offset=(0.5, 0.5))
    got = mem.recall("lake shore flooded", near={"place": "Kanke Lake", "radius_m": 3000})
    assert [h["id"] for h in got["hits"]] == [at_lake["id"]]
    near = got["resolved"]["near"]
    assert near["place"] == "Kanke Lake"
    assert near["resolved_to"]
    assert near["resolution"]
    assert "place" in got["hits"][0]["components"]
    lat, lng = mem.centre
    point = mem.ids(
        "lake shore flooded", near={"lat": lat + 0.5, "lng": lng + 0.5, "radius_m": 2000}
    )
    assert point == [far["id"]]
    cell = mem.ids("lake shore", near={"cell": far["where"]["cell"], "radius_m": 500})
    assert cell == [far["id"]]
    # only near, no words: the place lane ranks alone, nearer first
    only = mem.recall("what is here?", near={"lat": lat + 0.5, "lng": lng + 0.5, "radius_m": 5000})
    assert [h["id"] for h in only["hits"]] == [far["id"]]
    assert only["weak_match"] is False


@BOTH_BACKENDS
def test_near_filters_every_lane_not_only_the_top_text_hits(mem: Memory) -> None:
    import datetime as dt

    from store.memory.interface import WriteMeta
    from store.memory.model import Anchor
    from tests.store.memory.items import new_item

    local = mem.write("bank", "a river")  # the oldest local item, a weak text match
    store = mem.ctx.memory()
    at = dt.datetime.now(dt.UTC)
    lat, lng = mem.centre
    here = Anchor("point", None, (lat, lng, lat, lng), local["where"]["cell"])
    for i in range(210):  # newer local items: they fill the place lane's candidates
        item = new_item(f"school {i}", statement="a school", tags=("school",), anchor=here)
        store.create("ranchi", item, WriteMeta("agent:bulk", at))
    for i in range(210):  # far away, better text matches: they fill the text lane's
        store.create("ranchi", new_item(f"river water {i}"), WriteMeta("agent:bulk", at))
    got = mem.recall("river water", near={"lat": lat, "lng": lng, "radius_m": 1000}, explain=True)
    top = got["hits"][0]
    assert top["id"] == local["id"], (
        top["name"],
        top["components"],
        got["_meta"],
        got["hits"][1:3],
    )
