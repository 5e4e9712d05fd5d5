"""The one source interface, and the search-window helpers every adapter shares."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import replace
from datetime import UTC, date, datetime, time
from typing import Any, Protocol, runtime_checkable

from pipelines.sources.errors import CorruptItem
from pipelines.sources.models import SceneItem, SearchResult, Skip
from store.errors import InvalidDate
from store.tslot import parse_datetime

__all__ = [
    "BBox",
    "SceneSource",
    "cloud_ok",
    "datetime_interval",
    "finish",
    "item_in_window",
    "resolve_duplicates",
    "window",
]

BBox = tuple[float, float, float, float]
"""``(min_lon, min_lat, max_lon, max_lat)`` in WGS84 degrees."""


@runtime_checkable
class SceneSource(Protocol):
    """Finds scenes for a collection, area and time window.

    Implementations: :class:`~pipelines.sources.static.StaticCatalogSource`,
    :class:`~pipelines.sources.api.StacApiSource`,
    :class:`~pipelines.sources.tessera.TesseraRegistrySource`; build one with
    :func:`~pipelines.sources.factory.open_source`.
    """

    def search(
        self,
        collection: str,
        bbox: BBox,
        start: datetime | date,
        end: datetime | date,
        max_cloud: float | None = None,
    ) -> SearchResult:
        """Search one collection.

        Args:
            collection: Canonical collection name (``sentinel-2-l2a``,
                ``sentinel-1-rtc``, ``tessera-embeddings``) or the provider's own.
            bbox: Area of interest; items whose footprint touches it match.
            start: Window start; a date means 00:00 UTC that day.
            end: Window end, inclusive; a date means the whole day (UTC).
            max_cloud: Keep optical items with ``eo:cloud_cover`` strictly below
                this (percent); ignored for SAR and Tessera collections.

        Returns:
            Parsed items sorted by (datetime, id), and the skipped ones with reasons.

        Raises:
            CatalogUnreachable: The catalog could not be read.
            UnknownCollection: The provider has no such collection.
        """
        ...


def window(start: datetime | date, end: datetime | date) -> tuple[datetime, datetime]:
    """Turn a (start, end) pair into an inclusive UTC datetime window.

    Raises:
        ValueError: ``end`` is before ``start``.
    """
    lo = _as_utc(start, time.min)
    hi = _as_utc(end, time.max)
    if hi < lo:
        raise ValueError(f"end {end!r} is before start {start!r}")
    return lo, hi


def _as_utc(value: datetime | date, clock: time) -> datetime:
    if isinstance(value, datetime):
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)
    return datetime.combine(value, clock, tzinfo=UTC)


def datetime_interval(lo: datetime, hi: datetime) -> str:
    """RFC 3339 interval ``start/end`` as STAC APIs expect (``Z`` suffix)."""

    def fmt(value: datetime) -> str:
        return value.astimezone(UTC).isoformat(timespec="microseconds").replace("+00:00", "Z")

    return f"{fmt(lo)}/{fmt(hi)}"


def item_in_window(data: Mapping[str, Any], bbox: BBox, lo: datetime, hi: datetime) -> bool:
    """True when a raw item's footprint touches ``bbox`` and its time overlaps [lo, hi].

    Uses the geometry when present (like STAC APIs do), else the bbox.

    Raises:
        CorruptItem: The item has no readable time or footprint.
    """
    from shapely.geometry import box, shape

    props = data.get("properties") or {}
    try:
        if props.get("datetime"):
            t0 = t1 = parse_datetime(props["datetime"])
        else:
            t0 = parse_datetime(props.get("start_datetime"))
            t1 = parse_datetime(props.get("end_datetime") or props.get("start_datetime"))
    except InvalidDate as err:
        raise CorruptItem(err.message) from err
    if t1 < lo or t0 > hi:
        return False
    area = box(*bbox)
    geometry = data.get("geometry")
    try:
        if isinstance(geometry, Mapping):
            return bool(shape(geometry).intersects(area))
        raw = data.get("bbox")
        if isinstance(raw, list) and len(raw) >= 4:
            half = len(raw) // 2
            return bool(box(raw[0], raw[1], raw[half], raw[half + 1]).intersects(area))
    except (TypeError, ValueError, AttributeError) as err:
        raise CorruptItem(f"bad footprint: {err}") from err
    raise CorruptItem("item has neither geometry nor bbox")


def cloud_ok(item: SceneItem, max_cloud: float | None) -> bool:
    """Client-side cloud bound, same semantics as ``query: {eo:cloud_cover: {lt: x}}``.

    Items without ``eo:cloud_cover`` fail the bound (as on a STAC API); the
    bound applies to optical (``s2``) items only.
    """
    if max_cloud is None or item.kind != "s2":
        return True
    return item.cloud_cover is not None and item.cloud_cover < max_cloud


def finish(
    items: Iterable[SceneItem], skipped: Iterable[Skip], cloud_filter: Any = "none"
) -> SearchResult:
    """Resolve duplicate ids (:func:`resolve_duplicates`), sort items by (datetime, id), build the result."""
    kept, refused = resolve_duplicates(items)
    ordered = sorted(kept, key=lambda it: (it.datetime, it.id))
    return SearchResult(
        items=tuple(ordered), skipped=(*skipped, *refused), cloud_filter=cloud_filter
    )


def resolve_duplicates(items: Iterable[SceneItem]) -> tuple[list[SceneItem], list[Skip]]:
    """Keep one item per id, chosen by content and ``updated``, never by the order items came in.

    Copies of an id whose content is the same (every parsed field but where the JSON
    was found) are one item: the copy with the smallest ``source_href`` is kept, the
    others are reported as identical duplicates. Copies that differ are ranked by
    their ``updated`` property (a copy without one ranks below any copy with one):
    the single newest copy is used and the others are reported as superseded. When
    no single copy is newest (no ``updated``, or a tie) the id is refused: every copy
    is reported and none is used, so a stored scene is never replaced by a guess.

    Returns:
        ``(kept items, skips)``; every copy not kept is a skip with code ``duplicate_id``.
    """
    by_id: dict[str, list[SceneItem]] = {}
    for item in items:
        by_id.setdefault(item.id, []).append(item)
    kept: list[SceneItem] = []
    skips: list[Skip] = []
    for copies in by_id.values():
        copies.sort(key=lambda c: c.source_href or "")
        if len(copies) == 1:
            kept.append(copies[0])
            continue
        distinct: list[SceneItem] = []  # the first copy of each content (items are not hashable)
        for c in copies:
            first = next((d for d in distinct if _same_content(c, d)), None)
            if first is None:
                distinct.append(c)
            else:
                skips.append(_duplicate(c, f"identical duplicate of {first.source_href}; ignored"))
        if len(distinct) == 1:
            kept.append(copies[0])
            continue
        ranked = sorted(distinct, key=_updated_rank, reverse=True)
        if _updated_rank(ranked[0]) > _updated_rank(ranked[1]):
            winner = ranked[0]
            kept.append(winner)
            skips.extend(
                _duplicate(
                    c,
                    f"superseded by the copy at {winner.source_href}"
                    f" (updated {winner.updated.isoformat() if winner.updated else None}"
                    f" > {c.updated.isoformat() if c.updated else None})",
                )
                for c in ranked[1:]
            )
            continue
        hrefs = ", ".join(str(c.source_href) for c in ranked)
        skips.extend(
            _duplicate(
                c,
                f"copy at {c.source_href} refused: {len(ranked)} copies with different content"
                f" and no single newest `updated` ({hrefs})",
            )
            for c in ranked
        )
    return kept, skips


def _same_content(a: SceneItem, b: SceneItem) -> bool:
    return replace(a, source_href=None) == replace(b, source_href=None)


def _updated_rank(item: SceneItem) -> tuple[int, datetime]:
    return (0, datetime.min.replace(tzinfo=UTC)) if item.updated is None else (1, item.updated)


def _duplicate(item: SceneItem, reason: str) -> Skip:
    return Skip(item.id, f"duplicate id: {reason}", "duplicate_id", item.source_href, item.datetime)
