"""Parse STAC items (dicts or pystac objects) into :class:`SceneItem`.

Scale/offset precedence per asset: ``raster:bands[0].scale/offset`` (STAC 1.0
raster extension) > asset ``raster:scale``/``raster:offset`` > STAC 1.1
``bands[0].scale/offset`` > the Sentinel-2 processing-baseline rule for
reflectance bands (baseline >= 04.00, or acquisition on/after 2022-01-25 when
the baseline is unknown: scale 1e-4, offset -0.1; else scale 1e-4, offset 0)
> identity. CRS: asset ``proj:code``/``proj:epsg``/``proj:wkt2`` override the
item's; it must be known to PROJ.
"""

from __future__ import annotations

import posixpath
import re
import urllib.parse
from collections.abc import Mapping, Sequence
from datetime import date, datetime
from functools import lru_cache
from typing import Any

import pystac

from pipelines.sources.bands import (
    COLLECTION_KIND,
    DEFAULT_REQUIRED_ROLES,
    REFLECTANCE_ROLES,
    S2_BAND_OF_ROLE,
    canonical_collection,
    select_assets,
)
from pipelines.sources.errors import CorruptItem, MissingAsset, SourceError, UnknownCRS
from pipelines.sources.models import AssetRef, Kind, ScaleSource, SceneItem, Skip
from store.errors import InvalidDate
from store.tslot import parse_datetime

__all__ = [
    "BASELINE_04_DATE",
    "baseline_rule",
    "item_to_dict",
    "parse_item",
    "parse_or_skip",
    "processing_baseline",
]

BASELINE_04_DATE = date(2022, 1, 25)
"""First day of processing baseline 04.00 (DN offset of +1000 introduced)."""

_BASELINE_IN_NAME = re.compile(r"_N(\d{2})(\d{2})_")
_CRS_KEYS = ("proj:code", "proj:epsg", "proj:wkt2", "proj:projjson")


def item_to_dict(item: pystac.Item) -> dict[str, Any]:
    """Serialise a pystac item with absolute asset hrefs (relative ones resolved)."""
    data = item.to_dict(include_self_link=False, transform_hrefs=False)
    for key, asset in item.assets.items():
        data["assets"][key]["href"] = asset.get_absolute_href() or asset.href
    return data


def processing_baseline(item_id: str, props: Mapping[str, Any]) -> str | None:
    """The Sentinel-2 processing baseline as ``NN.NN``, if the item tells it.

    Looks at ``s2:processing_baseline`` (Earth Search, PC), ``processing:version``
    (CDSE) and the ``_Nxxyy_`` part of the product name.
    """
    for key in ("s2:processing_baseline", "processing:version"):
        raw = props.get(key)
        if isinstance(raw, (str, int, float)) and str(raw).strip():
            parts = str(raw).strip().split(".")
            try:
                major = int(parts[0])
                minor = int(parts[1]) if len(parts) > 1 else 0
            except ValueError:
                continue
            return f"{major:02d}.{minor:02d}"
    for text in (props.get("s2:product_uri"), props.get("s2:product_id"), item_id):
        if isinstance(text, str) and (m := _BASELINE_IN_NAME.search(text)):
            return f"{m.group(1)}.{m.group(2)}"
    return None


def baseline_rule(baseline: str | None, when: datetime) -> tuple[float, float, ScaleSource]:
    """Scale/offset of Sentinel-2 L2A reflectance DN without raster metadata.

    Args:
        baseline: ``NN.NN`` processing baseline or None.
        when: Acquisition time (used only when ``baseline`` is None).

    Returns:
        ``(scale, offset, rule)``.
    """
    if baseline is not None:
        major, minor = (int(p) for p in baseline.split("."))
        if (major, minor) >= (4, 0):
            return 1e-4, -0.1, "baseline>=04.00"
        return 1e-4, 0.0, "baseline<04.00"
    if when.date() >= BASELINE_04_DATE:
        return 1e-4, -0.1, "date>=2022-01-25"
    return 1e-4, 0.0, "date<2022-01-25"


