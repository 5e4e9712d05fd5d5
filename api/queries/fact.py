"""fact: resolve a fact id from any answer to the fact, and say whether the cube still holds it.

A fact id (``f2``, :mod:`store.facts`) is its content digest followed by the
address the digest covers (cell, band, tslot). Resolving it re-reads that one
value — in the tip's snapshot, then, when the tip holds another value there, in
older snapshots newest first (at most :data:`MAX_FACT_HISTORY`) — and recomputes
the id (:func:`store.memory.verdicts.fact_now`, the evidence check's reader), so
it works in a fresh process and on any replica of the cube: nothing served is
remembered. An id whose recomputation matches nowhere is ``fact_not_found``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from api.context import ServiceContext
from api.errors import ApiError, InvalidArgument, NotFound
from api.models.cite import FactAnswer, FactBody, FactIn
from api.queries._common import finish, parse_cell_arg, store_errors
from api.registry import primitive
from store.cube.bands import FLAG_BANDS, SCALAR_BANDS
from store.errors import InvalidFact, StoreError
from store.facts import parse_fact_id, same_fact
from store.memory.verdicts import fact_now

if TYPE_CHECKING:
    from store.cube.read import CubeReader

__all__ = ["MAX_FACT_HISTORY", "resolve_fact"]

MAX_FACT_HISTORY = 32
"""Most snapshots (the tip first) a fact is looked for in."""


def _now(ctx: ServiceContext, reader: CubeReader, cell: str, band: str, t: int) -> dict[str, Any]:
    return fact_now(reader, ctx.overpass_index(reader), cell, band, t, ctx.chunks)


@primitive(
    "fact",
    FactIn,
    FactAnswer,
    "Resolve a fact id from any answer to the fact (the protocol's cite) and check it still holds.",
    "The fact's cell, band, tslot, value, source scenes and derivation, the newest snapshot "
    f"holding it (searched newest first, up to {MAX_FACT_HISTORY} snapshots) and whether the "
    "current snapshot holds the same fact (else the fact there now). Works on any replica: the "
    "id carries its address. Area statistics (cell geom:...) and ids of the earlier f1 layout "
    "cannot be re-derived from the id: fact_not_found says so.",
    cost="heavy",
)
def resolve_fact(ctx: ServiceContext, args: FactIn) -> FactAnswer:
    """fact {fact_id}."""
    try:
        addr = parse_fact_id(args.fact_id.strip())
    except InvalidFact as exc:
        raise InvalidArgument(str(exc), code="invalid_fact_id") from None
    if addr.layout == "f1" or addr.cell is None or addr.band is None or addr.tslot is None:
        raise NotFound(
            "an f1 fact id carries no address (only its digest): re-read the value with the "
            "cell, band and tslot of the answer that cited it",
            code="fact_not_found",
        )
    if addr.cell.startswith("geom:"):
        raise NotFound(
            "an area statistic's id names its area by digest only: re-run the area query "
            "(read_area / area_over_time) that produced it",
            code="fact_not_found",
        )
    if addr.band not in (*SCALAR_BANDS, *FLAG_BANDS):
        raise NotFound(
            f"facts of band {addr.band!r} are not resolvable here (scalar and flag bands are)",
            code="fact_not_found",
        )
    cell = parse_cell_arg(addr.cell, "fact_id cell").cell
    band, t = addr.band, addr.tslot
    with store_errors():
        tip = ctx.reader()
        current = _now(ctx, tip, cell, band, t)
        found: dict[str, Any] | None = (
            current if same_fact(current["fact_id"], args.fact_id) else None
        )
        where = tip.snapshot_id
        searched = 1
        if found is None:
            for snap in tip.list_snapshots()[1:MAX_FACT_HISTORY]:
                try:
                    reader = ctx.reader_as_of(snap.id)
                except (ApiError, StoreError):
                    break  # the repository's empty first snapshot, or expired history
                searched += 1
                old = _now(ctx, reader, cell, band, t)
                if same_fact(old["fact_id"], args.fact_id):
                    found, where = old, snap.id
                    break
    if found is None:
        raise NotFound(
            f"no snapshot of the last {searched} holds fact {args.fact_id[:100]!r}: the cube's "
            f"value at {cell} {band} tslot {t} is another (current_fact in details)",
            code="fact_not_found",
            details={"snapshots_searched": searched, "current_fact": current},
        )
    holds = where == tip.snapshot_id
    facts = [found] if holds else [found, current]
    answer = {
        "fact": found,
        "found_in_snapshot": where,
        "current_snapshot": tip.snapshot_id,
        "current_holds": holds,
        "current_fact": None if holds else current,
        "snapshots_searched": searched,
        "snapshot_id": tip.snapshot_id,
        "facts": facts,
    }
    return finish(ctx, "fact", args, FactBody, FactAnswer, answer, [cell], tip.snapshot_id)
