"""Qualifiers: what "B" in "A, B" stands for, and which candidates for A it keeps.

A qualifier is read, all at once, as every one of these it can be:

* a country (name, ISO2, ISO3, alias): keeps candidates of that country;
* an admin-1 area of any country (name, alternate name, ISO 3166-2 code; bare
  code for US states): keeps candidates of that area;
* the admin-1 code of one of the candidates (geonames codes such as ``ZH``);
* places of that name (cities and sample features, whole primary or alternate
  name): keeps candidates within :data:`QUALIFIER_NEAR_KM` of one of them.

A candidate passes when any reading keeps it. A sample feature of unknown
country passes a region (unknown is not a contradiction) but must be near a
named place like any other candidate. A qualifier that is none of these is
unknown: it constrains nothing and the answer is low-confidence.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from api.places.models import Excluded, Place, Regions
from api.places.names import normalise_name

__all__ = ["QUALIFIER_NEAR_KM", "Qualifier", "excluded_by", "km_between", "where"]

QUALIFIER_NEAR_KM = 50.0
"""A qualifier naming a place keeps candidates within this distance of it (a city and its suburbs)."""

_MAX_ANCHORS_NAMED = 1  # places of the qualifier's name spelled out in its label


def km_between(a: Place, b: Place) -> float:
    """Great-circle distance between two places' points, km."""
    lat1, lat2 = math.radians(a.lat), math.radians(b.lat)
    dlat = lat2 - lat1
    dlng = math.radians(b.lng - a.lng)
    h = math.sin(dlat / 2) ** 2 + math.cos(lat1) * math.cos(lat2) * math.sin(dlng / 2) ** 2
    return 2 * 6371.0088 * math.asin(min(1.0, math.sqrt(h)))


def where(place: Place) -> str:
    """``IN, Jharkhand`` (country and admin-1 area, as known; else ``sample lake``)."""
    parts = [p for p in (place.country, place.admin1_name) if p]
    return ", ".join(parts) if parts else f"{place.source} {place.kind}"


@dataclass(frozen=True)
class Qualifier:
    """One qualifier of a place text, read as regions and named places."""

    key: str
    """The normalised qualifier text."""
    countries: frozenset[str]
    """ISO2 codes it names."""
    areas: frozenset[tuple[str, str]]
    """``(ISO2, admin1 code)`` areas it names."""
    anchors: tuple[Place, ...]
    """Places of that name; candidates within :data:`QUALIFIER_NEAR_KM` of one pass."""
    label: str
    """What it was read as, for reasons (``Jharkhand (admin-1 area of IN)``)."""

    @classmethod
    def read(
        cls,
        key: str,
        regions: Regions,
        anchors: Sequence[Place],
        candidate_codes: Iterable[str] = (),
    ) -> Qualifier:
        """Read a normalised qualifier.

        Args:
            key: The qualifier, normalised.
            regions: Country and admin-1 tables.
            anchors: Places of that name (already narrowed by later qualifiers).
            candidate_codes: Normalised admin-1 codes of the candidates; a
                qualifier equal to one of them names that code.

        Returns:
            The qualifier (``known`` false when it names nothing).
        """
        countries = frozenset({regions.countries[key]} if key in regions.countries else ())
        areas = set(regions.admin1.get(key, ()))
        if key in set(candidate_codes):
            areas.add(("*", key))  # a candidate's own code, any country
        labels = [f"{regions.country_names.get(c, c)} (country)" for c in sorted(countries)]
        labels += [
            f"{regions.admin1_names.get(a, a[1])} (admin-1 area of {a[0]})"
            for a in sorted(areas)
            if a[0] != "*"
        ]
        if ("*", key) in areas:
            labels.append(f"admin-1 code {key.upper()}")
        if anchors:
            named = ", ".join(f"{p.name} ({where(p)})" for p in anchors[:_MAX_ANCHORS_NAMED])
            more = len(anchors) - _MAX_ANCHORS_NAMED
            extra = f" or {more} other place(s) of that name" if more > 0 else ""
            labels.append(f"within {QUALIFIER_NEAR_KM:g} km of {named}{extra}")
        return cls(
            key=key,
            countries=countries,
            areas=frozenset(areas),
            anchors=tuple(anchors),
            label=" or ".join(labels) if labels else repr(key),
        )

    @property
    def known(self) -> bool:
        """True when the qualifier names a region or a place."""
        return bool(self.countries or self.areas or self.anchors)

    @property
    def is_region(self) -> bool:
        """True when it names a country or admin-1 area."""
        return bool(self.countries or self.areas)

    def km(self, place: Place) -> float | None:
        """Distance from a place to the nearest of the qualifier's named places (None: none)."""
        if not self.anchors:
            return None
        return min(km_between(place, a) for a in self.anchors)

    def in_region(self, place: Place) -> bool:
        """True when the place lies in a country or area the qualifier names."""
        if place.country in self.countries:
            return True
        if (place.country or "", place.admin1 or "") in self.areas:
            return True
        return place.admin1 is not None and ("*", normalise_name(place.admin1)) in self.areas

    def passes(self, place: Place) -> bool:
        """True when the qualifier keeps the place (see :mod:`api.places.qualifiers`)."""
        if self.is_region and place.source == "sample" and place.country is None:
            return True  # unknown is not a contradiction
        if self.in_region(place):
            return True
        km = self.km(place)
        return km is not None and km <= QUALIFIER_NEAR_KM


def excluded_by(qualifier: Qualifier, places: Iterable[Place], limit: int) -> tuple[Excluded, ...]:
    """Places a qualifier ruled out, nearest to its named places first, then largest.

    Args:
        qualifier: The qualifier that ruled them out.
        places: The ruled-out candidates.
        limit: How many to return.

    Returns:
        Up to ``limit`` places with their distance to the qualifier's nearest named place.
    """
    rows = [Excluded(p, qualifier.km(p)) for p in places]
    rows.sort(
        key=lambda e: (
            e.km is None,
            e.km if e.km is not None else 0.0,
            -(e.place.population or 0),
            e.place.name,
            e.place.id,
        )
    )
    seen: set[str] = set()
    out: list[Excluded] = []
    for e in rows:
        if e.place.id in seen:
            continue
        seen.add(e.place.id)
        out.append(e)
        if len(out) == limit:
            break
    return tuple(out)
