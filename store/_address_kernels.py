"""Fused numba loops behind the vectorised address functions.

numpy's elementwise form of :func:`store.address.encode_int_array` makes a
dozen N-sized temporaries and runs at a few million cells per second; these
loops make one pass over the input and run at memory speed. Compiled lazily on
first use (and cached on disk) so the scalar paths and the CLI never pay for it.
"""

from __future__ import annotations

import numba as nb
import numpy as np

LAT_MAX_Q = (1 << 21) - 1
LNG_MAX_Q = (1 << 22) - 1
HEADER = (1 << 60) | (21 << 52) | (0xAB << 44)
LAT_STEP = 180.0 / LAT_MAX_Q
LNG_STEP = 360.0 / LNG_MAX_Q


@nb.njit(cache=True, nogil=True)
def _round_half_away(x: float) -> int:
    r = np.floor(x)
    if x - r >= 0.5:
        r += 1.0
    return int(r)


@nb.njit(cache=True, nogil=True)
def first_invalid(lat, lng):  # type: ignore[no-untyped-def]
    """Index of the first out-of-range/NaN pair (-1 when all are valid)."""
    for i in range(lat.shape[0]):
        a = lat[i]
        b = lng[i]
        if not (a >= -90.0 and a <= 90.0 and b >= -180.0 and b <= 180.0):
            return i
    return -1


@nb.njit(cache=True, nogil=True)
def encode_raw(lat, lng, out):  # type: ignore[no-untyped-def]
    """Quantise and pack; inputs already validated."""
    header = np.uint64(HEADER)
    for i in range(lat.shape[0]):
        lat_q = _round_half_away((lat[i] + 90.0) / 180.0 * LAT_MAX_Q)
        lng_q = _round_half_away((lng[i] + 180.0) / 360.0 * LNG_MAX_Q)
        if lng_q == LNG_MAX_Q or lat_q == 0 or lat_q == LAT_MAX_Q:
            lng_q = 0
        out[i] = header | (np.uint64(lat_q) << np.uint64(22)) | np.uint64(lng_q)


@nb.njit(cache=True, nogil=True)
def decode_raw(raw, lat, lng):  # type: ignore[no-untyped-def]
    """Unpack to centres; returns the index of the first non-geo cell, or -1."""
    mask = np.uint64(0xFFFFF00000000000)
    header = np.uint64(HEADER)
    for i in range(raw.shape[0]):
        r = raw[i]
        if (r & mask) != header:
            return i
        lat_q = (r >> np.uint64(22)) & np.uint64(LAT_MAX_Q)
        lng_q = r & np.uint64(LNG_MAX_Q)
        lat[i] = float(lat_q) * LAT_STEP - 90.0
        lng[i] = float(lng_q) * LNG_STEP - 180.0
    return -1


@nb.njit(cache=True, nogil=True)
def format_raw(raw, table, lengths, out):  # type: ignore[no-untyped-def]
    """Write cell64 text as fixed-width ASCII rows (NUL padded) into ``out`` (N, 23)."""
    for i in range(raw.shape[0]):
        r = raw[i]
        pos = 0
        for lane in range(4):
            idx = (r >> np.uint64(48 - 16 * lane)) & np.uint64(0xFFFF)
            n = lengths[idx]
            for j in range(n):
                out[i, pos + j] = table[idx, j]
            pos += n
            if lane < 3:
                out[i, pos] = 46  # '.'
                pos += 1


@nb.njit(cache=True, nogil=True)
def parse_rows(rows, cons, vows, hexv, out):  # type: ignore[no-untyped-def]
    """Parse fixed-width ASCII cell64 rows (N, W) into integers.

    ``cons``/``vows``/``hexv`` map a byte to its consonant/vowel/hex-digit value
    (-1 when not one). Returns the index of the first malformed row, or -1. The
    header bits are checked by the caller.
    """
    width = rows.shape[1]
    for i in range(rows.shape[0]):
        raw = np.uint64(0)
        pos = 0
        for lane in range(4):
            start = pos
            while pos < width and rows[i, pos] != 46 and rows[i, pos] != 0:
                pos += 1
            n = pos - start
            value = -1
            if n == 4:
                c1 = cons[rows[i, start]]
                v1 = vows[rows[i, start + 1]]
                c2 = cons[rows[i, start + 2]]
                v2 = vows[rows[i, start + 3]]
                if c1 >= 0 and v1 >= 0 and c2 >= 0 and v2 >= 0:
                    value = c1 * 2100 + v1 * 210 + c2 * 10 + v2
            elif n == 5 and rows[i, start] == 122:  # 'z'
                value = 0
                for j in range(1, 5):
                    h = hexv[rows[i, start + j]]
                    if h < 0:
                        value = -1
                        break
                    value = value * 16 + h
                if value < 44100:
                    value = -1
            if value < 0:
                return i
            raw = (raw << np.uint64(16)) | np.uint64(value)
            if lane < 3:
                if pos >= width or rows[i, pos] != 46:
                    return i
                pos += 1
        if pos < width and rows[i, pos] != 0:
            return i
        out[i] = raw
    return -1
