"""Embedding queries: find_similar (intent alias find_like) over the k-NN tables.

Vintage and snapshot semantics
------------------------------
* ``band=geotessera`` (and ``geotessera.bin128``, its binary sibling) scans one
  vintage table ``knn/geotessera/<year>``: the latest vintage holding vectors,
  or the latest at or before ``as_of_tslot`` (a year slot, ``year - 1970``;
  values above 255 are taken as day slots and converted).
* ``as_of_signed_at`` picks the cube snapshot committed at or before that time;
  vintages whose Tessera chunks do not exist in that snapshot are not scanned.
  The tables themselves are not versioned with the cube: each names in its
  ``meta.json`` the snapshot it was built from, and the answer reports that
  snapshot. A vintage's vectors are written once, so a table built later holds
  the same vectors; the answer says so in ``assumptions``.
* ``scope`` is accepted and echoed; the store is single-tenant, so every vector
  is visible to every scope (stated in ``assumptions``).
"""

from __future__ import annotations

import json
import math
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from api.context import ServiceContext
from api.errors import InvalidArgument, NotFound, Unavailable
from api.models import (
    FindSimilarAnswer,
    FindSimilarBody,
    FindSimilarIn,
)
from api.queries._common import (
    CellRef,
    canonical_scalar_band,
    finish,
    make_fact,
    parse_cell_arg,
    store_errors,
)
from api.queries.similar_examples import (
    EXAMPLE_FORMULA,
    NEGATIVE_WEIGHT,
    example_cells,
    example_query,
    within_mask,
)
from api.queries.similar_pixels import SAME_PIXEL_RULE, same_pixel_rows
from api.registry import primitive
from store import address
from store.claims import evaluate, parse_claim
from store.cube.bands import VECTOR_BANDS
from store.knn import K_MAX, MODES

if TYPE_CHECKING:
    from store.cube.read import CubeReader
    from store.knn.table import KnnTable

__all__ = [
    "MAX_FILTER_COLUMNS",
    "MAX_INLINE_CHARS",
    "RERANK_MIN_CANDIDATES",
    "find_similar",
    "snapshot_vintages",
    "vector_value",
]

MAX_INLINE_CHARS = 200_000
"""Longest ``inline:[...]`` key accepted."""
RERANK_MIN_CANDIDATES = 4096
"""Fewest Hamming candidates hamming_then_rerank re-scores (re-scoring that many rows is cheap).

The multiple used is ``max(calibrated, ceil(RERANK_MIN_CANDIDATES / k))``, the calibrated one
being that of the triage the table uses (measured recall@10 >= 0.95 when it was written: the
inverted lists' of a large table, :mod:`store.knn.ivf`, else the full Hamming triage's). On small tables with very flat
neighbour scores (the tiny sample's) the bare multiple misses neighbours; the floor makes the
rerank exact there (the candidates cover the table), and tests/api/test_service.py checks
recall@10 >= 0.95 on clustered synthetic data.
"""
MAX_FILTER_COLUMNS = 64
"""Most chunk columns (128 x 128 cells each) a filter may read (~1 M cells of table)."""

SINGLE_TENANT = "scope accepted and recorded; this store is single-tenant, so every vector is visible to every scope"


def _tip_or_none(ctx: ServiceContext) -> CubeReader | None:
    """The tip's reader, or None when the data directory has no cube (tables only)."""
    try:
        return ctx.reader()
    except Unavailable as exc:
        if exc.code == "cube_not_found":
            return None
        raise


def vector_value(table: KnnTable, row: int) -> dict[str, Any]:
    """A vector fact's value: the int8 row as hex (two's complement bytes) and its scale.

    Hex keeps the fact JSON-safe and cheap to hash (value = int8 * scale).
    """
    return {
        "int8_hex": table.vector(row).tobytes().hex(),
        "scale": table.scale(row),
    }


