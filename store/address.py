"""The address algebra: cell64 cells and their neighbours.

Pure functions, no I/O. ``cell64`` is the 64-bit cell of the public
Earth-memory protocol (about 9.55 m at the equator), bit for bit::

    lat_q = round_half_away((lat + 90) / 180 * (2**21 - 1))
    lng_q = round_half_away((lng + 180) / 360 * (2**22 - 1))
    lng_q = 0 when it equals 2**22 - 1, or when lat_q is 0 or 2**21 - 1 (poles)
    raw   = 1 << 60 | 21 << 52 | 0xab << 44 | lat_q << 22 | lng_q

Text form: four 16-bit lanes (high first) joined by ``.``; each lane indexes a
65,536-entry alphabet (consonant-vowel-consonant-vowel words for 0..44,099,
``'z%04x'`` above).

The cube grid *is* this lattice: row = ``lat_q`` (increasing northward),
column = ``lng_q``; :mod:`store.blocks` groups it into blocks.

Scalar functions validate strictly and raise :mod:`store.errors` types; the
``*_array`` forms are vectorised over numpy arrays (millions of points at once).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import numpy as np
import numpy.typing as npt

from store.errors import InvalidCell, InvalidLatitude, InvalidLongitude

__all__ = [
    "CELL64_PATTERN",
    "HEADER",
    "LAT_MAX_Q",
    "LAT_STEP",
    "LNG_MAX_Q",
    "LNG_STEP",
    "NEIGHBOUR_ORDER",
    "CellGeometry",
    "bbox_q_range",
    "check_lat",
    "check_lng",
    "decode",
    "decode_array",
    "encode",
    "encode_int",
    "encode_int_array",
    "encode_lenient",
    "encode_q",
    "encode_q_array",
    "format_cell",
    "format_cells",
    "format_cells_bytes",
    "neighbours",
    "parse_cell",
    "parse_cells",
    "q_center",
    "q_to_raw",
    "q_to_raw_array",
    "raw_to_q",
    "raw_to_q_array",
    "warm_alphabet",
]

LAT_BITS = 21
LNG_BITS = 22
LAT_MAX_Q = (1 << LAT_BITS) - 1
"""Largest ``lat_q`` (the north pole row); ``lat_q`` spans ``0..LAT_MAX_Q``."""
LNG_MAX_Q = (1 << LNG_BITS) - 1
"""``lng_q`` is taken modulo this value: ``LNG_MAX_Q`` itself folds to 0 (the date line)."""
LAT_STEP = 180.0 / LAT_MAX_Q
"""Cell height in degrees of latitude."""
LNG_STEP = 360.0 / LNG_MAX_Q
"""Cell width in degrees of longitude."""

HEADER = (1 << 60) | (21 << 52) | (0xAB << 44)
"""Mode, resolution and marker bits shared by every geo cell."""
_HEADER_MASK = ~((1 << 44) - 1) & 0xFFFF_FFFF_FFFF_FFFF
_LAT_SHIFT = LNG_BITS
_LNG_MASK = (1 << LNG_BITS) - 1

NEIGHBOUR_ORDER = ("NW", "N", "NE", "W", "C", "E", "SW", "S", "SE")
"""Order of :func:`neighbours`: rows north to south, columns west to east."""

_CONSONANTS = "bcdfghjklmnpqrstvwxyz"
_VOWELS = "aeiouAEIOU"
_CVCV_COUNT = len(_CONSONANTS) * len(_VOWELS) * len(_CONSONANTS) * len(_VOWELS)  # 44,100

_LANE = "(?:[b-df-hj-np-tv-z][aeiouAEIOU][b-df-hj-np-tv-z][aeiouAEIOU]|z[0-9a-f]{4})"
CELL64_PATTERN = rf"^{_LANE}\.{_LANE}\.{_LANE}\.{_LANE}$"
"""Regular expression every cell64 text matches (four lane tokens; published in the API schemas).