@lru_cache(maxsize=256)
def _check_crs(value: str | int) -> int | str:
    from pyproj import CRS
    from pyproj.exceptions import CRSError

    try:
        crs = CRS.from_user_input(value)
    except (CRSError, TypeError, ValueError) as err:
        raise UnknownCRS(f"CRS {value!r} is not known to PROJ") from err
    if isinstance(value, int):
        return value
    epsg = crs.to_epsg(min_confidence=100)
    return epsg if epsg is not None else crs.to_wkt()


def _crs_of(item_id: str, asset: Mapping[str, Any], props: Mapping[str, Any]) -> int | str:
    source = asset if any(k in asset for k in _CRS_KEYS) else props
    code = source.get("proj:code")
    epsg = source.get("proj:epsg")
    wkt = source.get("proj:wkt2")
    projjson = source.get("proj:projjson")
    if isinstance(code, str) and code:
        if code.upper().startswith("EPSG:") and code[5:].isdigit():
            return _check_crs(int(code[5:]))
        return _check_crs(code)
    if isinstance(epsg, int) and not isinstance(epsg, bool):
        return _check_crs(epsg)
    if isinstance(wkt, str) and wkt:
        return _check_crs(wkt)
    if isinstance(projjson, Mapping):
        import json

        return _check_crs(json.dumps(projjson))
    raise UnknownCRS(f"item {item_id!r}: no proj:code / proj:epsg / proj:wkt2")


def _float_or(value: Any, default: float) -> float:
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise CorruptItem(f"non-numeric scale/offset {value!r}")
    return float(value)


def _first_band(asset: Mapping[str, Any], key: str) -> Mapping[str, Any]:
    bands = asset.get(key)
    if isinstance(bands, list) and bands and isinstance(bands[0], Mapping):
        return bands[0]
    return {}


def _scale_offset(
    asset: Mapping[str, Any], role: str, kind: Kind, baseline: str | None, when: datetime
) -> tuple[float, float, ScaleSource]:
    rb = _first_band(asset, "raster:bands")
    if "scale" in rb or "offset" in rb:
        return _float_or(rb.get("scale"), 1.0), _float_or(rb.get("offset"), 0.0), "raster:bands"
    if "raster:scale" in asset or "raster:offset" in asset:
        scale = _float_or(asset.get("raster:scale"), 1.0)
        return scale, _float_or(asset.get("raster:offset"), 0.0), "raster:scale"
    b = _first_band(asset, "bands")
    if "scale" in b or "offset" in b:
        return _float_or(b.get("scale"), 1.0), _float_or(b.get("offset"), 0.0), "bands"
    if kind == "s2" and role in REFLECTANCE_ROLES:
        return baseline_rule(baseline, when)
    return 1.0, 0.0, "identity"


def _nodata(asset: Mapping[str, Any], kind: Kind) -> float | None:
    for source in (_first_band(asset, "raster:bands"), asset, _first_band(asset, "bands")):
        if "nodata" in source:
            value = source["nodata"]
            if value is None:
                return None
            if isinstance(value, str):  # "nan", "inf", "-inf" per the raster extension
                try:
                    return float(value)
                except ValueError as err:
                    raise CorruptItem(f"bad nodata {value!r}") from err
            return _float_or(value, 0.0)
    return 0.0 if kind == "s2" else None


def _dtype(asset: Mapping[str, Any]) -> str | None:
    for source in (_first_band(asset, "raster:bands"), asset, _first_band(asset, "bands")):
        value = source.get("data_type")
        if isinstance(value, str):
            return value
    return None


def _transform(
    asset: Mapping[str, Any], props: Mapping[str, Any]
) -> tuple[float, float, float, float, float, float] | None:
    raw = asset.get("proj:transform", props.get("proj:transform"))
    if raw is None:
        return None
    if not isinstance(raw, list) or len(raw) not in (6, 9):
        raise CorruptItem(f"proj:transform must have 6 or 9 numbers, got {raw!r}")
    a, b, c, d, e, f = (_float_or(v, 0.0) for v in raw[:6])
    return (a, b, c, d, e, f)