def _parse_inline(text: str, d: int) -> npt.NDArray[np.float64]:
    body = text[len("inline:") :].strip()
    if len(text) > MAX_INLINE_CHARS:
        raise InvalidArgument(
            f"inline vector longer than {MAX_INLINE_CHARS} characters", code="invalid_vector"
        )
    try:
        values = json.loads(body)
    except ValueError:
        raise InvalidArgument(
            "inline vector must be 'inline:[x, y, ...]' (a JSON list of numbers)",
            code="invalid_vector",
        ) from None
    if not isinstance(values, list) or not all(
        isinstance(v, int | float) and not isinstance(v, bool) for v in values
    ):
        raise InvalidArgument("inline vector must be a JSON list of numbers", code="invalid_vector")
    if len(values) != d:
        raise InvalidArgument(
            f"inline vector has dimension {len(values)}; this band needs {d}",
            code="dimension_mismatch",
            details={"expected": d, "got": len(values)},
        )
    vec = np.asarray(values, dtype=np.float64)
    if not np.all(np.isfinite(vec)) or not np.any(vec):
        raise InvalidArgument(
            "inline vector must be finite and not all zeros", code="invalid_vector"
        )
    return vec


def _resolve_key(args: FindSimilarIn) -> str:
    given = [v for v in (args.key, args.cell, args.cell64) if v is not None]
    if not given:
        raise InvalidArgument(
            "find_similar needs `key` (or its alias `cell` / `cell64`)", code="missing_key"
        )
    if len({g.strip() for g in given}) > 1:
        raise InvalidArgument("key, cell and cell64 disagree; send one", code="invalid_argument")
    return given[0].strip()


def _cell_row(
    ctx: ServiceContext, table: KnnTable, ref: CellRef, band: str, vintage: int | None
) -> int:
    """The table row of a key or example cell.

    Raises:
        NotFound: ``no_vector`` naming the cell and the vintages holding one.
    """
    row = table.row_of(ref.raw)
    if row is None:
        held = [
            y for y in ctx.vintages() if ctx.table(f"geotessera/{y}").row_of(ref.raw) is not None
        ]
        raise NotFound(
            f"cell {ref.cell} has no {band} vector" + (f" in vintage {vintage}" if vintage else ""),
            code="no_vector",
            details={"cell": ref.cell, "vintages_with_vector": held},
        )
    return row


def _vector_fact(
    ctx: ServiceContext,
    reader: CubeReader | None,
    ref: CellRef,
    band: str,
    tslot: int,
    table: KnnTable,
    row: int,
) -> dict[str, Any]:
    return make_fact(
        ctx,
        reader,
        ref.cell,
        band if band != "geotessera.bin128" else "geotessera",
        tslot,
        vector_value(table, row),
        lat_q=ref.lat_q,
        lng_q=ref.lng_q,
        tempo="year",
    )


def _triage_note(table: Any, ranked: int, lists_probed: int) -> str:
    """What a rerank over a table's inverted lists looked at (:mod:`store.knn.ivf`)."""
    cfg = table.meta.get("ivf", {})
    recall = cfg.get("recall_at_10", {}).get(f"{cfg.get('nprobe')}x{cfg.get('multiple')}")
    measured = (
        f"its plan's recall@10 against exact cosine was {recall:.2f} on the table's own rows"
        " when it was written (k = 10, no filter)"
        if isinstance(recall, float)
        else "its recall was not calibrated"
    )
    return (
        f"hamming_then_rerank ranked the {ranked:,} eligible rows of the {lists_probed} of"
        f" {cfg.get('lists')} k-means lists nearest the query by their sign bits, not every"
        f" row; {measured}"
    )


def _year_bound(as_of_tslot: int | None, notes: list[str]) -> int | None:
    if as_of_tslot is None:
        return None
    if isinstance(as_of_tslot, bool) or as_of_tslot < 0 or as_of_tslot > 65535:
        raise InvalidArgument(f"as_of_tslot {as_of_tslot} out of range", code="invalid_tslot")
    if as_of_tslot > 255:
        import datetime as dt

        year = (dt.date(1970, 1, 1) + dt.timedelta(days=int(as_of_tslot))).year
        notes.append(f"as_of_tslot {as_of_tslot} > 255 read as a day slot (year {year})")
        return year
    return 1970 + int(as_of_tslot)


def snapshot_vintages(reader: CubeReader) -> set[int]:
    """The Tessera vintages (years) whose chunks exist in a reader's snapshot."""
    coords = reader.chunks("geotessera.scale")
    return {1970 + int(t) for t in np.unique(coords[:, 0]).tolist()} if coords.size else set()


