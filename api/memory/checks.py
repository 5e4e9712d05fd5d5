"""The satellite record checks a memory at write time: its evidence verified, its claim confirmed.

Evidence kinds (each verified at write time; unverifiable evidence is a typed error):

* ``fact`` — ``{fact_id, cell, band, tslot, snapshot_id?}``: the fact is recomputed
  from the cube (at ``snapshot_id``, else the tip) and its content id must equal
  ``fact_id`` (ids are content hashes: nothing else can prove one exists);
* ``scene`` — ``{item_id}``: a STAC item id the scene inventory knows;
* ``answer`` — ``{answer}``: a signed earthmem answer whose receipt verifies;
* ``url`` — ``{url, contentHash}`` and ``file`` — ``{path, startLine?, endLine?,
  contentHash}``: kept with their content hash (``blake3:<hex>`` / ``sha256:<hex>``),
  which is what a later re-read is compared with.

Claims are evaluated by :mod:`store.memory.verdicts` (shared with the pipeline's
re-checks).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from api.context import ServiceContext
from api.errors import ApiError, InvalidArgument
from api.queries._common import parse_cell_arg, store_errors
from api.receipts import verify_answer
from store.facts import same_fact
from store.memory.model import Anchor
from store.memory.verdicts import ClaimCheck, check_claim, claim_band, fact_now

if TYPE_CHECKING:
    from store.cube.read import CubeReader

__all__ = ["claim_check", "verify_evidence"]


_HASH = re.compile(r"^(blake3|sha256):[0-9a-f]{64}$")


def _bad(message: str, index: int) -> ApiError:
    return InvalidArgument(message[:300], code="invalid_evidence", details={"index": index})


def _verify_fact(ctx: ServiceContext, ev: Mapping[str, Any], i: int) -> dict[str, Any]:
    for key in ("fact_id", "cell", "band", "tslot"):
        if key not in ev:
            raise _bad(f"evidence[{i}] (fact) needs {key}", i)
    if not isinstance(ev["tslot"], int) or isinstance(ev["tslot"], bool):
        raise _bad(f"evidence[{i}].tslot must be an integer", i)
    cell = parse_cell_arg(ev["cell"], f"evidence[{i}].cell")
    with store_errors():
        band = claim_band(ev["band"])
        reader = _reader(ctx, ev.get("snapshot_id"), i)
        fact = fact_now(
            reader, ctx.overpass_index(reader), cell.cell, band, int(ev["tslot"]), ctx.chunks
        )
    if not isinstance(ev["fact_id"], str) or not same_fact(fact["fact_id"], ev["fact_id"]):
        raise ApiError(
            "evidence_unverified",
            f"evidence[{i}]: fact {ev['fact_id']!r} is not the cube's fact at {cell.cell} "
            f"{band} tslot {ev['tslot']} in snapshot {reader.snapshot_id}",
            422,
            {"index": i, "recomputed_fact_id": fact["fact_id"], "snapshot_id": reader.snapshot_id},
        )
    return {"kind": "fact", **fact, "snapshot_id": reader.snapshot_id}


def _reader(ctx: ServiceContext, snapshot_id: Any, i: int) -> CubeReader:
    from store.cube.read import CubeReader  # zarr, icechunk: loaded on first use

    tip = ctx.reader()
    if snapshot_id is None or snapshot_id == tip.snapshot_id:
        return tip
    if not isinstance(snapshot_id, str):
        raise _bad(f"evidence[{i}].snapshot_id must be a string", i)
    return CubeReader(ctx.data_dir, snapshot_id=snapshot_id, cache=ctx.chunks)


def _verify_scene(ctx: ServiceContext, ev: Mapping[str, Any], i: int) -> dict[str, Any]:
    item_id = ev.get("item_id")
    if not isinstance(item_id, str) or not item_id:
        raise _bad(f"evidence[{i}] (scene) needs item_id", i)
    index = ctx.overpass_index()
    for family, by_t in index.rows.items():
        for t, rows in by_t.items():
            if any(item_id in row.item_ids for row in rows):
                return {"kind": "scene", "item_id": item_id, "family": family, "tslot": t}
    raise ApiError(
        "evidence_unverified",
        f"evidence[{i}]: scene {item_id!r} is not in the scene inventory"[:300],
        422,
        {"index": i},
    )


def _verify_answer(ev: Mapping[str, Any], i: int) -> dict[str, Any]:
    answer = ev.get("answer")
    if not isinstance(answer, Mapping):
        raise _bad(f"evidence[{i}] (answer) needs the signed answer object", i)
    result = verify_answer(answer)
    if not result.ok:
        raise ApiError(
            "evidence_unverified",
            f"evidence[{i}]: the answer's receipt does not verify: {result.reason}"[:300],
            422,
            {"index": i},
        )
    receipt = answer["receipt"]
    return {
        "kind": "answer",
        "primitive": receipt["primitive"],
        "answer_digest": receipt["answer_digest"],
        "snapshot_id": receipt["snapshot_id"],
        "key_id": result.key_id,
        "fact_ids": list(receipt.get("fact_ids", [])),
    }


def _verify_hashed(ev: Mapping[str, Any], kind: str, i: int) -> dict[str, Any]:
    content_hash = ev.get("contentHash")
    if not isinstance(content_hash, str) or not _HASH.fullmatch(content_hash):
        raise _bad(f"evidence[{i}] ({kind}) needs contentHash 'blake3:<hex>' or 'sha256:<hex>'", i)
    out: dict[str, Any] = {"kind": kind, "contentHash": content_hash}
    if kind == "url":
        url = ev.get("url")
        if not isinstance(url, str) or not re.match(r"^https?://[^\s]{1,2000}$", url):
            raise _bad(f"evidence[{i}] (url) needs an http(s) url", i)
        out["url"] = url
        return out
    path = ev.get("path")
    if not isinstance(path, str) or not path or len(path) > 1000 or "\x00" in path:
        raise _bad(f"evidence[{i}] (file) needs a path", i)
    out["path"] = path
    for key in ("startLine", "endLine"):
        if key in ev:
            if not isinstance(ev[key], int) or isinstance(ev[key], bool) or ev[key] < 1:
                raise _bad(f"evidence[{i}].{key} must be a positive integer", i)
            out[key] = ev[key]
    if out.get("startLine", 1) > out.get("endLine", math.inf):
        raise _bad(f"evidence[{i}]: startLine after endLine", i)
    return out


def verify_evidence(ctx: ServiceContext, evidence: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each evidence entry verified and normalised (what is stored with the item).

    Raises:
        InvalidArgument: ``invalid_evidence`` (malformed or unknown kind).
        ApiError: ``evidence_unverified`` (422) when it does not check out.
    """
    out = []
    for i, ev in enumerate(evidence):
        kind = ev.get("kind")
        if kind == "fact":
            out.append(_verify_fact(ctx, ev, i))
        elif kind == "scene":
            out.append(_verify_scene(ctx, ev, i))
        elif kind == "answer":
            out.append(_verify_answer(ev, i))
        elif kind in ("url", "file"):
            out.append(_verify_hashed(ev, str(kind), i))
        else:
            raise _bad(
                f"evidence[{i}].kind must be fact, scene, answer, url or file, got {kind!r}", i
            )
    return out


def claim_check(ctx: ServiceContext, raw: Mapping[str, Any], anchor: Anchor) -> ClaimCheck:
    """A claim checked at an item's place against the cube's tip (:mod:`store.memory.verdicts`).

    Raises:
        InvalidArgument: ``claim_needs_place`` for an item without a place; the store's
            ``invalid_claim`` / ``invalid_window`` / ``unknown_band`` (mapped to 422).
    """
    if anchor.kind == "none":
        raise InvalidArgument("a claim needs the item's place", code="claim_needs_place")
    with store_errors():
        reader = ctx.reader()
        return check_claim(reader, ctx.overpass_index(reader), raw, anchor, ctx.chunks)
