"""is_like: how alike two cells are, by the cosine of their Tessera vectors per vintage.

Vectors come from the k-NN tables (:mod:`api.queries.similar`'s semantics); as of a
snapshot, only the vintages whose chunks that snapshot holds are compared (a
vintage's vectors are written once, so the tables hold that snapshot's vectors).
"""

from __future__ import annotations

import math

import numpy as np

from api.context import ServiceContext
from api.models import IsLikeAnswer, IsLikeBody, IsLikeIn
from api.queries._common import finish, make_fact, parse_cell_arg, store_errors
from api.queries.similar import snapshot_vintages, vector_value
from api.registry import primitive

__all__ = ["is_like"]


@primitive(
    "is_like",
    IsLikeIn,
    IsLikeAnswer,
    "How alike are two cells? Cosine of their Tessera embeddings, per vintage and overall.",
    "Per vintage: cosine in [-1, 1] (null when a cell has no vector that year). Overall: the mean "
    "of the per-vintage cosines over the vintages where both cells have vectors.",
)
def is_like(ctx: ServiceContext, args: IsLikeIn) -> IsLikeAnswer:
    """is_like {a, b, as_of?}."""
    a = parse_cell_arg(args.a, "a")
    b = parse_cell_arg(args.b, "b")
    with store_errors():
        reader = ctx.reader_as_of(args.as_of)
        # as_of: only the vintages whose chunks the snapshot holds (a vintage's vectors are
        # written once, so the tables hold that snapshot's vectors)
        years = snapshot_vintages(reader) if args.as_of is not None else None
        per = []
        facts = []
        cosines = []
        for year in (y for y in ctx.vintages() if years is None or y in years):
            table = ctx.table(f"geotessera/{year}")
            tslot = int(table.meta.get("tslot", year - 1970))
            ra, rb = table.row_of(a.raw), table.row_of(b.raw)
            cos = None
            if ra is not None and rb is not None:
                va = table.vector(ra).astype(np.int64)
                vb = table.vector(rb).astype(np.int64)
                den = table.norm(ra) * table.norm(rb)
                if den > 0:
                    cos = float(np.dot(va, vb)) / den
                    cosines.append((year, cos))
            for ref, r in ((a, ra), (b, rb)):
                if r is not None:
                    facts.append(
                        make_fact(
                            ctx,
                            reader,
                            ref.cell,
                            "geotessera",
                            tslot,
                            vector_value(table, r),
                            lat_q=ref.lat_q,
                            lng_q=ref.lng_q,
                            tempo="year",
                        )
                    )
            per.append(
                {
                    "vintage": year,
                    "tslot": tslot,
                    "cosine": cos,
                    "a_has_vector": ra is not None,
                    "b_has_vector": rb is not None,
                }
            )
    overall = float(np.mean([c for _, c in cosines])) if cosines else None
    note = None
    if overall is None:
        note = (
            "no vintage holds vectors for both cells"
            if per
            else "the store holds no Tessera vintage"
            + (f" in snapshot {reader.snapshot_id}" if years is not None else "")
        )
    if overall is not None and not math.isfinite(overall):
        overall = None
    answer = {
        "a": a.cell,
        "b": b.cell,
        "band": "geotessera",
        "per_vintage": per,
        "vintages_compared": [y for y, _ in cosines],
        "cosine": overall,
        "note": note,
        "snapshot_id": reader.snapshot_id,
        "facts": facts,
    }
    return finish(
        ctx, "is_like", args, IsLikeBody, IsLikeAnswer, answer, [a.cell, b.cell], reader.snapshot_id
    )
