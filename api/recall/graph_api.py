"""The graph around an item or entity: memory_neighbors, memory_relations, and memory_get of an entity.

Nodes are the project's items and the entities of :mod:`api.recall.entities`. Edges:

* the item relations the store holds (``supersedes``, ``contradicts``,
  ``derived_from``, ``refines``, ``depends_on``, ``related``), walked both ways;
* ``anchored_at``: an item and the entity it links to (derived from its anchor);
* ``shared_place``: two items linked to the same entity (one hop, ``via`` names it);
* ``near``: items whose anchor point lies within ``radius_m`` of an item's, and
  named features within ``radius_m`` of an entity or an item.

memory_neighbors walks these breadth-first up to ``depth`` hops and ``limit``
nodes (the answer says when it stopped early); memory_relations is the
authoritative, unranked list of what links to one item or entity: its relation
rows and, for an entity, every item anchored at it. Both read only the caller's
project; superseded and deleted items are left out unless asked for.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, replace
from typing import Any

from api.context import ServiceContext
from api.errors import NotFound, from_store_error
from api.memory.auth import Caller
from api.memory.models import MemoryAnswer, MemoryBody, MemoryGetIn
from api.memory.present import head_out, memory_state, relation_out
from api.recall.entities import (
    MAX_SCAN_ITEMS,
    Entity,
    EntityLink,
    anchor_point,
    distance_m,
    entities_within,
    entity_out,
    get_entity,
    is_entity_id,
    items_at,
    links_of,
    metres_box,
)
from api.recall.graph_models import MemoryNeighborsIn, MemoryRelationsIn
from api.receipts import sign_answer
from api.registry import primitive
from store import address
from store.errors import MemoryNotFound, StoreError
from store.memory.interface import MemoryStore
from store.memory.model import STATUSES, ItemFilter, MemoryItem

__all__ = ["entity_get", "item_summary", "memory_neighbors", "memory_relations"]

_VISIBLE = ("active", "potentially_stale")
_PAGE = 500
_READ_NOTE = (
    " Ids are item ids or entity ids: feature:<slug> (a named feature of the sample's "
    "manifest) or place:<geonameid> (a gazetteer city). Needs a token that may read; only "
    "the token's project is visible."
)


def item_summary(item: MemoryItem) -> dict[str, Any]:
    """The few fields of an item a graph answer shows (memory_get has the rest)."""
    return {
        "title": item.title,
        "type": item.type,
        "status": item.status,
        "verdict": item.verdict,
        "cell": item.anchor.cell,
    }


def _entity_summary(entity: Entity) -> dict[str, Any]:
    return {"name": entity.name, "kind": entity.kind, "source": entity.source}


def _sign(
    ctx: ServiceContext,
    store: MemoryStore,
    caller: Caller,
    name: str,
    args: Any,
    result: dict[str, Any],
    cells: list[str],
    fact_ids: list[str],
) -> MemoryAnswer:
    head = store.head(caller.project)
    body = MemoryBody(result={**result, "head": head_out(head)}).model_dump(mode="json")
    query = args.model_dump(mode="json", exclude_none=True)
    signed = sign_answer(ctx.signer, name, query, body, cells, fact_ids, memory_state(head))
    return MemoryAnswer.model_validate(signed)


def _entity_or_404(ctx: ServiceContext, entity_id: str) -> Entity:
    entity = get_entity(ctx, entity_id)
    if entity is None:
        raise NotFound(
            f"no entity {entity_id!r} (feature:<slug> of the place manifest or "
            "place:<geonameid> of the gazetteer)",
            code="entity_not_found",
            details={"id": entity_id[:200]},
        )
    return entity


def _item_or_404(store: MemoryStore, project: str, item_id: str) -> MemoryItem:
    item = store.get(project, item_id)
    if item is None:
        raise from_store_error(MemoryNotFound(f"no memory {item_id!r} in this project"))
    return item


def _anchored(item_id: str, entity_id: str, link: EntityLink) -> dict[str, Any]:
    """An item-to-entity link as a relation row."""
    return {
        "src_id": item_id,
        "dst_id": entity_id,
        "kind": "anchored_at",
        "how": link.how,
        "distance_m": link.distance_m,
    }


def _entity_cell(entity: Entity) -> str:
    return address.encode(entity.lat, entity.lng)


# --------------------------------------------------------------------------- get


def entity_get(ctx: ServiceContext, args: MemoryGetIn, caller: Caller) -> MemoryAnswer:
    """memory_get of an entity id: the entity, the ids of its linked items and the links."""
    entity = _entity_or_404(ctx, args.id)
    store = ctx.memory()
    try:
        linked, truncated = items_at(ctx, store, caller.project, entity, ItemFilter())
    except StoreError as exc:
        raise from_store_error(exc) from exc
    result: dict[str, Any] = {
        "entity": entity_out(entity),
        "linked_items": [item.id for item, _ in linked],
        "relations": [_anchored(item.id, entity.id, link) for item, link in linked],
        "truncated": truncated,
    }
    if args.include_history:
        result["history"] = []
        result["history_note"] = "entities have no history: they come from the place manifest"
    return _sign(ctx, store, caller, "memory_get", args, result, [_entity_cell(entity)], [])


# --------------------------------------------------------------------------- walk


@dataclass(frozen=True)
class _Edge:
    target: str
    kind: str
    direction: str
    """``out`` (from the node), ``in`` (to it) or ``both`` (symmetric: shared_place, near)."""
    via: str | None = None
    how: str | None = None
    distance_m: float | None = None

    def out(self) -> dict[str, Any]:
        d: dict[str, Any] = {"kind": self.kind, "direction": self.direction}
        if self.via is not None:
            d["via"] = self.via
        if self.how is not None:
            d["how"] = self.how
        if self.distance_m is not None:
            d["distance_m"] = round(self.distance_m, 1)
        return d


class _Graph:
    """The edges of one project's items and the entities, read lazily from the store."""

    def __init__(
        self,
        ctx: ServiceContext,
        store: MemoryStore,
        project: str,
        statuses: tuple[str, ...],
        radius_m: float,
    ) -> None:
        self.ctx, self.store, self.project = ctx, store, project
        self.where = ItemFilter(statuses=statuses)
        self.statuses = frozenset(statuses)
        self.radius_m = radius_m
        self.items: dict[str, MemoryItem] = {}
        self.entities: dict[str, Entity] = {}
        self.scan_truncated = False

    def visible(self, ids: list[str]) -> list[MemoryItem]:
        missing = [i for i in ids if i not in self.items]
        for item in self.store.get_many(self.project, missing):
            self.items[item.id] = item
        return [
            self.items[i] for i in ids if i in self.items and self.items[i].status in self.statuses
        ]

    def entity(self, entity_id: str) -> Entity | None:
        if entity_id not in self.entities:
            found = get_entity(self.ctx, entity_id)
            if found is None:
                return None
            self.entities[entity_id] = found
        return self.entities[entity_id]

    def _at(self, entity: Entity) -> list[tuple[MemoryItem, Any]]:
        linked, truncated = items_at(self.ctx, self.store, self.project, entity, self.where)
        self.scan_truncated |= truncated
        for item, _ in linked:
            self.items[item.id] = item
        return linked

    def _near_items(self, lat: float, lng: float, self_id: str | None) -> list[_Edge]:
        flt = replace(self.where, bbox=metres_box(lat, lng, self.radius_m))
        out: list[_Edge] = []
        cursor: str | None = None
        seen = 0
        while True:
            page = self.store.list_items(
                self.project, flt, limit=min(_PAGE, MAX_SCAN_ITEMS - seen), cursor=cursor
            )
            for item in page.items:
                self.items.setdefault(item.id, item)
                point = anchor_point(item)
                if item.id == self_id or point is None:
                    continue
                d = distance_m(lat, lng, point[0], point[1])
                if d <= self.radius_m:
                    out.append(_Edge(item.id, "near", "both", distance_m=d))
            seen += len(page.items)
            cursor = page.next_cursor
            if cursor is None:
                break
            if seen >= MAX_SCAN_ITEMS:
                self.scan_truncated = True
                break
        return sorted(out, key=lambda e: (e.distance_m or 0.0, e.target))

    def _near_features(self, lat: float, lng: float, skip: set[str]) -> list[_Edge]:
        return [
            _Edge(e.id, "near", "both", distance_m=d)
            for e, d in entities_within(self.ctx, lat, lng, self.radius_m)
            if e.id not in skip
        ]

    def item_edges(self, item: MemoryItem) -> Iterator[_Edge]:
        rels = self.store.relations(self.project, item.id)
        others = [r.dst_id if r.src_id == item.id else r.src_id for r in rels]
        visible = {i.id for i in self.visible(others)}
        for r, other in zip(rels, others, strict=True):
            if other in visible:
                yield _Edge(other, r.kind, "out" if r.src_id == item.id else "in")
        links = links_of(self.ctx, item)
        for link in links:
            yield _Edge(
                link.entity_id, "anchored_at", "out", how=link.how, distance_m=link.distance_m
            )
        for link in links:
            entity = self.entity(link.entity_id)
            if entity is None:
                continue
            for sharer, _ in self._at(entity):
                if sharer.id != item.id:
                    yield _Edge(sharer.id, "shared_place", "both", via=entity.id)
        point = anchor_point(item)
        if point is not None:
            yield from self._near_items(point[0], point[1], item.id)
            yield from self._near_features(point[0], point[1], {lk.entity_id for lk in links})

    def entity_edges(self, entity: Entity) -> Iterator[_Edge]:
        for item, link in self._at(entity):
            yield _Edge(item.id, "anchored_at", "in", how=link.how, distance_m=link.distance_m)
        yield from self._near_features(entity.lat, entity.lng, {entity.id})

    def edges(self, node_id: str) -> Iterator[_Edge]:
        if is_entity_id(node_id):
            entity = self.entity(node_id)
            if entity is not None:
                yield from self.entity_edges(entity)
            return
        item = self.items.get(node_id)
        if item is not None:
            yield from self.item_edges(item)

    def node_out(self, node_id: str) -> dict[str, Any]:
        if is_entity_id(node_id):
            entity = self.entity(node_id)
            return {"id": node_id, "node": "entity", **(_entity_summary(entity) if entity else {})}
        item = self.items[node_id]
        return {"id": node_id, "node": "item", **item_summary(item)}


