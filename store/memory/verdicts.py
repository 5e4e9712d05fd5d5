"""What the cube says of a memory: its claim evaluated at its place, its cited facts re-read.

Used by the API when an item is written or verified, and by the pipeline when it
re-checks memories after a cube commit (so it lives in the store: the pipeline
imports no API code).

A claim ``{band, op, value, tslot | window | date | start_date+end_date, agg}`` is
evaluated with :mod:`store.claims` over the anchor's cells on **clear** values only
(the band's family flag says clear); a ``date`` is the window of
±:data:`DATE_TOLERANCE_DAYS` days around it; an area anchor is read at up to
:data:`MAX_CLAIM_CELLS` of its cells (evenly thinned beyond, said in the reason),
and the cells' verdicts combine by ``agg`` (``any``: one cell suffices; ``all``:
every cell with a clear value; ``mean``/``min``/``max``: of the cells' aggregates).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt
from shapely import contains_xy
from shapely.geometry import shape

from store import address, tslot
from store.claims import ClaimResult, ParsedClaim, evaluate, parse_claim
from store.cube.bands import FLAG_BANDS, SCALAR_BANDS, clear_flag, registered, resolve_alias
from store.cube.cache import ChunkCache
from store.errors import InvalidClaim, StoreError, UnknownBand
from store.facts import fact_record, same_fact
from store.memory.model import Anchor

if TYPE_CHECKING:  # the reader and the index load zarr, icechunk, pyarrow: annotations only
    from store.cube.read import CubeReader
    from store.inventory import OverpassIndex

__all__ = [
    "DATE_TOLERANCE_DAYS",
    "MAX_CLAIM_CELLS",
    "MAX_CLAIM_FACTS",
    "ClaimCheck",
    "check_claim",
    "claim_band",
    "clear_series",
    "fact_at",
    "fact_now",
    "refetch_facts",
]

DATE_TOLERANCE_DAYS = 7
"""A claim's ``date`` is checked on the clear overpasses within this many days either side."""
MAX_CLAIM_CELLS = 1024
"""Most cells of an area anchor a claim is evaluated at (evenly thinned beyond)."""
MAX_CLAIM_FACTS = 64
"""Most facts a verdict cites."""

_VERDICT = {1: "corroborated", 0: "contradicted", -1: "unknown"}


def claim_band(name: Any) -> str:
    """The scalar or flag band a claim names (short index names accepted).

    Raises:
        UnknownBand: not a scalar or flag band.
    """
    band = resolve_alias(name.strip()) if isinstance(name, str) else None
    if band is None or band not in (*SCALAR_BANDS, *FLAG_BANDS):
        raise UnknownBand(
            f"unknown band {name!r}"[:200] + f"; valid: {', '.join((*SCALAR_BANDS, *FLAG_BANDS))}"
        )
    return band


def clear_series(
    reader: CubeReader, band: str, lat_q: int, lng_q: int, cache: ChunkCache | None = None
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.float64]]:
    """A cell's clear values of a band: ``(tslots, values)`` where the family flag says clear."""
    flag = clear_flag(band)
    vt, vv = reader.column_series(band, lat_q, lng_q, cache)
    values = vv.astype(np.float64)
    if flag is None:
        keep = np.isfinite(values)
        return vt[keep], values[keep]
    flag_band, clear_value = flag
    ft, fv = reader.column_series(flag_band, lat_q, lng_q, cache)
    if band == flag_band:
        keep = fv > 0
        return ft[keep], fv[keep].astype(np.float64)
    # both slot vectors are sorted: find each value's flag by position, not by a Python loop
    pos = np.minimum(np.searchsorted(ft, vt), max(ft.size - 1, 0))
    flagged = (ft[pos] == vt) & (fv[pos] == clear_value) if ft.size else np.zeros(vt.size, bool)
    keep = flagged & np.isfinite(values)
    return vt[keep], values[keep]


def fact_at(
    index: OverpassIndex,
    cell: str,
    band: str,
    t: int,
    value: Any,
    lat_q: int,
    lng_q: int,
) -> dict[str, Any]:
    """The fact of a value at a cell, as every answer cites it (sources from the inventory)."""
    spec = registered(band)
    sources = index.sources(spec.family, t, lat_q, lng_q)
    date = tslot.slot_to_date(t, spec.tempo).isoformat()
    if band in FLAG_BANDS and value is not None:
        value = int(value)
    return fact_record(cell, band, t, value, sources, spec.derivation, date)


