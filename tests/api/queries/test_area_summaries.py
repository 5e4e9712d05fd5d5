"""area_over_time from block summaries equals the every-cell answer on the tiny sample.

The tiny sample (43 x 46 cells) holds no whole storage chunk (128 x 128
cells) of the default cube, so it is ingested here, through the real
pipeline, into a cube created with level-4 storage blocks (16 x 16 cells,
summary blocks 4 x 4): the same code, with chunks wholly inside the areas
and edge chunks around them.

For several geometries (block-aligned, the whole sample, irregular, a thin
diagonal) the same call with and without summaries must give the same
overpasses, exclusions, counts and clear fractions exactly, the mean and std
to floating tolerance (composition reorders sums), and quantiles whose
``quantile_bounds`` hold the every-cell values.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
import zarr

from api.context import ServiceContext
from api.dispatch import run
from api.receipts import Signer
from store import address
from store.cube import summaries as sm

_ARGS = {
    "start_date": "2023-01-01",
    "end_date": "2024-12-31",
    "index": "ndvi",
    "max_scenes": 12,
    "chart": False,
}
_Q = ("p10", "p25", "median", "p75", "p90")
_LEVEL = 4
_SIDE = 1 << _LEVEL  # storage chunks


@pytest.fixture(scope="module")
def small_blocks(tiny_store: Any, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny sample ingested into a cube of level-4 storage blocks."""
    from pipelines.run import ingest_area
    from store.cube import CubeWriter
    from tests.dagster_instance import ephemeral as ephemeral_instance

    data = tmp_path_factory.mktemp("small_blocks")
    assert CubeWriter(data, block_level=_LEVEL).block_level == _LEVEL
    with ephemeral_instance() as instance:
        ingest_area(
            data,
            tiny_store.sample / "catalog.json",
            tiny_store.sample / "manifest.json",
            instance=instance,
        )
    return data