def _start(graph: _Graph, node_id: str) -> None:
    if is_entity_id(node_id):
        _entity_or_404(graph.ctx, node_id)
        return
    graph.items[node_id] = _item_or_404(graph.store, graph.project, node_id)


@primitive(
    "memory_neighbors",
    MemoryNeighborsIn,
    MemoryAnswer,
    "Items and entities near or linked to one item or entity: relations both ways, the "
    "place or feature they share, and what lies within a radius.",
    "Breadth-first to depth hops (1..6) and at most limit nodes, nearest hops first; each "
    "neighbour says how it was reached (edge kind, direction, via the shared entity, "
    "distance). An item links to the named feature or place its anchor names or lies in; "
    "superseded and deleted items only with include_inactive. truncated says the walk "
    "stopped at limit (or an entity's scan at its cap)." + _READ_NOTE,
    access="read",
)
def memory_neighbors(ctx: ServiceContext, args: MemoryNeighborsIn, caller: Caller) -> MemoryAnswer:
    """memory_neighbors {id, depth, limit, radius_m, include_inactive}."""
    store = ctx.memory()
    statuses = tuple(STATUSES) if args.include_inactive else _VISIBLE
    graph = _Graph(ctx, store, caller.project, statuses, args.radius_m)
    try:
        _start(graph, args.id)
        nodes: list[dict[str, Any]] = []
        visited = {args.id}
        frontier = [args.id]
        truncated = False
        for depth in range(1, args.depth + 1):
            nxt: list[str] = []
            for node_id in frontier:
                for edge in graph.edges(node_id):
                    if edge.target in visited:
                        continue
                    if len(nodes) >= args.limit:
                        truncated = True
                        break
                    visited.add(edge.target)
                    nodes.append(
                        {
                            **graph.node_out(edge.target),
                            "depth": depth,
                            "from": node_id,
                            "edge": edge.out(),
                        }
                    )
                    nxt.append(edge.target)
                if truncated:
                    break
            frontier = nxt
            if truncated or not frontier:
                break
        start = graph.node_out(args.id)
    except StoreError as exc:
        raise from_store_error(exc) from exc
    result = {
        "start": start,
        "neighbors": nodes,
        "truncated": truncated or graph.scan_truncated,
        "depth": args.depth,
        "radius_m": args.radius_m,
    }
    cells = sorted({n["cell"] for n in nodes if n.get("cell")})
    return _sign(ctx, store, caller, "memory_neighbors", args, result, cells, [])


