"""The lattice primitives: locate (the cell of a point, its bounds and neighbours) and cells_in.

Pure cell64 arithmetic (:mod:`store.address`) and the area code's inside test
(:mod:`api.queries.area_geometry`): no store read, so the receipt names the
pseudo snapshot :data:`LATTICE_SNAPSHOT`. Not the geocoding helpers of
:mod:`api.queries.locate` (which place a question's text).
"""

from __future__ import annotations

from api.context import ServiceContext
from api.errors import InvalidArgument
from api.models.lattice import (
    CELLS_PAGE_SIZE,
    CellsInAnswer,
    CellsInBody,
    CellsInIn,
    LocateAnswer,
    LocateBody,
    LocateIn,
)
from api.queries._common import finish, store_errors
from api.queries.area_geometry import parse_area
from api.registry import primitive
from store import address

__all__ = ["LATTICE_SNAPSHOT", "cells_in", "locate_point"]

LATTICE_SNAPSHOT = "lattice:cell64"
"""The receipt's snapshot of an answer computed from the lattice alone."""

_DIRECTIONS = ("NW", "N", "NE", "W", "C", "E", "SW", "S", "SE")


@primitive(
    "locate",
    LocateIn,
    LocateAnswer,
    "The cell64 of a point, its bounds and its eight neighbours (the protocol's locate).",
    "Pure lattice arithmetic: no data is read. Use the cell with read_cell, trajectory, "
    "did_change; cells of an area: cells_in.",
)
def locate_point(ctx: ServiceContext, args: LocateIn) -> LocateAnswer:
    """locate {lat, lng}."""
    with store_errors():
        geo = address.decode(address.encode(args.lat, args.lng))
        ring = address.neighbours(geo.cell)
    neighbours = [
        {"direction": d, "cell": c}
        for d, c in zip(_DIRECTIONS, ring, strict=True)
        if d != "C" and c != geo.cell
    ]
    min_lat, min_lng, max_lat, max_lng = geo.bounds
    answer = {
        "cell": geo.cell,
        "lat": geo.lat,
        "lng": geo.lng,
        "lat_q": geo.lat_q,
        "lng_q": geo.lng_q,
        "bounds": {"min_lat": min_lat, "min_lng": min_lng, "max_lat": max_lat, "max_lng": max_lng},
        "neighbours": neighbours,
        "snapshot_id": LATTICE_SNAPSHOT,
    }
    return finish(
        ctx, "locate", args, LocateBody, LocateAnswer, answer, [geo.cell], LATTICE_SNAPSHOT
    )


@primitive(
    "cells_in",
    CellsInIn,
    CellsInAnswer,
    f"The cells inside a bbox or polygon, {CELLS_PAGE_SIZE} per page.",
    "Cells whose centre lies inside the area, row-major from the south-west, paged (page from "
    "0; next_page says where to go on). Areas are capped as area_over_time's are "
    "(area_too_large); a page beyond the last is page_out_of_range.",
    cost="heavy",
)
def cells_in(ctx: ServiceContext, args: CellsInIn) -> CellsInAnswer:
    """cells_in {bbox | geometry, page?}."""
    if args.page < 0:
        raise InvalidArgument("page must be >= 0", code="page_out_of_range")
    with store_errors():
        area = parse_area("area", args.geometry, args.bbox)
    n = area.n_cells
    n_pages = -(-n // CELLS_PAGE_SIZE)
    if args.page >= max(n_pages, 1):
        raise InvalidArgument(
            f"page {args.page} is beyond the last page ({max(n_pages - 1, 0)}) of {n} cells",
            code="page_out_of_range",
            details={"n_cells": n, "n_pages": n_pages, "page_size": CELLS_PAGE_SIZE},
        )
    lo = args.page * CELLS_PAGE_SIZE
    hi = min(n, lo + CELLS_PAGE_SIZE)
    raw = address.q_to_raw_array(area.ys[lo:hi], area.xs[lo:hi])
    cells = [str(c) for c in address.format_cells(raw).tolist()]
    answer = {
        "n_cells": n,
        "area_km2": area.km2,
        "page": args.page,
        "page_size": CELLS_PAGE_SIZE,
        "n_pages": n_pages,
        "next_page": args.page + 1 if args.page + 1 < n_pages else None,
        "cells": cells,
        "snapshot_id": LATTICE_SNAPSHOT,
    }
    return finish(
        ctx, "cells_in", args, CellsInBody, CellsInAnswer, answer, cells, LATTICE_SNAPSHOT
    )
