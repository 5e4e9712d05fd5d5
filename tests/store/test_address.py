"""The address algebra: exact protocol values, strict errors and properties."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from store import address as a
from store.errors import InvalidCell, InvalidLatitude, InvalidLongitude

lats = st.floats(min_value=-90, max_value=90, allow_nan=False)
lngs = st.floats(min_value=-180, max_value=180, allow_nan=False)
inner_lats = st.floats(min_value=-89.9, max_value=89.9, allow_nan=False)


def test_protocol_example() -> None:
    assert a.encode(35.3606, 138.7274) == "defi.zb592.nemu.zEvE"
    raw = a.encode_int(35.3606, 138.7274)
    assert raw >> 44 == 0x115AB
    assert a.format_cell(raw) == "defi.zb592.nemu.zEvE"
    assert a.parse_cell("defi.zb592.nemu.zEvE") == raw


def test_alphabet_indexing() -> None:
    # index = c1*2100 + v1*210 + c2*10 + v2; above 44,099: 'z%04x'
    assert a.format_cell(a.HEADER | 0) == "defi.zb000.baba.baba"
    words, index = a._alphabet()
    assert words[0] == "baba"
    assert words[1] == "babe"
    assert words[10] == "baca"
    assert words[2100] == "caba"
    assert words[44099] == "zUzU"
    assert words[44100] == "zac44"
    assert len(index) == 65536


def test_poles_and_date_line_fold_lng_to_zero() -> None:
    assert a.decode(a.encode(90, 123.0)).lng_q == 0
    assert a.decode(a.encode(-90, -45.0)).lng_q == 0
    assert a.encode(0, 180) == a.encode(0, -180)


def test_round_half_away_not_half_even() -> None:
    # lat exactly on a half step rounds up (away from zero), unlike numpy's round
    lat = (10.5 / a.LAT_MAX_Q) * 180 - 90
    lat_q, _ = a.encode_q(lat, 0.0)
    x = (lat + 90) / 180 * a.LAT_MAX_Q
    assert lat_q == (11 if x - np.floor(x) >= 0.5 else 10)


@pytest.mark.parametrize(
    ("lat", "lng", "err", "needle"),
    [
        (90.0001, 0, InvalidLatitude, "90.0001"),
        (-91, 0, InvalidLatitude, "-91"),
        (float("nan"), 0, InvalidLatitude, "nan"),
        (0, float("inf"), InvalidLongitude, "inf"),
        (0, 180.5, InvalidLongitude, "180.5"),
        ("12", 0, InvalidLatitude, "12"),
    ],
)
def test_strict_encode_errors_name_the_value(lat, lng, err, needle) -> None:
    with pytest.raises(err) as info:
        a.encode(lat, lng)
    assert needle in str(info.value)


def test_lenient_encode_clamps_and_wraps() -> None:
    assert a.encode_lenient(95, 10) == a.encode(90, 10)
    assert a.encode_lenient(10, 190) == a.encode(10, -170)
    assert a.encode_lenient(10, -540) == a.encode(10, -180)
    with pytest.raises(InvalidLatitude):
        a.encode_lenient(float("nan"), 0)


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("defi.zb592.nemu", "4 lanes"),
        ("defi.zb592.nemu.zEvE.baba", "4 lanes"),
        ("defi.zb592.nemu.qqqq", "'qqqq'"),
        ("defi.zb592.nemu.zEvX", "'zEvX'"),
        ("baba.baba.baba.baba", "not a geo cell64"),  # header bits wrong
        ("", "4 lanes"),
        ("x" * 5000, "too long"),
    ],
)
def test_parse_errors(text, needle) -> None:
    with pytest.raises(InvalidCell) as info:
        a.parse_cell(text)
    assert needle in str(info.value)


def test_non_geo_resolution_rejected() -> None:
    raw = a.encode_int(10, 10)
    other_resolution = raw ^ (1 << 52)
    with pytest.raises(InvalidCell, match="header"):
        a.format_cell(other_resolution)
    with pytest.raises(InvalidCell):
        a.decode_array(np.array([raw, other_resolution], dtype=np.uint64))


@given(lats, lngs)
def test_round_trip_within_half_a_cell(lat: float, lng: float) -> None:
    g = a.decode(a.encode(lat, lng))
    assert abs(g.lat - lat) <= a.LAT_STEP / 2 + 1e-9
    if g.lat_q not in (0, a.LAT_MAX_Q):
        dl = abs(g.lng - lng)
        dl = min(dl, 360 - dl)
        assert dl <= a.LNG_STEP / 2 + 1e-9
    min_lat, min_lng, max_lat, max_lng = g.bounds
    assert min_lat <= g.lat <= max_lat
    assert min_lng < g.lng < max_lng


@given(lats, lngs)
def test_text_round_trip_and_reencode_centre(lat: float, lng: float) -> None:
    raw = a.encode_int(lat, lng)
    text = a.format_cell(raw)
    assert a.parse_cell(text) == raw
    g = a.decode(text)
    assert a.encode_int(g.lat, g.lng) == raw


@settings(max_examples=50)
@given(st.lists(st.tuples(lats, lngs), min_size=1, max_size=50))
def test_vectorised_equals_scalar(points) -> None:
    la = np.array([p[0] for p in points])
    ln = np.array([p[1] for p in points])
    raw = a.encode_int_array(la, ln)
    assert [int(r) for r in raw] == [a.encode_int(x, y) for x, y in points]
    assert list(a.format_cells(raw)) == [a.format_cell(int(r)) for r in raw]
    assert [int(r) for r in a.parse_cells(a.format_cells(raw))] == [int(r) for r in raw]
    dla, dln = a.decode_array(raw)
    for r, x, y in zip(raw, dla, dln, strict=True):
        g = a.decode(int(r))
        assert (g.lat, g.lng) == (x, y)


def test_vectorised_errors_name_first_bad_value() -> None:
    with pytest.raises(InvalidLatitude, match="95"):
        a.encode_int_array(np.array([1.0, 95.0]), np.array([1.0, 1.0]))
    with pytest.raises(InvalidLongitude, match="nan"):
        a.encode_int_array(np.array([1.0, 2.0]), np.array([1.0, np.nan]))


@given(inner_lats, lngs)
def test_neighbours_are_adjacent_and_ordered(lat: float, lng: float) -> None:
    cell = a.encode(lat, lng)
    ring = a.neighbours(cell)
    assert len(ring) == 9
    assert ring[4] == cell
    c = a.decode(cell)
    for name, n in zip(a.NEIGHBOUR_ORDER, ring, strict=True):
        g = a.decode(n)
        d_lat = g.lat_q - c.lat_q
        d_lng = (g.lng_q - c.lng_q + a.LNG_MAX_Q // 2) % a.LNG_MAX_Q - a.LNG_MAX_Q // 2
        want_lat = 1 if "N" in name else -1 if "S" in name else 0
        want_lng = 1 if "E" in name else -1 if "W" in name else 0
        assert (d_lat, d_lng) == (want_lat, want_lng)
        # equals moving one cell extent and re-encoding leniently
        assert n == a.encode_lenient(c.lat + want_lat * a.LAT_STEP, c.lng + want_lng * a.LNG_STEP)


def test_neighbours_at_date_line_and_pole() -> None:
    west_edge = a.encode(0.0, -180.0)
    ring = a.neighbours(west_edge)
    assert a.decode(ring[3]).lng_q == a.LNG_MAX_Q - 1  # W wraps to the east edge
    north_pole = a.encode(90.0, 0.0)
    assert a.neighbours(north_pole)[1] == north_pole


def test_bbox_q_range_rejects_reversed() -> None:
    with pytest.raises(InvalidLatitude):
        a.bbox_q_range(10, 0, 5, 1)
    with pytest.raises(InvalidLongitude, match="date line"):
        a.bbox_q_range(0, 170, 1, -170)


def test_parse_cells_vectorised_errors_and_forms() -> None:
    raw = a.encode_int_array(np.array([1.0, -33.5, 89.0]), np.array([2.0, -70.1, 179.9]))
    texts = a.format_cells(raw)
    assert np.array_equal(a.parse_cells(texts), raw)
    assert np.array_equal(a.parse_cells(a.format_cells_bytes(raw)), raw)
    assert np.array_equal(a.parse_cells(list(texts)), raw)
    for bad, needle in [
        ("defi.zb592.nemu", "4 lanes"),
        ("defi.zb592.nemu.zEvEx", "zEvEx"),
        ("defi.zb592.nemu.zac43", "zac43"),  # hex token below 44,100 is not in the alphabet
        ("baba.baba.baba.baba", "geo"),
        ("defi.zb592.nemu.zévé", "non-ASCII"),
    ]:
        with pytest.raises(InvalidCell, match=needle):
            a.parse_cells([str(texts[0]), bad])


_EDGES = [-90.0, 90.0, -180.0, 180.0, 0.0, -0.0, 5e-324, -5e-324]
_HALF_LAT = [(q + 0.5) * 180.0 / a.LAT_MAX_Q - 90.0 for q in (0, 1, 12345, a.LAT_MAX_Q - 1)]


@settings(max_examples=500)
@given(
    st.one_of(st.floats(-90.0, 90.0), st.sampled_from(_EDGES[:2] + _EDGES[4:] + _HALF_LAT)),
    st.one_of(st.floats(-180.0, 180.0), st.sampled_from(_EDGES[2:])),
)
def test_one_point_quantises_as_the_array_path(lat: float, lng: float) -> None:
    """encode_q (Python floats) and encode_q_array (numpy) name the same cell."""
    lat_q, lng_q = a.encode_q_array(np.array([lat]), np.array([lng]))
    assert a.encode_q(lat, lng) == (int(lat_q[0]), int(lng_q[0]))
