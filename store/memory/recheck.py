"""Re-checking memories against a newer cube: verdicts that flip, cited facts that changed.

An item is re-checked by evaluating its claim again (:func:`store.memory.verdicts.
check_claim`) and re-reading the cube facts its evidence cites
(:func:`store.memory.verdicts.refetch_facts`). A verdict that changed is recorded;
a flipped verdict or a cited fact the cube no longer holds marks the item
``potentially_stale``. The API's ``memory_verify`` and the pipeline's re-check asset
(after each cube commit, as actor ``pipeline``) both call :func:`recheck_item`.
"""

from __future__ import annotations

import datetime as dt
from typing import TYPE_CHECKING, Any

from store.cube.cache import ChunkCache
from store.facts import same_fact
from store.memory.interface import MemoryStore, SignHead, WriteMeta
from store.memory.model import MemoryItem, WriteResult
from store.memory.verdicts import check_claim, refetch_facts

if TYPE_CHECKING:  # the reader and the index load zarr, icechunk, pyarrow: annotations only
    from store.cube.read import CubeReader
    from store.inventory import OverpassIndex

__all__ = ["CHECKABLE_STATUSES", "recheck_item"]

CHECKABLE_STATUSES = ("active", "potentially_stale")
"""Statuses whose items are re-checked (superseded and deleted items are history)."""

_CLAIM_KEYS = ("band", "op", "value", "tslot", "window", "agg")


def recheck_item(
    store: MemoryStore,
    reader: CubeReader,
    index: OverpassIndex,
    item: MemoryItem,
    *,
    actor: str,
    request_id: str | None = None,
    sign_head: SignHead | None = None,
    cache: ChunkCache | None = None,
    record_unchanged: bool = True,
) -> tuple[WriteResult | None, dict[str, Any]]:
    """Re-check one item in the reader's snapshot; record what changed.

    Args:
        record_unchanged: Write a ``verify`` history entry even when nothing changed
            (an explicit verification); False writes only changes (the pipeline).

    Returns:
        ``(the write, or None when nothing was written; a report of what was checked)``.
    """
    report: dict[str, Any] = {"snapshot_id": reader.snapshot_id, "checked": []}
    changes: dict[str, Any] = {}
    stale_because: list[str] = []
    if item.claim is not None:
        claim = {k: item.claim[k] for k in _CLAIM_KEYS if item.claim.get(k) is not None}
        check = check_claim(reader, index, claim, item.anchor, cache)
        report["checked"].append("claim")
        report["verdict"] = {"before": item.verdict, "now": check.verdict}
        facts = tuple(f["fact_id"] for f in check.facts)
        same_facts = len(facts) == len(item.verdict_facts) and all(
            same_fact(a, b) for a, b in zip(facts, item.verdict_facts, strict=True)
        )  # a fact id of the earlier layout (f1) names the same fact as its f2 id
        if check.verdict != item.verdict or not same_facts:
            changes["verdict"] = check.verdict
            changes["verdict_facts"] = list(facts)
        if item.verdict is not None and check.verdict != item.verdict:
            stale_because.append(f"the claim's verdict changed: {item.verdict} -> {check.verdict}")
    cited = [e for e in item.evidence if e.get("kind") == "fact"]
    if cited:
        report["checked"].append("facts")
        refetched = refetch_facts(reader, index, cited, cache)
        report["facts"] = refetched
        changed = [r["fact_id"] for r in refetched if not r["same"]]
        if changed:
            stale_because.append(f"{len(changed)} cited fact(s) changed in the cube")
    if stale_because and item.status == "active":
        changes["status"] = "potentially_stale"
    report["stale_because"] = stale_because
    if not changes and not record_unchanged:
        return None, report
    meta = WriteMeta(actor=actor, at=dt.datetime.now(dt.UTC), request_id=request_id)
    action = "stale" if "status" in changes else "verify"
    written = store.change(
        item.project,
        item.id,
        None,
        {**changes, "metadata": {**item.metadata, "earthmem_last_check": report}},
        action,
        meta,
        sign_head=sign_head,
    )
    return written, report