Necessary, not sufficient: :func:`parse_cell` also rejects lanes that decode to
no geo cell (header bits, lattice range, non-canonical folds).
"""


# --------------------------------------------------------------------------- alphabet


@lru_cache(maxsize=1)
def _alphabet() -> tuple[tuple[str, ...], dict[str, int]]:
    words: list[str] = []
    for c1 in _CONSONANTS:
        for v1 in _VOWELS:
            for c2 in _CONSONANTS:
                for v2 in _VOWELS:
                    words.append(c1 + v1 + c2 + v2)
    words.extend(f"z{i:04x}" for i in range(_CVCV_COUNT, 1 << 16))
    return tuple(words), {w: i for i, w in enumerate(words)}


def warm_alphabet() -> None:
    """Build the 65,536-word alphabet of cell names now (~40 ms, once a process) instead of in
    the first request that names a cell: servers call it in their start-up warm-up."""
    _alphabet()


# --------------------------------------------------------------------------- value types


@dataclass(frozen=True, slots=True)
class CellGeometry:
    """A decoded cell: its name, lattice position, centre and bounds."""

    cell: str
    """cell64 text form."""
    raw: int
    """cell64 as an unsigned 64-bit integer."""
    lat_q: int
    """Lattice row (0 = south pole, ``LAT_MAX_Q`` = north pole)."""
    lng_q: int
    """Lattice column (0 = 180 W)."""
    lat: float
    """Centre latitude in degrees."""
    lng: float
    """Centre longitude in degrees."""
    bounds: tuple[float, float, float, float]
    """``(min_lat, min_lng, max_lat, max_lng)``: half a step either side of the centre."""

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        min_lat, min_lng, max_lat, max_lng = self.bounds
        return {
            "cell64": self.cell,
            "raw": self.raw,
            "lat_q": self.lat_q,
            "lng_q": self.lng_q,
            "center": {"lat": self.lat, "lng": self.lng},
            "bounds": {
                "min_lat": min_lat,
                "min_lng": min_lng,
                "max_lat": max_lat,
                "max_lng": max_lng,
            },
        }


# --------------------------------------------------------------------------- quantisation


def _round_half_away(x: npt.NDArray[np.float64]) -> npt.NDArray[np.int64]:
    """Round non-negative values half away from zero, exactly (no ``x + 0.5`` error)."""
    r = np.floor(x)
    r += (x - r) >= 0.5
    return r.astype(np.int64)


def check_lat(lat: float) -> float:
    """A latitude as a float, checked: a finite number (not a bool) in [-90, 90].

    Raises:
        InvalidLatitude: not a number, not finite, or outside [-90, 90].
    """
    if isinstance(lat, bool) or not isinstance(lat, (int, float, np.floating, np.integer)):
        raise InvalidLatitude(f"latitude must be a number, got {lat!r}")
    value = float(lat)
    if not math.isfinite(value):
        raise InvalidLatitude(f"latitude must be finite, got {lat!r}")
    if not -90.0 <= value <= 90.0:
        raise InvalidLatitude(f"latitude {lat!r} outside [-90, 90]")
    return value


def check_lng(lng: float) -> float:
    """A longitude as a float, checked: a finite number (not a bool) in [-180, 180].

    Raises:
        InvalidLongitude: not a number, not finite, or outside [-180, 180].
    """
    if isinstance(lng, bool) or not isinstance(lng, (int, float, np.floating, np.integer)):
        raise InvalidLongitude(f"longitude must be a number, got {lng!r}")
    value = float(lng)
    if not math.isfinite(value):
        raise InvalidLongitude(f"longitude must be finite, got {lng!r}")
    if not -180.0 <= value <= 180.0:
        raise InvalidLongitude(f"longitude {lng!r} outside [-180, 180]")
    return value


def _quantise(
    lat: npt.NDArray[np.float64], lng: npt.NDArray[np.float64]
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    lat_q = _round_half_away((lat + 90.0) / 180.0 * LAT_MAX_Q)
    lng_q = _round_half_away((lng + 180.0) / 360.0 * LNG_MAX_Q)
    fold = (lng_q == LNG_MAX_Q) | (lat_q == 0) | (lat_q == LAT_MAX_Q)
    lng_q[fold] = 0
    return lat_q, lng_q


def encode_q_array(
    lat: npt.ArrayLike, lng: npt.ArrayLike
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    """Vectorised strict quantisation of lat/lng arrays to ``(lat_q, lng_q)``.

    Raises:
        InvalidLatitude / InvalidLongitude: naming the first bad value.
    """
    la = np.asarray(lat, dtype=np.float64)
    ln = np.asarray(lng, dtype=np.float64)
    bad = ~((la >= -90.0) & (la <= 90.0))  # also catches NaN
    if bad.any():
        raise InvalidLatitude(f"latitude {la[bad].flat[0]!r} outside [-90, 90] or not finite")
    bad = ~((ln >= -180.0) & (ln <= 180.0))
    if bad.any():
        raise InvalidLongitude(f"longitude {ln[bad].flat[0]!r} outside [-180, 180] or not finite")
    la, ln = np.broadcast_arrays(la, ln)
    return _quantise(la, ln)


def encode_q(lat: float, lng: float) -> tuple[int, int]:
    """Strictly quantise one point to ``(lat_q, lng_q)``.

    :func:`_quantise` on Python floats: the same IEEE operations in the same order, so
    the same cells as :func:`encode_q_array`, without numpy's per-call cost on one value.
    """
    x = (check_lat(lat) + 90.0) / 180.0 * LAT_MAX_Q
    r = math.floor(x)
    lat_q = r + ((x - r) >= 0.5)
    x = (check_lng(lng) + 180.0) / 360.0 * LNG_MAX_Q
    r = math.floor(x)
    lng_q = r + ((x - r) >= 0.5)
    if lng_q == LNG_MAX_Q or lat_q == 0 or lat_q == LAT_MAX_Q:
        lng_q = 0
    return int(lat_q), int(lng_q)


def q_to_raw(lat_q: int, lng_q: int) -> int:
    """Pack a lattice position into the 64-bit cell integer."""
    if not 0 <= lat_q <= LAT_MAX_Q:
        raise InvalidCell(f"lat_q {lat_q} outside 0..{LAT_MAX_Q}")
    if not 0 <= lng_q < LNG_MAX_Q:
        raise InvalidCell(f"lng_q {lng_q} outside 0..{LNG_MAX_Q - 1}")
    if lat_q in (0, LAT_MAX_Q) and lng_q != 0:
        raise InvalidCell(f"pole row lat_q={lat_q} must have lng_q=0, got {lng_q}")
    return HEADER | (lat_q << _LAT_SHIFT) | lng_q


def q_to_raw_array(lat_q: npt.ArrayLike, lng_q: npt.ArrayLike) -> npt.NDArray[np.uint64]:
    """Vectorised :func:`q_to_raw` (no validation: inputs come from the quantiser)."""
    la = np.asarray(lat_q).astype(np.uint64)
    ln = np.asarray(lng_q).astype(np.uint64)
    return np.uint64(HEADER) | (la << np.uint64(_LAT_SHIFT)) | ln


def raw_to_q(raw: int) -> tuple[int, int]:
    """Unpack a 64-bit cell integer, checking its header bits.

    Raises:
        InvalidCell: not a geo cell64 (mode/resolution/marker bits differ) or non-canonical.
    """
    if isinstance(raw, bool) or not isinstance(raw, (int, np.integer)):
        raise InvalidCell(f"cell integer must be an int, got {raw!r}")
    raw = int(raw)
    if not 0 <= raw < (1 << 64):
        raise InvalidCell(f"cell integer {raw} is not a 64-bit unsigned value")
    if raw & _HEADER_MASK != HEADER:
        raise InvalidCell(
            f"cell {raw:#018x} is not a geo cell64: header bits {raw >> 44:#x}, expected {HEADER >> 44:#x}"
        )
    lat_q = (raw >> _LAT_SHIFT) & LAT_MAX_Q
    lng_q = raw & _LNG_MASK
    if lng_q == LNG_MAX_Q:
        raise InvalidCell(f"cell {raw:#018x} is non-canonical: lng_q {LNG_MAX_Q} folds to 0")
    if lat_q in (0, LAT_MAX_Q) and lng_q != 0:
        raise InvalidCell(f"cell {raw:#018x} is non-canonical: pole row with lng_q={lng_q}")
    return lat_q, lng_q


def raw_to_q_array(
    raw: npt.ArrayLike,
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    """Vectorised unpack (header checked for every element)."""
    r = np.asarray(raw, dtype=np.uint64)
    bad = (r & np.uint64(_HEADER_MASK)) != np.uint64(HEADER)
    if bad.any():
        raise InvalidCell(f"cell {int(r[bad].flat[0]):#018x} is not a geo cell64")
    lat_q = ((r >> np.uint64(_LAT_SHIFT)) & np.uint64(LAT_MAX_Q)).astype(np.int64)
    lng_q = (r & np.uint64(_LNG_MASK)).astype(np.int64)
    return lat_q, lng_q


# --------------------------------------------------------------------------- text form


def format_cell(raw: int) -> str:
    """Text form of a cell integer (validated)."""
    raw_to_q(raw)
    words = _alphabet()[0]
    return ".".join(words[(raw >> s) & 0xFFFF] for s in (48, 32, 16, 0))


@lru_cache(maxsize=1)
def _alphabet_bytes() -> tuple[npt.NDArray[np.uint8], npt.NDArray[np.int64]]:
    words = _alphabet()[0]
    table = np.zeros((len(words), 5), dtype=np.uint8)
    lengths = np.zeros(len(words), dtype=np.int64)
    for i, w in enumerate(words):
        b = w.encode("ascii")
        table[i, : len(b)] = np.frombuffer(b, dtype=np.uint8)
        lengths[i] = len(b)
    return table, lengths


def format_cells_bytes(raw: npt.ArrayLike) -> npt.NDArray[np.bytes_]:
    """Vectorised text form as fixed-width ASCII (``S23``); the fastest text path."""
    from store import _address_kernels as k

    r = np.ascontiguousarray(np.asarray(raw, dtype=np.uint64))
    flat = r.ravel()
    table, lengths = _alphabet_bytes()
    out = np.zeros((flat.shape[0], 23), dtype=np.uint8)
    k.format_raw(flat, table, lengths, out)
    return out.view("S23").reshape(r.shape)


def format_cells(raw: npt.ArrayLike) -> npt.NDArray[np.str_]:
    """Vectorised text form (array of ``<U23`` strings)."""
    return format_cells_bytes(raw).astype("<U23")


def parse_cell(text: str) -> int:
    """Parse cell64 text into its integer, strictly.

    Raises:
        InvalidCell: wrong lane count, unknown lane token, or a non-geo / non-canonical cell.
    """
    if not isinstance(text, str):
        raise InvalidCell(f"cell64 must be a string, got {type(text).__name__}")
    if len(text) > 32:
        raise InvalidCell(f"cell64 text too long ({len(text)} chars): {text[:32]!r}...")
    lanes = text.strip().split(".")
    if len(lanes) != 4:
        raise InvalidCell(f"cell64 {text!r} must have 4 lanes separated by '.', got {len(lanes)}")
    index = _alphabet()[1]
    raw = 0
    for lane in lanes:
        value = index.get(lane)
        if value is None:
            raise InvalidCell(f"cell64 {text!r}: unknown lane token {lane!r}")
        raw = (raw << 16) | value
    raw_to_q(raw)
    return raw


@lru_cache(maxsize=1)
def _parse_tables() -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    cons = np.full(256, -1, dtype=np.int64)
    vows = np.full(256, -1, dtype=np.int64)
    hexv = np.full(256, -1, dtype=np.int64)
    for i, ch in enumerate(_CONSONANTS):
        cons[ord(ch)] = i
    for i, ch in enumerate(_VOWELS):
        vows[ord(ch)] = i
    for i, ch in enumerate("0123456789abcdef"):
        hexv[ord(ch)] = i
    return cons, vows, hexv


def parse_cells(texts: Iterable[str] | npt.NDArray[Any]) -> npt.NDArray[np.uint64]:
    """Parse many cell64 strings (strict) into a uint64 array (one fused pass).

    Accepts a sequence of ``str``, or a numpy ``U``/``S`` array.

    Raises:
        InvalidCell: naming the first malformed entry.
    """
    from store import _address_kernels as k

    arr = np.asarray(texts if isinstance(texts, np.ndarray) else list(texts))
    if arr.size == 0:
        return np.empty(0, dtype=np.uint64)
    if arr.dtype.kind == "U":
        if arr.dtype.itemsize // 4 > 32:
            raise InvalidCell("cell64 text too long (more than 32 chars)")
        try:
            arr = np.char.encode(arr, "ascii")
        except UnicodeEncodeError:
            bad = next(t for t in arr.ravel() if not str(t).isascii())
            raise InvalidCell(f"cell64 {str(bad)[:32]!r}: non-ASCII character") from None
    if arr.dtype.kind != "S":
        raise InvalidCell(f"cell64 texts must be strings, got dtype {arr.dtype}")
    flat = np.ascontiguousarray(arr.ravel())
    width = flat.dtype.itemsize
    rows = flat.view(np.uint8).reshape(flat.shape[0], width)
    out = np.empty(flat.shape[0], dtype=np.uint64)
    cons, vows, hexv = _parse_tables()
    bad = int(k.parse_rows(rows, cons, vows, hexv, out))
    if bad >= 0:
        parse_cell(flat[bad].decode("ascii", "replace"))  # raises with the precise reason
        raise InvalidCell(f"malformed cell64 {flat[bad]!r}")  # pragma: no cover
    lat_q, lng_q = raw_to_q_array(out)
    noncanon = (lng_q == LNG_MAX_Q) | (((lat_q == 0) | (lat_q == LAT_MAX_Q)) & (lng_q != 0))
    if noncanon.any():
        raw_to_q(int(out[noncanon][0]))
    return out.reshape(arr.shape)


def _to_raw(cell: str | int) -> int:
    if isinstance(cell, str):
        return parse_cell(cell)
    raw_to_q(cell)
    return int(cell)


# --------------------------------------------------------------------------- encode / decode


def encode_int(lat: float, lng: float) -> int:
    """Strict encode to the 64-bit cell integer."""
    return q_to_raw(*encode_q(lat, lng))


def encode(lat: float, lng: float) -> str:
    """Strict encode to cell64 text.

    Example:
        >>> encode(35.3606, 138.7274)
        'defi.zb592.nemu.zEvE'

    Raises:
        InvalidLatitude: outside [-90, 90] or not finite.
        InvalidLongitude: outside [-180, 180] or not finite.
    """
    return format_cell(encode_int(lat, lng))


def encode_int_array(lat: npt.ArrayLike, lng: npt.ArrayLike) -> npt.NDArray[np.uint64]:
    """Vectorised strict encode to 64-bit cell integers (one fused pass, memory speed).

    Raises:
        InvalidLatitude / InvalidLongitude: naming the first bad value.
    """
    from store import _address_kernels as k

    la, ln = np.broadcast_arrays(
        np.asarray(lat, dtype=np.float64), np.asarray(lng, dtype=np.float64)
    )
    shape = la.shape
    la = np.ascontiguousarray(la).ravel()
    ln = np.ascontiguousarray(ln).ravel()
    bad = int(k.first_invalid(la, ln))
    if bad >= 0:
        if not -90.0 <= la[bad] <= 90.0:
            raise InvalidLatitude(f"latitude {la[bad]!r} outside [-90, 90] or not finite")
        raise InvalidLongitude(f"longitude {ln[bad]!r} outside [-180, 180] or not finite")
    out = np.empty(la.shape[0], dtype=np.uint64)
    k.encode_raw(la, ln, out)
    return out.reshape(shape)


def encode_lenient(lat: float, lng: float) -> str:
    """Lenient encode, as the protocol does: clamp latitude, wrap longitude.

    Non-finite input is still rejected: there is nothing sensible to clamp it to.
    """
    la, ln = float(lat), float(lng)
    if not math.isfinite(la):
        raise InvalidLatitude(f"latitude must be finite, got {lat!r}")
    if not math.isfinite(ln):
        raise InvalidLongitude(f"longitude must be finite, got {lng!r}")
    la = min(90.0, max(-90.0, la))
    if not -180.0 <= ln <= 180.0:
        ln = ((ln + 180.0) % 360.0) - 180.0
    return encode(la, ln)


def q_center(lat_q: Any, lng_q: Any) -> tuple[Any, Any]:
    """Centre lat/lng of lattice positions (scalars or arrays)."""
    if np.ndim(lat_q) == 0 and np.ndim(lng_q) == 0:
        return float(lat_q) * LAT_STEP - 90.0, float(lng_q) * LNG_STEP - 180.0
    la = np.asarray(lat_q, dtype=np.float64) * LAT_STEP - 90.0
    ln = np.asarray(lng_q, dtype=np.float64) * LNG_STEP - 180.0
    return la, ln


def decode(cell: str | int) -> CellGeometry:
    """Decode cell64 text or integer into centre and bounds.

    Raises:
        InvalidCell: malformed or non-geo cell.
    """
    raw = _to_raw(cell)
    lat_q, lng_q = raw_to_q(raw)
    lat, lng = q_center(lat_q, lng_q)
    bounds = (
        max(-90.0, lat - LAT_STEP / 2),
        lng - LNG_STEP / 2,
        min(90.0, lat + LAT_STEP / 2),
        lng + LNG_STEP / 2,
    )
    return CellGeometry(format_cell(raw), raw, lat_q, lng_q, lat, lng, bounds)


def decode_array(
    raw: npt.ArrayLike,
) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]:
    """Vectorised decode of cell integers to centre ``(lat, lng)`` arrays (one fused pass).

    Raises:
        InvalidCell: naming the first non-geo cell.
    """
    from store import _address_kernels as k

    r = np.ascontiguousarray(np.asarray(raw, dtype=np.uint64))
    flat = r.ravel()
    la = np.empty(flat.shape[0], dtype=np.float64)
    ln = np.empty(flat.shape[0], dtype=np.float64)
    bad = int(k.decode_raw(flat, la, ln))
    if bad >= 0:
        raise InvalidCell(f"cell {int(flat[bad]):#018x} is not a geo cell64")
    return la.reshape(r.shape), ln.reshape(r.shape)


def neighbours(cell: str | int) -> list[str]:
    """The 3x3 neighbourhood in the order NW, N, NE, W, centre, E, SW, S, SE.

    Equivalent to moving one cell extent from the centre in each direction and
    re-encoding leniently: latitude clamps at the poles (so a pole cell's
    northern/southern neighbours are itself), longitude wraps at the date line.
    """
    raw = _to_raw(cell)
    lat_q, lng_q = raw_to_q(raw)
    out: list[str] = []
    for d_lat in (1, 0, -1):
        for d_lng in (-1, 0, 1):
            nlat = min(LAT_MAX_Q, max(0, lat_q + d_lat))
            nlng = (lng_q + d_lng) % LNG_MAX_Q
            if nlat in (0, LAT_MAX_Q):
                nlng = 0
            out.append(format_cell(q_to_raw(nlat, nlng)))
    return out


# --------------------------------------------------------------------------- bbox


def bbox_q_range(
    min_lat: float, min_lng: float, max_lat: float, max_lng: float
) -> tuple[int, int, int, int]:
    """Half-open lattice ranges of the cells whose centres lie inside a bbox.

    Raises:
        InvalidLatitude / InvalidLongitude: bad or reversed bounds (bboxes crossing
        the date line must be split by the caller).
    """
    for v in (min_lat, max_lat):
        check_lat(v)
    for v in (min_lng, max_lng):
        check_lng(v)
    if min_lat > max_lat:
        raise InvalidLatitude(f"bbox min_lat {min_lat} > max_lat {max_lat}")
    if min_lng > max_lng:
        raise InvalidLongitude(
            f"bbox min_lng {min_lng} > max_lng {max_lng} (split bboxes crossing the date line)"
        )
    lat_q0 = math.ceil((min_lat + 90.0) / LAT_STEP)
    lat_q1 = math.floor((max_lat + 90.0) / LAT_STEP) + 1
    lng_q0 = math.ceil((min_lng + 180.0) / LNG_STEP)
    lng_q1 = min(math.floor((max_lng + 180.0) / LNG_STEP) + 1, LNG_MAX_Q)
    return lat_q0, max(lat_q0, lat_q1), lng_q0, max(lng_q0, lng_q1)
