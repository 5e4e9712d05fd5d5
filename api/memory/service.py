"""The memory primitives: typed, place-anchored memories written and read by token.

Each primitive is ``fn(ctx, args, caller)``; the dispatch has checked the caller's
token (:mod:`api.memory.auth`) before the call. Writes validate and complete the
item (:mod:`api.memory.rules`), resolve its place, verify its evidence and check its
claim against the cube (:mod:`api.memory.checks`), then write it in one transaction
(:class:`store.memory.interface.MemoryStore`) and answer with a receipt that binds
the item's content digest and the project's new history head.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from api.context import ServiceContext
from api.errors import ApiError, from_store_error
from api.memory.anchors import resolve_anchor
from api.memory.audit import head_signature
from api.memory.auth import Caller, verified
from api.memory.checks import claim_check, verify_evidence
from api.memory.models import (
    MemoryAnswer,
    MemoryBody,
    MemoryCreateIn,
    MemoryDeleteIn,
    MemoryGetIn,
    MemoryHistoryIn,
    MemoryListIn,
    MemoryRelateIn,
    MemoryUpdateIn,
    MemoryVerifyIn,
)
from api.memory.present import entry_out, head_out, item_out, memory_state, relation_out
from api.memory.rules import complete_item, request_digest, valid_time
from api.queries._common import finish
from api.recall.embedder import embed_item
from api.recall.entities import is_entity_id
from api.recall.graph_api import entity_get
from api.registry import primitive
from store.errors import InvalidTransition, MemoryNotFound, StoreError
from store.memory.interface import WriteMeta
from store.memory.model import ItemFilter, MemoryItem, ProjectHead, WriteResult
from store.memory.recheck import CHECKABLE_STATUSES, recheck_item

__all__ = [
    "memory_create",
    "memory_delete",
    "memory_get",
    "memory_history",
    "memory_list",
    "memory_relate",
    "memory_update",
    "memory_verify",
]

_WRITE_NOTE = (
    " Needs a token that may write (Authorization: Bearer ...). Idempotent by operation_id; "
    "the receipt binds the item's content digest and the project's new history head."
)


def _now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def _answer(
    ctx: ServiceContext,
    primitive_name: str,
    args: Any,
    result: dict[str, Any],
    head: ProjectHead,
    cells: list[str],
    fact_ids: list[str],
) -> MemoryAnswer:
    # finish() signs the body's dump and keeps the signed dict for the adapter (no second dump)
    return finish(
        ctx,
        primitive_name,
        args,
        MemoryBody,
        MemoryAnswer,
        {"result": {**result, "head": head_out(head)}},
        cells,
        memory_state(head),
        fact_ids=fact_ids,
    )


def _caller_meta(ctx: ServiceContext, caller: Caller, name: str, args: Any) -> WriteMeta:
    """A write by the caller itself (rate limited; its operation and request ids)."""
    ctx.write_limiter.take(caller.token_id)
    return WriteMeta(
        actor=caller.actor,
        at=_now(),
        operation_id=args.operation_id,
        request_digest=request_digest(name, args),
        request_id=args.request_id,
        token_hash=caller.token_hash,
    )


def _sign_head(ctx: ServiceContext) -> Any:
    return lambda head: head_signature(ctx.signer, head)


def _item_answer(
    ctx: ServiceContext,
    name: str,
    args: Any,
    written: WriteResult,
    extra: dict[str, Any],
) -> MemoryAnswer:
    item = written.item
    assert item is not None
    head = ProjectHead(item.project, written.entry.seq, written.entry.hash)
    facts = [*item.verdict_facts, *(e["fact_id"] for e in item.evidence if e.get("fact_id"))]
    cells = [item.anchor.cell] if item.anchor.cell else []
    result = {"item": item_out(item), "replayed": written.replayed, "seq": written.entry.seq}
    return _answer(ctx, name, args, {**result, **extra}, head, cells, facts)


def _write(ctx: ServiceContext, caller: Caller, args: MemoryCreateIn, name: str) -> MemoryAnswer:
    ctx.write_limiter.take(caller.token_id)
    if args.project is not None and args.project != caller.project:
        raise ApiError(
            "project_mismatch",
            f"the token belongs to project {caller.project!r}, not {args.project!r}",
            403,
        )
    draft = complete_item(args, caller)
    anchor = resolve_anchor(ctx, args.where)
    if anchor.kind == "none" and not draft.placeless:
        raise ApiError(
            "place_required",
            f"a {args.type} is anchored to a place: give where (cell, lat+lng, bbox, "
            "geometry or place); only decision, contract, constraint, architecture and "
            "implementation items may go without one",
            422,
        )
    evidence = verify_evidence(ctx, args.evidence)
    claim_raw = args.claim
    if args.type == "invariant" and claim_raw is None:
        condition = args.metadata.get("condition")
        claim_raw = condition if isinstance(condition, dict) else None
    check = claim_check(ctx, claim_raw, anchor) if claim_raw is not None else None
    valid_from, valid_to = valid_time(args)
    item = draft.build(
        anchor=anchor,
        evidence=tuple(evidence),
        valid_from=valid_from,
        valid_to=valid_to,
        claim=(
            {
                **check.claim,
                "overpasses": check.overpasses,
                "reason": check.reason,
                "snapshot_id": check.snapshot_id,
            }
            if check
            else None
        ),
        verdict=check.verdict if check else None,
        verdict_facts=tuple(f["fact_id"] for f in check.facts) if check else (),
        embedding=embed_item(ctx.embedder(), draft),
    )
    meta = WriteMeta(
        actor=item.actor,
        at=_now(),
        operation_id=args.operation_id,
        request_digest=request_digest(name, args),
        request_id=args.request_id,
        token_hash=caller.token_hash,
    )
    supersedes = None
    if isinstance(args, MemoryUpdateIn):
        supersedes = (args.id, args.expected_version)
    try:
        written = ctx.memory().create(
            caller.project, item, meta, supersedes=supersedes, sign_head=_sign_head(ctx)
        )
    except StoreError as exc:
        raise from_store_error(exc) from exc
    extra: dict[str, Any] = {"warnings": draft.warnings, "applied": draft.applied}
    if check is not None:
        extra["claim_check"] = {
            "verdict": check.verdict,
            "reason": check.reason,
            "snapshot_id": check.snapshot_id,
            "facts": check.facts,
        }
    return _item_answer(ctx, name, args, written, extra)


@primitive(
    "memory_create",
    MemoryCreateIn,
    MemoryAnswer,
    "Write a typed, place-anchored memory with evidence, confidence and an optional claim "
    "the cube checks (corroborated / contradicted / unknown).",
    "Fields as the reference memory writer: type, title, statement, tags (>= 1), details, "
    "confidence (derived from asserted_by when omitted; hypotheses <= 0.4), importance, "
    "evidence, related_memory_ids, metadata (invariants: verificationMethod + condition), "
    "asserted_by, applicability, scope, supersedes_id, actor, session, request_id, "
    "operation_id; plus where (the place) and valid_at | valid_from/valid_to." + _WRITE_NOTE,
    access="write",
)
def memory_create(ctx: ServiceContext, args: MemoryCreateIn, caller: Caller) -> MemoryAnswer:
    """memory_create: one new item (supersedes_id makes it an update of that item)."""
    if args.supersedes_id is not None:
        old = _get(ctx, caller, args.supersedes_id)
        update = MemoryUpdateIn.model_validate(
            {**args.model_dump(), "id": old.id, "expected_version": old.version}
        )
        return _write(ctx, caller, update, "memory_create")
    return _write(ctx, caller, args, "memory_create")


@primitive(
    "memory_update",
    MemoryUpdateIn,
    MemoryAnswer,
    "Supersede an item: a new version of it, written as a new item; the old one is marked "
    "superseded (hidden by default, its history kept).",
    "Give the id and the version you read (expected_version): a stale version is a "
    "version_conflict, so two agents cannot fork one item's chain." + _WRITE_NOTE,
    access="write",
)
def memory_update(ctx: ServiceContext, args: MemoryUpdateIn, caller: Caller) -> MemoryAnswer:
    """memory_update: supersede ``id`` at ``expected_version``."""
    return _write(ctx, caller, args, "memory_update")


def _get(ctx: ServiceContext, caller: Caller, item_id: str) -> MemoryItem:
    verified(ctx.memory(), caller, "write" if caller.remembered else "read")
    item = ctx.memory().get(caller.project, item_id)
    if item is None:
        raise from_store_error(MemoryNotFound(f"no memory {item_id!r} in this project"))
    return item


@primitive(
    "memory_get",
    MemoryGetIn,
    MemoryAnswer,
    "One memory by id, with its relations (and its history on request); or an entity.",
    "Items of other projects are absent (memory_not_found). An entity id (feature:<slug>, "
    "place:<geonameid>) answers the entity, the ids of the items linked to it and those "
    "links (entity_not_found when there is none). Needs a token that may read.",
    access="read",
)
def memory_get(ctx: ServiceContext, args: MemoryGetIn, caller: Caller) -> MemoryAnswer:
    """memory_get (an entity id is served by :func:`api.recall.graph_api.entity_get`)."""
    if is_entity_id(args.id):
        return entity_get(ctx, args, caller)
    store = ctx.memory()
    item = _get(ctx, caller, args.id)
    result: dict[str, Any] = {
        "item": item_out(item),
        "relations": [relation_out(r) for r in store.relations(caller.project, item.id)],
    }
    if args.include_history:
        result["history"] = [entry_out(e) for e in store.history(caller.project, item_id=item.id)]
    head = store.head(caller.project)
    cells = [item.anchor.cell] if item.anchor.cell else []
    return _answer(ctx, "memory_get", args, result, head, cells, list(item.verdict_facts))


@primitive(
    "memory_list",
    MemoryListIn,
    MemoryAnswer,
    "Browse memories by place, type, tag, status and valid time, newest first, paged.",
    "where: items whose place meets it (a bbox, polygon, cell or a named place). Superseded "
    "and deleted items only when statuses names them. Needs a token that may read.",
    access="read",
)
def memory_list(ctx: ServiceContext, args: MemoryListIn, caller: Caller) -> MemoryAnswer:
    """memory_list."""
    store = ctx.memory()
    anchor = resolve_anchor(ctx, args.where)
    valid_at = valid_time(args)[0] if args.valid_at else None
    where = ItemFilter(
        types=tuple(args.types),
        tags=tuple(args.tags),
        statuses=tuple(args.statuses),
        bbox=anchor.bbox,
        valid_at=valid_at,
    )
    try:
        page = store.list_items(caller.project, where, limit=args.limit, cursor=args.cursor)
    except StoreError as exc:
        raise from_store_error(exc) from exc
    result = {"items": [item_out(i) for i in page.items], "next_cursor": page.next_cursor}
    return _answer(ctx, "memory_list", args, result, store.head(caller.project), [], [])


@primitive(
    "memory_relate",
    MemoryRelateIn,
    MemoryAnswer,
    "Relate two memories: contradicts, derived_from, refines, depends_on or related.",
    "Both items must be of the caller's project." + _WRITE_NOTE,
    access="write",
)
def memory_relate(ctx: ServiceContext, args: MemoryRelateIn, caller: Caller) -> MemoryAnswer:
    """memory_relate."""
    meta = _caller_meta(ctx, caller, "memory_relate", args)
    try:
        written = ctx.memory().relate(
            caller.project, args.src_id, args.dst_id, args.kind, meta, sign_head=_sign_head(ctx)
        )
    except StoreError as exc:
        raise from_store_error(exc) from exc
    head = ProjectHead(caller.project, written.entry.seq, written.entry.hash)
    result = {
        "relation": {"src_id": args.src_id, "dst_id": args.dst_id, "kind": args.kind},
        "replayed": written.replayed,
        "seq": written.entry.seq,
    }
    return _answer(ctx, "memory_relate", args, result, head, [], [])


@primitive(
    "memory_history",
    MemoryHistoryIn,
    MemoryAnswer,
    "The hash-chained history of one memory, or of the whole project (who, when, what).",
    "Entries in order, each with prev_hash, hash and the server's signature of the head. "
    "Needs a token that may read.",
    access="read",
)
def memory_history(ctx: ServiceContext, args: MemoryHistoryIn, caller: Caller) -> MemoryAnswer:
    """memory_history."""
    store = ctx.memory()
    if args.id is not None:
        _get(ctx, caller, args.id)
    entries = store.history(
        caller.project, item_id=args.id, after_seq=args.after_seq, limit=args.limit
    )
    result = {"entries": [entry_out(e) for e in entries]}
    return _answer(ctx, "memory_history", args, result, store.head(caller.project), [], [])


@primitive(
    "memory_delete",
    MemoryDeleteIn,
    MemoryAnswer,
    "Delete a memory (soft: hidden, its content and history kept; a reason is required).",
    "Give the version you read (expected_version)." + _WRITE_NOTE,
    access="write",
)
def memory_delete(ctx: ServiceContext, args: MemoryDeleteIn, caller: Caller) -> MemoryAnswer:
    """memory_delete."""
    meta = _caller_meta(ctx, caller, "memory_delete", args)
    try:
        written = ctx.memory().change(
            caller.project,
            args.id,
            args.expected_version,
            {"status": "deleted", "deleted_reason": args.reason},
            "delete",
            meta,
            sign_head=_sign_head(ctx),
        )
    except StoreError as exc:
        raise from_store_error(exc) from exc
    return _item_answer(ctx, "memory_delete", args, written, {})


@primitive(
    "memory_verify",
    MemoryVerifyIn,
    MemoryAnswer,
    "Re-check a memory's claim and cube evidence against the cube now.",
    "A changed verdict or a cited fact the cube no longer holds is recorded in the item's "
    "history; a cited fact that changed marks the item potentially_stale." + _WRITE_NOTE,
    access="write",
)
def memory_verify(ctx: ServiceContext, args: MemoryVerifyIn, caller: Caller) -> MemoryAnswer:
    """memory_verify."""
    ctx.write_limiter.take(caller.token_id)
    item = _get(ctx, caller, args.id)
    if item.status not in CHECKABLE_STATUSES:
        raise from_store_error(
            InvalidTransition(f"memory {item.id} is {item.status}: nothing to verify")
        )
    try:
        reader = ctx.reader()
        written, report = recheck_item(
            ctx.memory(),
            reader,
            ctx.overpass_index(reader),
            item,
            actor=caller.actor,
            request_id=args.request_id,
            sign_head=_sign_head(ctx),
            cache=ctx.chunks,
        )
    except StoreError as exc:
        raise from_store_error(exc) from exc
    assert written is not None
    return _item_answer(ctx, "memory_verify", args, written, {"recheck": report})
