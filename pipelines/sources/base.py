"""The one source interface, and the search-window helpers every adapter shares."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
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
    """Sort items by (datetime, id), drop duplicate ids, and build the result."""
    unique: dict[str, SceneItem] = {}
    for item in items:
        unique.setdefault(item.id, item)
    ordered = sorted(unique.values(), key=lambda it: (it.datetime, it.id))
    return SearchResult(items=tuple(ordered), skipped=tuple(skipped), cloud_filter=cloud_filter)