def _block_aligned(tiny_store: Any, side: int) -> list[float]:
    """A bbox exactly covering the storage blocks wholly inside the sample (as [lat, lng, lat, lng])."""
    b = tiny_store.manifest["bbox"]
    y0, y1, x0, x1 = address.bbox_q_range(b[1], b[0], b[3], b[2])
    by0, by1 = -(-y0 // side), y1 // side  # blocks wholly inside
    bx0, bx1 = -(-x0 // side), x1 // side
    assert by1 > by0, "the tiny sample holds a whole storage block"
    assert bx1 > bx0, "the tiny sample holds a whole storage block"
    eps_y, eps_x = address.LAT_STEP / 4, address.LNG_STEP / 4
    lat0, lng0 = address.q_center(by0 * side, bx0 * side)
    lat1, lng1 = address.q_center(by1 * side - 1, bx1 * side - 1)
    return [float(lat0) - eps_y, float(lng0) - eps_x, float(lat1) + eps_y, float(lng1) + eps_x]


def _geometries(tiny_store: Any) -> dict[str, dict[str, Any]]:
    b = tiny_store.manifest["bbox"]  # [min_lng, min_lat, max_lng, max_lat]
    w, s, e, n = b
    dx, dy = e - w, n - s
    irregular = [
        [w + 0.02 * dx, s + 0.05 * dy],
        [e - 0.03 * dx, s + 0.01 * dy],
        [e - 0.01 * dx, n - 0.2 * dy],
        [w + 0.6 * dx, n - 0.02 * dy],
        [w + 0.01 * dx, n - 0.1 * dy],
        [w + 0.3 * dx, s + 0.5 * dy],
        [w + 0.02 * dx, s + 0.05 * dy],
    ]
    diagonal = [
        [w + 0.01 * dx, s + 0.01 * dy],
        [w + 0.03 * dx, s + 0.01 * dy],
        [e - 0.01 * dx, n - 0.01 * dy],
        [e - 0.03 * dx, n - 0.01 * dy],
        [w + 0.01 * dx, s + 0.01 * dy],
    ]
    return {
        "block_aligned": {"bbox": _block_aligned(tiny_store, _SIDE)},
        "sample": {"bbox": [s, w, n, e]},
        "irregular": {"geometry": {"type": "Polygon", "coordinates": [irregular]}},
        "diagonal": {"geometry": {"type": "Polygon", "coordinates": [diagonal]}},
    }


def _call(ctx: ServiceContext, where: dict[str, Any], use: bool) -> dict[str, Any]:
    return run(ctx, "area_over_time", {**_ARGS, **where, "use_summaries": use}).model_dump(
        mode="json"
    )


def _assert_equal(fast: dict[str, Any], cells: dict[str, Any]) -> None:
    a, c = fast["areas"][0], cells["areas"][0]
    assert c["method"] == "cells"
    assert c["method_note"] is not None
    assert a["n_cells"] == c["n_cells"]
    assert a["excluded"] == c["excluded"]  # clear fractions: exact
    assert a["thinned"] == c["thinned"]
    assert [s["tslot"] for s in a["scenes"]] == [s["tslot"] for s in c["scenes"]]
    for sa, sc in zip(a["scenes"], c["scenes"], strict=True):
        assert sc["quantile_bounds"] is None
        for k in ("n_clear", "n_total", "clear_fraction", "quality"):
            assert sa[k] == sc[k], k
        assert sa["mean"] == pytest.approx(sc["mean"], rel=1e-10, abs=1e-12)
        assert sa["std"] == pytest.approx(sc["std"], rel=1e-8, abs=1e-12)
        if a["method"] == "cells":
            assert sa == sc
            continue
        bounds = sa["quantile_bounds"]
        for q in _Q:
            lo, hi = bounds[q]
            assert lo <= sc[q] <= hi, (q, sc[q], bounds[q])
            assert lo <= sa[q] <= hi


def test_summary_path_equals_cell_path(tiny_store: Any, small_blocks: Path) -> None:
    ctx = ServiceContext(small_blocks, signer=Signer.generate())
    assert ctx.reader().block_level == _LEVEL
    methods = {}
    for name, where in _geometries(tiny_store).items():
        fast, cells = _call(ctx, where, True), _call(ctx, where, False)
        assert fast["areas"][0]["scenes"], name
        _assert_equal(fast, cells)
        methods[name] = fast["areas"][0]["method"], fast["areas"][0]["summary_blocks"]
        if fast["areas"][0]["method"] != "cells":
            assert fast["areas"][0]["cells_read"] < fast["areas"][0]["n_cells"]
            assert all(f["derivation"].endswith("block_summaries.v1") for f in fast["facts"])
    assert methods["block_aligned"][0] == "block_summaries+edge_cells"
    assert methods["sample"][0] == "block_summaries+edge_cells"
    assert methods["diagonal"] == ("cells", 0)  # no block wholly inside a thin shape
    aligned = run(
        ctx, "area_over_time", {**_ARGS, **_geometries(tiny_store)["block_aligned"]}
    ).model_dump(mode="json")["areas"][0]
    assert aligned["cells_read"] == 0  # every cell from the summaries


def test_snapshot_without_summaries_reads_cells_and_says_so(
    tiny_store: Any, small_blocks: Path, tmp_path: Path
) -> None:
    data = tmp_path / "data"
    shutil.copytree(small_blocks, data, symlinks=True)
    from store.cube import CubeWriter

    writer = CubeWriter(data)
    session = writer.repo.writable_session("main")
    root = zarr.open_group(session.store, mode="a")
    del root[sm.SUMMARY_GROUP]  # a cube as written before summaries existed
    session.commit("drop summaries")
    ctx = ServiceContext(data, signer=Signer.generate())
    where = {"bbox": _block_aligned(tiny_store, _SIDE)}
    got = _call(ctx, where, True)["areas"][0]
    want = _call(ctx, where, False)["areas"][0]
    assert got["method"] == "cells"
    assert "no block summaries" in got["method_note"]
    assert got["scenes"] == want["scenes"]


def test_chunks_answered_from_summaries_are_not_read(tiny_store: Any, small_blocks: Path) -> None:
    """The cost follows the edge chunks: an area made of whole chunks reads none of them."""
    where = {"bbox": _block_aligned(tiny_store, _SIDE)}
    reads: dict[bool, list[str]] = {}
    for use in (True, False):
        ctx = ServiceContext(small_blocks, signer=Signer.generate())
        reader = ctx.reader()
        calls: list[str] = []
        real = reader.read_chunks

        def spy(band: str, coords: Any, calls: list[str] = calls, real: Any = real) -> Any:
            calls.extend(band for _ in coords)
            return real(band, coords)

        reader.read_chunks = spy  # type: ignore[method-assign]
        _call(ctx, where, use)
        reads[use] = calls
    assert reads[False]  # the cell path reads the chunks
    assert not [b for b in reads[True] if b in ("indices.ndvi", "s2.clear")]


def test_areas_together_answer_as_each_alone(tiny_store: Any, small_blocks: Path) -> None:
    """Summary and cell jobs read together give each area exactly its own answer."""
    ctx = ServiceContext(small_blocks, signer=Signer.generate())
    geoms = _geometries(tiny_store)
    areas = [{"id": name, **where} for name, where in geoms.items()]
    together = run(ctx, "area_over_time", {**_ARGS, "areas": areas}).model_dump(mode="json")
    methods = set()
    facts: list[str] = []
    for where, got in zip(geoms.values(), together["areas"], strict=True):
        alone = _call(ServiceContext(small_blocks, signer=ctx.signer), where, True)
        assert {**got, "id": "area"} == alone["areas"][0]
        facts += [f["fact_id"] for f in alone["facts"]]
        methods.add(got["method"])
    assert [f["fact_id"] for f in together["facts"]] == facts
    assert methods == {"cells", "block_summaries+edge_cells"}
