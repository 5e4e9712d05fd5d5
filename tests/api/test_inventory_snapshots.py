"""area_over_time during an ingest: every answer is the answer of the one snapshot it names.

Some Sentinel-2 weeks of a copy of the tiny store are taken out (chunks and
inventory rows, one commit each), then the real family loop
(:func:`pipelines.family.ingest_range`) writes them back on a thread while the
main thread asks area_over_time again and again. Each answer must equal a fresh
read of the snapshot it names: the same overpasses (scenes and excluded) and the
same fact ids (which bind the values and the source scenes).
"""

from __future__ import annotations

import shutil
import threading
from pathlib import Path
from typing import Any

import numpy as np

from api.context import ServiceContext
from api.dispatch import run
from api.queries.area_geometry import parse_area
from api.queries.area_series import series
from api.receipts import Signer
from pipelines.family import ingest_range
from pipelines.partitions import scene_key, week_key_of, week_t0
from pipelines.run import resources_for
from pipelines.scenes import ScenePartition, discover
from pipelines.sentinel2.assets import S2
from store.cube import CubeReader, CubeWriter, band_spec
from store.tslot import day_slot

WEEKS = 6


def _take_out(data: Path, parts: list[ScenePartition]) -> None:
    """Remove the partitions' S2 chunks and inventory rows (one commit each)."""
    writer = CubeWriter(data)
    bands = [b for _, b in S2.bands] + [S2.flag_band]
    for part in parts:
        win = part.window
        assert win is not None
        with writer.transaction(part.key) as tx:
            for band in bands:
                spec = band_spec(band)
                fill = np.full((7, *win.shape), spec.fill_value, dtype=spec.dtype)
                tx.write(band, np.arange(part.t0, part.t0 + 7), win.lat_q0, win.lng_q0, fill)
            tx.write_inventory(f"s2|{part.key}", [])


def test_area_answers_during_an_ingest_match_their_snapshot(
    tiny_store: Any, tmp_path: Path
) -> None:
    data = tmp_path / "data"
    shutil.copytree(tiny_store.data, data, symlinks=True)
    res = resources_for(data, tiny_store.catalog, tiny_store.sample / "manifest.json")
    area = res["area"]
    rows = [r for r in CubeReader(data).inventory.table().to_pylist() if r["band"] == "s2"]
    weeks = sorted({week_key_of(r["date"]) for r in rows})[-WEEKS:]
    blocks = sorted({r["block"] for r in rows})
    parts = [
        ScenePartition(str(scene_key(w, b)), w, b, week_t0(w), area.block_window(b))
        for b in blocks
        for w in weeks
    ]
    parts = [p for p in parts if p.window is not None]
    _take_out(data, parts)

    b = tiny_store.manifest["bbox"]
    args = {
        "bbox": [b[1], b[0], b[3], b[2]],
        "start_date": weeks[0],
        "end_date": "2024-12-31",
        "index": "ndvi",
        "max_scenes": 24,
        "chart": False,
    }
    ctx = ServiceContext(data, signer=Signer.generate(), tip_check_seconds=0.0)
    answers = [run(ctx, "area_over_time", args).model_dump(mode="json")]
    errors: list[BaseException] = []

    def ingest() -> None:
        try:
            found = discover(S2.collection, parts, res["scenes"])
            ingest_range(S2, parts, found, CubeWriter(data), lambda _: None)
        except BaseException as exc:  # reported below
            errors.append(exc)

    writer = threading.Thread(target=ingest)
    writer.start()
    while writer.is_alive():
        answers.append(run(ctx, "area_over_time", args).model_dump(mode="json"))
    writer.join()
    answers.append(run(ctx, "area_over_time", args).model_dump(mode="json"))
    assert errors == []

    first, last = answers[0]["areas"][0], answers[-1]["areas"][0]
    assert len(last["scenes"]) + len(last["excluded"]) > len(first["scenes"]) + len(
        first["excluded"]
    )  # the ingest added overpasses
    assert answers[0]["snapshot_id"] != answers[-1]["snapshot_id"]

    shape = parse_area("a", None, args["bbox"])
    t0, t1 = day_slot(args["start_date"]), day_slot(args["end_date"])
    fresh: dict[str, tuple[list[Any], list[Any], list[str]]] = {}
    for answer in answers:
        snap = answer["snapshot_id"]
        if snap not in fresh:
            reader = CubeReader(data, snapshot_id=snap)
            fresh_ctx = ServiceContext(data, signer=ctx.signer)
            cand = fresh_ctx.overpasses(reader, "s2", shape.box, t0, t1)
            ((out, facts, _),) = series(
                fresh_ctx, reader, "indices.ndvi", [shape], [cand], 24, 0.4, True
            )
            fresh[snap] = (
                [(s["tslot"], s["median"], s["n_clear"]) for s in out["scenes"]],
                [(e["tslot"], e["reason"]) for e in out["excluded"]],
                [f["fact_id"] for f in facts],
            )
        got = answer["areas"][0]
        scenes, excluded, fact_ids = fresh[snap]
        assert [(s["tslot"], s["median"], s["n_clear"]) for s in got["scenes"]] == scenes, snap
        assert [(e["tslot"], e["reason"]) for e in got["excluded"]] == excluded, snap
        assert [f["fact_id"] for f in answer["facts"]] == fact_ids, snap


def test_an_as_of_reader_sees_that_snapshots_overpasses(tiny_store: Any, tmp_path: Path) -> None:
    data = tmp_path / "data"
    shutil.copytree(tiny_store.data, data, symlinks=True)
    res = resources_for(data, tiny_store.catalog, tiny_store.sample / "manifest.json")
    rows = [r for r in CubeReader(data).inventory.table().to_pylist() if r["band"] == "s2"]
    week = week_key_of(rows[-1]["date"])
    block = rows[-1]["block"]
    part = ScenePartition(
        str(scene_key(week, block)), week, block, week_t0(week), res["area"].block_window(block)
    )
    before = CubeReader(data)
    _take_out(data, [part])
    ctx = ServiceContext(data, signer=Signer.generate(), tip_check_seconds=0.0)
    box = (0, 1 << 21, 0, 1 << 22)
    tip = ctx.reader()
    assert tip.snapshot_id != before.snapshot_id
    old = ctx.reader(before.snapshot.written_at.isoformat())
    assert old.snapshot_id == before.snapshot_id
    in_week = [t for t, _ in ctx.overpasses(old, "s2", box, part.t0, part.t0 + 6)]
    assert in_week  # the older snapshot still lists the week's overpasses ...
    assert [
        t for t, _ in ctx.overpasses(tip, "s2", box, part.t0, part.t0 + 6)
    ] == []  # ... the tip not