def _filter_mask(
    ctx: ServiceContext, reader: CubeReader, table: KnnTable, raw_claim: dict[str, Any]
) -> tuple[npt.NDArray[np.bool_], dict[str, int]]:
    band = canonical_scalar_band(raw_claim.get("band"), allow_flags=True)
    claim = parse_claim(raw_claim, band)
    lat_q, lng_q = address.raw_to_q_array(np.asarray(table.cells))
    lat_q = np.asarray(lat_q, np.int64)
    lng_q = np.asarray(lng_q, np.int64)
    side = 1 << reader.block_level
    key = (lat_q // side) * (1 << 32) + (lng_q // side)
    groups, inverse = np.unique(key, return_inverse=True)
    if groups.size > MAX_FILTER_COLUMNS:
        raise InvalidArgument(
            f"the filter would read {groups.size} chunk columns (cap {MAX_FILTER_COLUMNS})",
            code="filter_too_broad",
        )
    verdict = np.full(table.n, -1, np.int8)
    for g in range(groups.size):
        rows = np.flatnonzero(inverse == g)
        col = ctx.column(reader, band, int(lat_q[rows[0]]), int(lng_q[rows[0]]))
        mat = col.values[:, lat_q[rows] - col.lat_q0, lng_q[rows] - col.lng_q0].astype(np.float64)
        if band in ("s2.clear", "s1.valid"):
            mat[mat == 0] = np.nan  # flag 0 = no observation: no fact
        verdict[rows] = evaluate(claim, col.tslots, mat).verdict
    stats = {
        "eligible": int((verdict == 1).sum()),
        "dropped_false": int((verdict == 0).sum()),
        "dropped_no_fact": int((verdict == -1).sum()),
    }
    return verdict == 1, stats


def _pick_vintage(
    ctx: ServiceContext, years_ok: set[int] | None, bound: int | None, notes: list[str]
) -> tuple[int, KnnTable] | None:
    skipped = []
    for year in reversed(ctx.vintages()):
        if bound is not None and year > bound:
            continue
        if years_ok is not None and year not in years_ok:
            skipped.append(f"{year} (not in the as-of snapshot)")
            continue
        table = ctx.table(f"geotessera/{year}")
        if table.n == 0:
            skipped.append(f"{year} (no vectors)")
            continue
        if skipped:
            notes.append("skipped vintages: " + ", ".join(skipped))
        return year, table
    if skipped:
        notes.append("skipped vintages: " + ", ".join(skipped))
    return None


@primitive(
    "find_similar",
    FindSimilarIn,
    FindSimilarAnswer,
    "k-NN over cell embeddings: places whose Tessera vector is closest to a cell's or an inline vector.",
    "key is a cell64 or 'inline:[x, ...]'; k 1..1000; band geotessera (latest vintage), "
    "geotessera.multi_year or geotessera.bin128; mode cosine (exact), hamming, hamming_then_rerank; "
    "filter is a claim (cells without a fact for its band are dropped). Neighbours nearest first, the "
    "query cell excluded, and by default (distinct_pixels) the cells sharing its 10 m Tessera pixel "
    "(its byte-identical adjacent copies; the count dropped is in the answer). An empty result means nobody has a vector nearby, not that nowhere resembles "
    "the key. Intent alias: find_like.",
    cost="heavy",
)
def find_similar(ctx: ServiceContext, args: FindSimilarIn) -> FindSimilarAnswer:
    """find_similar {key, k, band, mode, filter, distinct_pixels, as_of_tslot, as_of_signed_at, scope}."""
    key = _resolve_key(args)
    k = args.k
    if isinstance(k, bool) or not 1 <= k <= K_MAX:
        raise InvalidArgument(f"k must be in 1..{K_MAX}, got {k}", code="k_out_of_range")
    band = args.band
    if band not in VECTOR_BANDS:
        raise InvalidArgument(
            f"unknown band {band!r}; valid: {', '.join(VECTOR_BANDS)}", code="unknown_band"
        )
    mode = args.mode or ("hamming" if band == "geotessera.bin128" else "cosine")
    if mode not in MODES:
        raise InvalidArgument(
            f"unknown mode {mode!r}; valid: {', '.join(MODES)}", code="invalid_mode"
        )
    if band == "geotessera.multi_year" and mode != "cosine":
        raise InvalidArgument(
            "geotessera.multi_year has no binary codes: use mode cosine", code="invalid_mode"
        )
    is_inline = key.startswith("inline:")
    cell = None if is_inline else parse_cell_arg(key, "key")
    extra_pos, negatives = example_cells(args.positives, args.negatives)
    notes: list[str] = []
    if args.scope is not None:
        notes.append(SINGLE_TENANT)
    if band == "geotessera.bin128" and mode == "cosine":
        notes.append(
            "band geotessera.bin128 with mode cosine: scored the vintage's full vectors exactly"
        )

    with store_errors():
        # the cube is only read for as-of bounds and filters; the tables stand alone otherwise
        reader = ctx.reader(args.as_of_signed_at) if args.as_of_signed_at or args.filter else None
        years_ok = (
            snapshot_vintages(reader) if reader is not None and args.as_of_signed_at else None
        )
        bound = _year_bound(args.as_of_tslot, notes)
        vintage: int | None
        if band == "geotessera.multi_year":
            table = ctx.table("geotessera.multi_year")
            vintage = None
            meta_years = [int(y) for y in table.meta.get("vintages", [])]
            if bound is not None and meta_years and max(meta_years) > bound:
                raise NotFound(
                    f"geotessera.multi_year spans vintages {meta_years}, later than as_of_tslot",
                    code="no_table",
                )
            if years_ok is not None and not set(meta_years) <= years_ok:
                notes.append("multi_year table spans vintages missing from the as-of snapshot")
        else:
            picked = _pick_vintage(ctx, years_ok, bound, notes)
            if picked is None:
                raise NotFound(
                    "no Tessera vintage with vectors"
                    + (" at or before the as-of bound" if bound or years_ok else ""),
                    code="no_vector",
                    details={"vintages": ctx.vintages()},
                )
            vintage, table = picked
            notes.append(
                f"vintage {vintage}: the latest holding vectors"
                + (" within the as-of bound" if bound else "")
            )
        tslot = int(table.meta.get("tslot", 0))
        table_snapshot = str(
            table.meta.get("snapshot_id")
            or (
                reader.snapshot_id
                if reader is not None
                else f"knn:{table.meta.get('digest', 'unknown')}"
            )
        )
        if reader is not None and args.as_of_signed_at is not None:
            notes.append(
                f"as_of_signed_at -> cube snapshot {reader.snapshot_id}; the k-NN table was built from "
                f"snapshot {table_snapshot} (vectors of a vintage are written once, so the table holds "
                "the same vectors)"
            )

        # fact sources: the reader's inventory, else the tip's (a vintage's rows, like its
        # vectors, are written once); a table served without a cube has none
        fact_reader = reader if reader is not None else _tip_or_none(ctx)
        exclude_row: int | None = None
        same_pixel: list[tuple[int, int]] = []
        query: npt.NDArray[Any]
        facts = []
        cells_read: list[str] = []
        if cell is not None and table.n == 0:
            cells_read.append(cell.cell)
            query = np.zeros(table.d)
        elif cell is not None:
            row = _cell_row(ctx, table, cell, band, vintage)
            exclude_row = row
            query = table.vector(row)
            same_pixel = same_pixel_rows(table, cell.lat_q, cell.lng_q, row)
            cells_read.append(cell.cell)
            facts.append(_vector_fact(ctx, fact_reader, cell, band, tslot, table, row))
        else:
            query = _parse_inline(key, table.d)

        examples = None
        example_rows: set[int] = set()
        if (extra_pos or negatives) and table.n:
            vecs: dict[str, list[npt.NDArray[Any]]] = {"positives": [query], "negatives": []}
            for role, refs in (("positives", extra_pos), ("negatives", negatives)):
                for ref in refs:
                    r = _cell_row(ctx, table, ref, band, vintage)
                    example_rows.add(r)
                    vecs[role].append(table.vector(r))
                    same_pixel += same_pixel_rows(table, ref.lat_q, ref.lng_q, r)
                    cells_read.append(ref.cell)
                    facts.append(_vector_fact(ctx, fact_reader, ref, band, tslot, table, r))
            query = example_query(vecs["positives"], vecs["negatives"])
            examples = {
                "positives": [key if cell is None else cell.cell, *(c.cell for c in extra_pos)],
                "negatives": [c.cell for c in negatives],
                "negative_weight": NEGATIVE_WEIGHT,
                "formula": EXAMPLE_FORMULA,
            }
        if exclude_row is not None:
            example_rows.add(exclude_row)
        same_pixel = sorted({rc for rc in same_pixel if rc[0] not in example_rows})

        mask = None
        filter_stats = None
        if args.filter is not None:
            mask, filter_stats = _filter_mask(
                ctx, reader or ctx.reader(), table, args.filter.model_dump()
            )
        within = None
        if args.within is not None and table.n:
            inside, within = within_mask(table, args.within)
            mask = inside if mask is None else mask & inside
        pixels = None
        drop: list[tuple[int, int]] = []
        if (cell is not None or example_rows) and table.n:
            drop = same_pixel if args.distinct_pixels else []
            pixels = {
                "applied": args.distinct_pixels,
                "dropped": len(drop),
                "same_pixel_cells": address.format_cells(
                    np.array([c for _, c in same_pixel], np.uint64)
                ).tolist()
                if same_pixel
                else [],
                "rule": SAME_PIXEL_RULE,
            }
        off = {r for r, _ in drop} | (example_rows - {exclude_row})
        if off:  # the examples and (distinct_pixels) their pixels' copies are never returned
            keep = np.ones(table.n, bool) if mask is None else mask.copy()
            keep[sorted(off)] = False
            mask = keep
        # the table's calibrated multiple (measured recall@10 >= 0.95 when it was written),
        # and never fewer than RERANK_MIN_CANDIDATES candidates
        multiple = max(table.rerank_multiple, math.ceil(RERANK_MIN_CANDIDATES / k))
        lists_probed = 0

        if table.n == 0:
            rows = np.zeros(0, np.int64)
            scores = np.zeros(0)
            scanned = reranked = 0
        else:
            res = table.search(
                query,
                k=k,
                mode=mode,
                mask=mask,
                exclude_row=exclude_row,
                min_candidates=RERANK_MIN_CANDIDATES,
            )
            rows, scores, scanned, reranked = res.rows, res.scores, res.scanned, res.reranked
            multiple = res.multiple or multiple
            lists_probed = res.lists_probed
        if lists_probed:
            notes.append(_triage_note(table, int(scanned), lists_probed))
        raws = table.cells_at(rows)
        lats, lngs = address.decode_array(raws) if raws.size else (np.zeros(0), np.zeros(0))
        texts = address.format_cells(raws).tolist() if raws.size else []
        fact_band = "geotessera" if band == "geotessera.bin128" else band
        neighbours = []
        for i, r in enumerate(rows.tolist()):
            neighbours.append(
                {
                    "cell64": texts[i],
                    "score": float(scores[i]),
                    "lat": float(lats[i]),
                    "lng": float(lngs[i]),
                    "band": band,
                    "tslot": tslot,
                }
            )
            la, ln = address.raw_to_q(int(raws[i]))
            facts.append(
                make_fact(
                    ctx,
                    fact_reader,
                    texts[i],
                    fact_band,
                    tslot,
                    vector_value(table, r),
                    lat_q=la,
                    lng_q=ln,
                    tempo="year",
                )
            )
        cells_read.extend(texts)

    note = None
    if not neighbours:
        note = (
            "nobody has a vector nearby: the table holds no eligible vector"
            + (" (filter left none)" if filter_stats is not None else "")
            + "; this does not mean nowhere resembles the key"
        )
    elif len(neighbours) < k:
        note = f"only {len(neighbours)} eligible vectors besides the key"
    answer = {
        "key": cell.cell if cell is not None else "inline",
        "band": band,
        "vintage": vintage,
        "tslot": tslot,
        "mode": mode,
        "requested_k": k,
        "returned_k": len(neighbours),
        "cells_scanned": int(scanned),
        "reranked": int(reranked),
        "rerank_multiple": multiple if mode == "hamming_then_rerank" else None,
        "neighbours": neighbours,
        "filter": filter_stats,
        "distinct_pixels": pixels,
        "examples": examples,
        "within": within,
        "scope": args.scope,
        "as_of_signed_at": args.as_of_signed_at,
        "assumptions": notes,
        "note": note,
        "snapshot_id": table_snapshot,
        "facts": facts,
    }
    return finish(
        ctx,
        "find_similar",
        args,
        FindSimilarBody,
        FindSimilarAnswer,
        answer,
        cells_read,
        table_snapshot,
    )