@dataclass(frozen=True)
class ClaimCheck:
    """What the cube says of a claim at a place."""

    verdict: str
    """corroborated, contradicted or unknown."""
    claim: dict[str, Any]
    """The claim as evaluated (band canonical, the time selection resolved)."""
    facts: list[dict[str, Any]]
    """The facts the verdict rests on (at most :data:`MAX_CLAIM_FACTS`)."""
    snapshot_id: str
    """The snapshot read."""
    reason: str
    """How the verdict was reached (cells read, thinning)."""
    cells_read: int = 0
    overpasses: list[str] = field(default_factory=list)
    """ISO dates of the tslots the verdict rests on."""


def _windowed(raw: Mapping[str, Any]) -> dict[str, Any]:
    """The claim with ``date`` / ``start_date``+``end_date`` turned into a tslot window."""
    if not isinstance(raw, Mapping):
        raise InvalidClaim("a claim is an object {band, op, value, ...}")
    selectors = [k for k in ("tslot", "window", "date", "start_date") if raw.get(k) is not None]
    if len(selectors) > 1:
        raise InvalidClaim("a claim takes one of tslot, window, date or start_date+end_date")
    out = {k: v for k, v in raw.items() if k not in ("date", "start_date", "end_date")}
    try:
        if raw.get("date") is not None:
            t = tslot.day_slot(str(raw["date"]))
            out["window"] = [t - DATE_TOLERANCE_DAYS, t + DATE_TOLERANCE_DAYS]
        elif raw.get("start_date") is not None or raw.get("end_date") is not None:
            if raw.get("start_date") is None or raw.get("end_date") is None:
                raise InvalidClaim("a claim takes start_date and end_date together")
            out["window"] = [
                tslot.day_slot(str(raw["start_date"])),
                tslot.day_slot(str(raw["end_date"])),
            ]
    except InvalidClaim:
        raise
    except StoreError as exc:
        raise InvalidClaim(f"claim date: {exc}") from exc
    return out


def _anchor_cells(anchor: Anchor) -> tuple[list[tuple[int, int]], bool]:
    """Lattice cells of an anchor (thinned to :data:`MAX_CLAIM_CELLS`) and whether thinned."""
    geom = shape(anchor.geometry) if anchor.geometry is not None else None
    if geom is None or geom.geom_type == "Point":
        if anchor.cell is None:
            raise InvalidClaim("a claim needs the item's place")
        return [address.raw_to_q(address.parse_cell(anchor.cell))], False
    min_lng, min_lat, max_lng, max_lat = geom.bounds
    y0, y1, x0, x1 = address.bbox_q_range(min_lat, min_lng, max_lat, max_lng)
    ys, xs = np.mgrid[y0:y1, x0:x1]
    ys, xs = ys.ravel(), xs.ravel()
    lat, lng = address.q_center(ys, xs)
    idx = np.flatnonzero(contains_xy(geom, lng, lat))
    thinned = idx.size > MAX_CLAIM_CELLS
    if thinned:
        idx = idx[np.linspace(0, idx.size - 1, MAX_CLAIM_CELLS).round().astype(np.int64)]
    cells = [(int(ys[k]), int(xs[k])) for k in idx.tolist()]
    if not cells and anchor.cell is not None:
        cells = [address.raw_to_q(address.parse_cell(anchor.cell))]
    return cells, thinned


def _compare_one(op: str, x: float, value: Any) -> int:
    claim = ParsedClaim("x", op, value, tslot=0)
    return int(evaluate(claim, np.array([0]), np.array([[x]])).verdict[0])


def _combine(claim: ParsedClaim, result: ClaimResult) -> str:
    """The area's verdict from its cells' verdicts (one cell: its own)."""
    v = result.verdict
    if v.size == 1:
        return _VERDICT[int(v[0])]
    known = v[v >= 0]
    if known.size == 0:
        return "unknown"
    if claim.agg == "all":
        return "corroborated" if bool((known == 1).all()) else "contradicted"
    if claim.agg in ("mean", "min", "max"):
        aggs = result.aggregate[np.isfinite(result.aggregate)]
        if aggs.size == 0:
            return "unknown"
        whole = (
            aggs.mean() if claim.agg == "mean" else aggs.min() if claim.agg == "min" else aggs.max()
        )
        return _VERDICT[_compare_one(claim.op, float(whole), claim.value)]
    return "corroborated" if bool((known == 1).any()) else "contradicted"