def _shape(asset: Mapping[str, Any], props: Mapping[str, Any]) -> tuple[int, int] | None:
    raw = asset.get("proj:shape", props.get("proj:shape"))
    if raw is None:
        return None
    if (
        not isinstance(raw, list)
        or len(raw) != 2
        or not all(isinstance(v, int) and v > 0 for v in raw)
    ):
        raise CorruptItem(f"proj:shape must be [height, width], got {raw!r}")
    return (raw[0], raw[1])


def _resolve_href(href: str, base: str | None) -> str:
    parsed = urllib.parse.urlparse(href)
    if parsed.scheme and len(parsed.scheme) > 1:  # a URL (not a Windows drive letter)
        return href
    if posixpath.isabs(href) or base is None:
        return href
    if urllib.parse.urlparse(base).scheme in ("http", "https", "s3", "file"):
        return urllib.parse.urljoin(base, href)
    return posixpath.normpath(posixpath.join(posixpath.dirname(base), href))


def _infer_kind(data: Mapping[str, Any], props: Mapping[str, Any]) -> Kind:
    collection = data.get("collection")
    if isinstance(collection, str) and collection in COLLECTION_KIND:
        return COLLECTION_KIND[collection]
    keys = set(data.get("assets", {}))
    if "tessera:year" in props or {"embedding", "scales"} <= keys:
        return "tessera"
    if "sar:instrument_mode" in props or {"vv", "vh"} & keys:
        return "s1"
    if any(k.startswith("s2:") for k in props) or "eo:cloud_cover" in props:
        return "s2"
    raise CorruptItem(f"cannot tell the scene kind of collection {collection!r}")


def _bbox(data: Mapping[str, Any]) -> tuple[float, float, float, float]:
    raw = data.get("bbox")
    if isinstance(raw, list) and len(raw) in (4, 6):
        vals = [_float_or(v, 0.0) for v in raw]
        if len(vals) == 6:
            vals = [vals[0], vals[1], vals[3], vals[4]]
        return (vals[0], vals[1], vals[2], vals[3])
    geometry = data.get("geometry")
    if isinstance(geometry, Mapping):
        from shapely.geometry import shape

        try:
            minx, miny, maxx, maxy = shape(geometry).bounds
        except Exception as err:
            raise CorruptItem(f"bad geometry: {err}") from err
        return (minx, miny, maxx, maxy)
    raise CorruptItem("item has neither bbox nor geometry")


