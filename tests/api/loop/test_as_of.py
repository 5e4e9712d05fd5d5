"""as_of on every cube primitive: a newer snapshot changes a value, as_of answers the old one.

One copy of the tiny store gets one more commit that halves NDVI over the clearing
cell's storage block (every tslot). The tip then answers the halved values; the
same call with ``as_of`` the snapshot before that commit (its id, or a time) answers
the old values and names the old snapshot. is_like reads the store's own history:
the snapshot before the 2024 Tessera vintage was written compares 2023 only.
"""

from __future__ import annotations

import datetime as dt
import shutil
from pathlib import Path
from typing import Any

import pytest

from api.context import ServiceContext
from api.dispatch import run
from api.errors import ApiError
from api.queries.similar import snapshot_vintages
from api.receipts import Signer
from store import address
from store.cube import CubeReader, CubeWriter


class TwoSnapshots:
    """The copy, its context, the snapshot before the change and the tip after it."""

    def __init__(self, ctx: ServiceContext, old: str, new: str, cell: str, tslots: list[int]):
        self.ctx = ctx
        self.old = old
        self.new = new
        self.cell = cell
        self.tslots = tslots


@pytest.fixture(scope="module")
def two(tiny_store: Any, tmp_path_factory: pytest.TempPathFactory) -> TwoSnapshots:
    data: Path = tmp_path_factory.mktemp("as_of") / "data"
    shutil.copytree(tiny_store.data, data, symlinks=True)
    c = tiny_store.event("forest_clearing")["centre"]
    cell = address.encode(c["lat"], c["lng"])
    geo = address.decode(address.parse_cell(cell))
    reader = CubeReader(data)
    old = reader.snapshot_id
    col = reader.column("indices.ndvi", geo.lat_q, geo.lng_q)
    with CubeWriter(data).transaction("test|halve-ndvi", message="halve ndvi") as tx:
        tx.write("indices.ndvi", col.tslots, col.lat_q0, col.lng_q0, col.values * 0.5)
    new = CubeReader(data).snapshot_id
    assert new != old
    ctx = ServiceContext(data, signer=Signer.generate(), tip_check_seconds=0.0)
    tip = run(ctx, "trajectory", {"cell": cell, "band": "ndvi"})
    return TwoSnapshots(ctx, old, new, cell, tip.valid_tslots)


def _both(two: TwoSnapshots, name: str, args: dict[str, Any]) -> tuple[Any, Any]:
    """The tip's answer and the answer as of the old snapshot (checked to name it)."""
    now = run(two.ctx, name, args)
    then = run(two.ctx, name, {**args, "as_of": two.old})
    assert now.snapshot_id == two.new
    assert then.snapshot_id == two.old
    assert then.receipt.snapshot_id == two.old
    return now, then


def test_trajectory_as_of(two: TwoSnapshots) -> None:
    now, then = _both(two, "trajectory", {"cell": two.cell, "band": "ndvi"})
    old = {p.tslot: p.value for p in then.points if p.value is not None}
    assert old
    for p in now.points:
        if p.value is not None:
            assert p.value == pytest.approx(old[p.tslot] * 0.5)


def test_did_change_as_of(two: TwoSnapshots) -> None:
    window = [two.tslots[0], two.tslots[-1]]
    now, then = _both(two, "did_change", {"cell": two.cell, "band": "ndvi", "window": window})
    assert then.delta != 0
    assert now.delta == pytest.approx(then.delta * 0.5)
    assert then.start.value == pytest.approx(now.start.value * 2)


def test_confirm_as_of(two: TwoSnapshots) -> None:
    claim = {"band": "ndvi", "op": "gt", "value": -1.0, "agg": "mean", "window": [0, 60000]}
    now, then = _both(two, "confirm", {"cell": two.cell, "claim": claim})
    assert then.aggregate is not None
    assert now.aggregate == pytest.approx(then.aggregate * 0.5)


def test_what_is_here_as_of(two: TwoSnapshots) -> None:
    now, then = _both(two, "what_is_here", {"cell": two.cell})
    old = {x.band: x for x in then.latest}["indices.ndvi"]
    new = {x.band: x for x in now.latest}["indices.ndvi"]
    assert old.value is not None
    assert old.tslot == new.tslot
    assert new.value == pytest.approx(old.value * 0.5)
    assert old.fact_id != new.fact_id


def test_area_over_time_as_of(two: TwoSnapshots) -> None:
    geo = address.decode(address.parse_cell(two.cell))
    d = 0.0003  # a few cells around the clearing cell, inside its block
    dates = [dt.date(1970, 1, 1) + dt.timedelta(days=t) for t in (two.tslots[0], two.tslots[-1])]
    args = {
        "bbox": [geo.lat - d, geo.lng - d, geo.lat + d, geo.lng + d],
        "start_date": dates[0].isoformat(),
        "end_date": dates[1].isoformat(),
        "index": "ndvi",
        "chart": False,
        "clear_fraction": 0.0,
    }
    now, then = _both(two, "area_over_time", args)
    old = {s.tslot: s.median for s in then.areas[0].scenes}
    assert old
    for s in now.areas[0].scenes:
        assert s.median == pytest.approx(old[s.tslot] * 0.5)


def test_read_cell_as_of_a_time(two: TwoSnapshots) -> None:
    when = two.ctx.snapshot_time(two.old)
    assert when is not None
    args = {"cell": two.cell, "bands": ["ndvi"], "tslot": two.tslots[-1]}
    now = run(two.ctx, "read_cell", args)
    then = run(two.ctx, "read_cell", {**args, "as_of": when.isoformat()})
    assert then.snapshot_id == two.old
    assert now.values[0].value == pytest.approx(then.values[0].value * 0.5)


def test_is_like_as_of(two: TwoSnapshots) -> None:
    snaps = CubeReader(two.ctx.data_dir).list_snapshots()
    years = {
        s.id: snapshot_vintages(CubeReader(two.ctx.data_dir, snapshot_id=s.id)) for s in snaps[:4]
    }
    before = next(sid for sid, ys in years.items() if ys and len(ys) < len(years[two.new]))
    geo = address.decode(address.parse_cell(two.cell))
    other = address.format_cell(address.q_to_raw(geo.lat_q + 5, geo.lng_q + 5))
    now = run(two.ctx, "is_like", {"a": two.cell, "b": other})
    then = run(two.ctx, "is_like", {"a": two.cell, "b": other, "as_of": before})
    assert then.snapshot_id == before
    assert len(then.vintages_compared) < len(now.vintages_compared)
    assert set(then.vintages_compared) == years[before]
    assert then.cosine != now.cosine


def test_as_of_before_the_first_snapshot_names_the_history(two: TwoSnapshots) -> None:
    for name, args in (
        ("trajectory", {"cell": two.cell, "band": "ndvi"}),
        ("is_like", {"a": two.cell, "b": two.cell}),
        ("what_is_here", {"cell": two.cell}),
    ):
        with pytest.raises(ApiError) as info:
            run(two.ctx, name, {**args, "as_of": "1990-01-01T00:00:00Z"})
        assert info.value.code == "snapshot_not_found"
        details = info.value.details
        assert details["newest"]["snapshot_id"] == two.new
        assert two.old in [s["snapshot_id"] for s in details["recent"]]
        with pytest.raises(ApiError) as info:
            run(two.ctx, name, {**args, "as_of": "yesterday!"})
        assert info.value.code == "invalid_as_of"