def check_claim(
    reader: CubeReader,
    index: OverpassIndex,
    raw: Mapping[str, Any],
    anchor: Anchor,
    cache: ChunkCache | None = None,
) -> ClaimCheck:
    """Evaluate a claim at an anchor in the reader's snapshot, on clear values.

    Raises:
        InvalidClaim, InvalidWindow, UnknownBand: a malformed claim.
    """
    claim_raw = _windowed(raw)
    band = claim_band(claim_raw.get("band"))
    claim = parse_claim(claim_raw, band)
    cells, thinned = _anchor_cells(anchor)
    series = [clear_series(reader, band, y, x, cache) for y, x in cells]
    slots = np.unique(np.concatenate([t for t, _ in series])) if series else np.zeros(0, np.int64)
    values: npt.NDArray[np.float64] = np.full((slots.size, len(series)), np.nan)
    for j, (t, v) in enumerate(series):
        values[np.searchsorted(slots, t), j] = v
    result = evaluate(claim, slots, values)
    verdict = _combine(claim, result)
    facts: list[dict[str, Any]] = []
    used_t: set[int] = set()
    cols, rows = np.nonzero(result.used.T)
    for j, k in zip(cols.tolist(), rows.tolist(), strict=True):
        if len(facts) >= MAX_CLAIM_FACTS:
            break
        y, x = cells[j]
        slot = int(slots[k])
        used_t.add(slot)
        cell_text = address.format_cell(address.q_to_raw(y, x))
        facts.append(fact_at(index, cell_text, band, slot, float(values[k, j]), y, x))
    n = len(cells)
    reason = (
        f"{claim.op} on clear {band} values at {n} cell{'s' if n != 1 else ''}"
        + (f" (thinned evenly from the area's cells to {MAX_CLAIM_CELLS})" if thinned else "")
        + f", agg {claim.agg}"
        + ("; no clear observation in the claim's time selection" if verdict == "unknown" else "")
    )
    dates = sorted({tslot.slot_to_date(t).isoformat() for t in used_t})
    return ClaimCheck(verdict, claim.as_dict(), facts, reader.snapshot_id, reason, n, dates)


def fact_now(
    reader: CubeReader,
    index: OverpassIndex,
    cell: str,
    band: str,
    t: int,
    cache: ChunkCache | None = None,
) -> dict[str, Any]:
    """The cube's fact at a cell, band and tslot in the reader's snapshot (value None: none)."""
    lat_q, lng_q = address.raw_to_q(address.parse_cell(cell))
    ts, vs = reader.column_series(band, lat_q, lng_q, cache)
    hit = np.flatnonzero(ts == t)
    value: Any = None
    if hit.size:
        v = float(vs[hit[0]])
        if band in FLAG_BANDS:
            value = int(v) if v > 0 else None
        elif np.isfinite(v):
            value = v
    return fact_at(
        index, address.format_cell(address.q_to_raw(lat_q, lng_q)), band, t, value, lat_q, lng_q
    )


def refetch_facts(
    reader: CubeReader,
    index: OverpassIndex,
    facts: Sequence[Mapping[str, Any]],
    cache: ChunkCache | None = None,
) -> list[dict[str, Any]]:
    """Re-read cited facts (``{fact_id, cell, band, tslot}``) in the reader's snapshot.

    Returns:
        One ``{fact_id, now_fact_id, same}`` per fact: ``same`` is False when the cube's
        fact at that cell, band and tslot is no longer the one cited.
    """
    out = []
    for f in facts:
        now = fact_now(reader, index, str(f["cell"]), str(f["band"]), int(f["tslot"]), cache)
        same = same_fact(now["fact_id"], str(f["fact_id"]))  # an f1 id and its f2 id alike
        out.append({"fact_id": f["fact_id"], "now_fact_id": now["fact_id"], "same": same})
    return out