def parse_item(
    item: Mapping[str, Any] | pystac.Item,
    *,
    kind: Kind | None = None,
    required_roles: Sequence[str] | None = None,
    source_href: str | None = None,
) -> SceneItem:
    """Parse one STAC item into a :class:`SceneItem`.

    Args:
        item: A STAC item as a dict (API response) or a ``pystac.Item``.
        kind: Scene family; inferred from the collection / properties when None.
        required_roles: Roles that must be present; defaults to
            :data:`~pipelines.sources.bands.DEFAULT_REQUIRED_ROLES` for the kind.
        source_href: Where the item JSON lives; relative asset hrefs are
            resolved against it (defaults to the item's ``self`` link).

    Returns:
        The parsed item.

    Raises:
        CorruptItem: Malformed item (no id, datetime, bbox or asset href).
        MissingAsset: A required role has no asset.
        UnknownCRS: An asset has no CRS, or one PROJ does not know.
    """
    if isinstance(item, pystac.Item):
        source_href = source_href or item.get_self_href()
        data: Mapping[str, Any] = item_to_dict(item)
    else:
        data = item
    if not isinstance(data, Mapping):
        raise CorruptItem(f"item is not a JSON object: {type(data).__name__}")
    item_id = data.get("id")
    if not isinstance(item_id, str) or not item_id:
        raise CorruptItem("item has no id")
    props = data.get("properties")
    if not isinstance(props, Mapping):
        raise CorruptItem(f"item {item_id!r} has no properties")
    if source_href is None:
        for link in data.get("links", ()):
            if isinstance(link, Mapping) and link.get("rel") == "self":
                source_href = link.get("href")
    try:
        when = parse_datetime(props.get("datetime") or props.get("start_datetime"))
    except InvalidDate as err:
        raise CorruptItem(err.message) from err
    bbox = _bbox(data)
    kind = kind or _infer_kind(data, props)
    raw_assets = data.get("assets")
    if not isinstance(raw_assets, Mapping):
        raise CorruptItem(f"item {item_id!r} has no assets")
    chosen = select_assets(kind, frozenset(raw_assets))
    needed = tuple(required_roles if required_roles is not None else DEFAULT_REQUIRED_ROLES[kind])
    missing = tuple(role for role in needed if role not in chosen)
    if missing:
        raise MissingAsset(item_id, missing)
    baseline = processing_baseline(item_id, props) if kind == "s2" else None
    assets: dict[str, AssetRef] = {}
    for role, key in chosen.items():
        asset = raw_assets[key]
        if not isinstance(asset, Mapping) or not isinstance(asset.get("href"), str):
            raise CorruptItem(f"item {item_id!r}: asset {key!r} has no href")
        try:
            crs = _crs_of(item_id, asset, props)
        except UnknownCRS as err:
            raise UnknownCRS(f"item {item_id!r}, asset {key!r}: {err.message}") from err
        scale, offset, rule = _scale_offset(asset, role, kind, baseline, when)
        band = S2_BAND_OF_ROLE.get(role) if kind == "s2" else None
        if kind == "s1":
            band = role.upper()
        assets[role] = AssetRef(
            href=_resolve_href(asset["href"], source_href),
            role=role,
            key=key,
            band=band,
            scale=scale,
            offset=offset,
            scale_source=rule,
            nodata=_nodata(asset, kind),
            crs=crs,
            transform=_transform(asset, props),
            shape=_shape(asset, props),
            dtype=_dtype(asset),
        )
    collection = data.get("collection")
    cloud = props.get("eo:cloud_cover")
    year: int | None = None
    if kind == "tessera":
        raw_year = props.get("tessera:year")
        year = int(raw_year) if isinstance(raw_year, int) else when.year
    platform = props.get("platform")
    return SceneItem(
        id=item_id,
        collection=canonical_collection(collection) if isinstance(collection, str) else "",
        kind=kind,
        datetime=when,
        bbox=bbox,
        cloud_cover=float(cloud) if isinstance(cloud, (int, float)) else None,
        processing_baseline=baseline,
        assets=assets,
        source_href=source_href,
        tessera_year=year,
        platform=platform if isinstance(platform, str) else None,
        updated=_updated(props),
    )


def _updated(props: Mapping[str, Any]) -> datetime | None:
    """The ``updated`` property, or None when absent or unreadable (it only ranks duplicates)."""
    raw = props.get("updated")
    if not isinstance(raw, str):
        return None
    try:
        return parse_datetime(raw)
    except InvalidDate:
        return None


def parse_or_skip(
    item: Mapping[str, Any] | pystac.Item,
    *,
    kind: Kind | None = None,
    required_roles: Sequence[str] | None = None,
    source_href: str | None = None,
) -> SceneItem | Skip:
    """Like :func:`parse_item`, but a bad item becomes a :class:`Skip` with its reason."""
    try:
        return parse_item(item, kind=kind, required_roles=required_roles, source_href=source_href)
    except SourceError as err:
        reason, code = err.message, err.code
    except (KeyError, TypeError, ValueError, AttributeError) as err:
        reason, code = f"unparseable item: {err!r}", CorruptItem.code
    return Skip(
        item_id=_id_of(item, source_href),
        reason=reason,
        code=code,
        href=source_href,
        when=_when_of(item),
    )


def _when_of(item: Mapping[str, Any] | pystac.Item) -> datetime | None:
    """The acquisition time of an item that failed to parse, when it can still be read."""
    if isinstance(item, pystac.Item):
        return item.datetime
    props = item.get("properties") if isinstance(item, Mapping) else None
    if not isinstance(props, Mapping):
        return None
    try:
        return parse_datetime(props.get("datetime") or props.get("start_datetime"))
    except InvalidDate:
        return None


def _id_of(item: Mapping[str, Any] | pystac.Item, fallback: str | None) -> str:
    if isinstance(item, pystac.Item):
        return item.id
    if isinstance(item, Mapping) and isinstance(item.get("id"), str):
        return str(item["id"])
    return fallback or "<unknown>"
