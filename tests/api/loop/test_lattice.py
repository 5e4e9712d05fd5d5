"""locate and cells_in: pure lattice answers, paged, typed errors (no store needed)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from api.context import ServiceContext
from api.dispatch import PRIMITIVES, run
from api.errors import ApiError
from api.models.lattice import CELLS_PAGE_SIZE
from api.receipts import Signer, verify_answer
from store import address


@pytest.fixture
def lctx(tmp_path: Path) -> ServiceContext:
    return ServiceContext(tmp_path, signer=Signer.generate())


def _code(ctx: ServiceContext, name: str, args: dict[str, Any]) -> str:
    with pytest.raises(ApiError) as info:
        run(ctx, name, args)
    return info.value.code


def test_locate_gives_the_cell_bounds_and_eight_neighbours(lctx: ServiceContext) -> None:
    ans = run(lctx, "locate", {"lat": 23.36, "lng": 85.33})
    assert ans.cell == address.encode(23.36, 85.33)
    b = ans.bounds
    assert b.min_lat <= 23.36 <= b.max_lat
    assert b.min_lng <= 85.33 <= b.max_lng
    ring = address.neighbours(ans.cell)
    assert [n.cell for n in ans.neighbours] == ring[:4] + ring[5:]
    assert [n.direction for n in ans.neighbours] == ["NW", "N", "NE", "W", "E", "SW", "S", "SE"]
    north = address.decode(ans.neighbours[1].cell)
    assert north.lat > ans.lat
    assert north.lng_q == ans.lng_q
    assert verify_answer(json.loads(json.dumps(ans.model_dump(mode="json")))).ok
    # the question-text geocoder of api/queries/locate.py is not a primitive: no clash
    assert PRIMITIVES["locate"].fn.__module__ == "api.queries.lattice"


def test_locate_at_a_pole_and_off_the_globe(lctx: ServiceContext) -> None:
    pole = run(lctx, "locate", {"lat": 90.0, "lng": 0.0})
    assert len(pole.neighbours) < 8
    assert pole.cell not in {n.cell for n in pole.neighbours}
    assert _code(lctx, "locate", {"lat": 91.0, "lng": 0.0}) == "invalid_latitude"
    assert _code(lctx, "locate", {"lat": 0.0, "lng": 181}) == "invalid_longitude"
    assert _code(lctx, "locate", {"lat": "1", "lng": 0}) == "invalid_argument"


def test_cells_in_pages_cover_the_box_once(lctx: ServiceContext) -> None:
    box = [23.36, 85.33, 23.364, 85.334]  # ~47 x 47 cells: three pages
    first = run(lctx, "cells_in", {"bbox": box})
    y0, y1, x0, x1 = address.bbox_q_range(*box)
    assert first.n_cells == (y1 - y0) * (x1 - x0)
    assert first.n_pages == -(-first.n_cells // CELLS_PAGE_SIZE) > 1
    seen = list(first.cells)
    page = first.next_page
    while page is not None:
        nxt = run(lctx, "cells_in", {"bbox": box, "page": page})
        seen += nxt.cells
        page = nxt.next_page
    assert len(seen) == len(set(seen)) == first.n_cells
    for c in seen:
        g = address.decode(c)
        assert y0 <= g.lat_q < y1
        assert x0 <= g.lng_q < x1
    assert _code(lctx, "cells_in", {"bbox": box, "page": first.n_pages}) == "page_out_of_range"
    assert _code(lctx, "cells_in", {"bbox": box, "page": -1}) == "page_out_of_range"


def test_cells_in_a_polygon_and_bad_areas(lctx: ServiceContext) -> None:
    tri = {
        "type": "Polygon",
        "coordinates": [[[85.33, 23.36], [85.331, 23.36], [85.33, 23.361], [85.33, 23.36]]],
    }
    ans = run(lctx, "cells_in", {"geometry": tri})
    box = run(lctx, "cells_in", {"bbox": [23.36, 85.33, 23.361, 85.331]})
    assert 0 < ans.n_cells < box.n_cells
    assert set(ans.cells) <= set(box.cells)
    assert _code(lctx, "cells_in", {}) == "invalid_geometry"
    assert _code(lctx, "cells_in", {"bbox": [0, 0, 10, 10]}) == "area_too_large"
    assert _code(lctx, "cells_in", {"bbox": [1, 2, 3]}) == "invalid_bbox"


def test_cli_call_verb(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from cli.main import main

    assert main(["call", "locate", '{"lat": 23.36, "lng": 85.33}', "--data", str(tmp_path)]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["cell"] == address.encode(23.36, 85.33)
    assert verify_answer(doc).ok
    assert main(["call", "locate", '{"lat": 93, "lng": 0}', "--data", str(tmp_path)]) == 2
    assert "invalid_latitude" in capsys.readouterr().err
    assert main(["call", "nope", "--data", str(tmp_path)]) == 2
    assert "unknown_primitive" in capsys.readouterr().err