@primitive(
    "memory_relations",
    MemoryRelationsIn,
    MemoryAnswer,
    "The authoritative list of what links to an item or entity: its relation rows, the "
    "entities an item is anchored at, and every item anchored at an entity.",
    "Unranked and complete up to limit (truncated says when it stopped). For an item: the "
    "relations stored from or to it, and anchored_at links to the feature or place its "
    "anchor names or lies in (how: anchor | contains | nearest, with the distance). For an "
    "entity: the items anchored at it (superseded and deleted ones with include_inactive)."
    + _READ_NOTE,
    access="read",
)
def memory_relations(ctx: ServiceContext, args: MemoryRelationsIn, caller: Caller) -> MemoryAnswer:
    """memory_relations {id, limit, include_inactive}."""
    store = ctx.memory()
    statuses = tuple(STATUSES) if args.include_inactive else _VISIBLE
    rows: list[dict[str, Any]] = []
    scan_truncated = False
    try:
        if is_entity_id(args.id):
            entity = _entity_or_404(ctx, args.id)
            linked, scan_truncated = items_at(
                ctx, store, caller.project, entity, ItemFilter(statuses=statuses)
            )
            rows = [
                {**_anchored(item.id, entity.id, link), "item": item_summary(item)}
                for item, link in linked
            ]
            cells = [_entity_cell(entity)]
        else:
            item = _item_or_404(store, caller.project, args.id)
            rows = [relation_out(r) for r in store.relations(caller.project, item.id)]
            rows += [_anchored(item.id, lk.entity_id, lk) for lk in links_of(ctx, item)]
            cells = [item.anchor.cell] if item.anchor.cell else []
    except StoreError as exc:
        raise from_store_error(exc) from exc
    result = {
        "id": args.id,
        "relations": rows[: args.limit],
        "total": len(rows),
        "truncated": len(rows) > args.limit or scan_truncated,
    }
    return _sign(ctx, store, caller, "memory_relations", args, result, cells, [])
