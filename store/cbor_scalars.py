"""CBOR heads and plain scalars written directly, byte for byte as cbor2 writes them.

:mod:`store.facts` encodes plain trees with cbor2's C encoder (:func:`store.facts.fast_cbor`);
a fact's few scalar fields are cheaper written here than walked and handed to it. What cbor2
writes in its default mode, and so what is written here:

* a head: the major type and the shortest argument (inline below 24, then 1, 2, 4 or 8 bytes);
* a text: its head (major 3, the UTF-8 length) and its UTF-8 bytes;
* an int within 64 bits: major 0 with the value, or major 1 with ``-1 - n`` for a negative one;
* a float: always the 9-byte float64 (``0xfb`` and the big-endian double), ``-0.0`` included;
* None, True, False: the simple values ``0xf6``, ``0xf5``, ``0xf4``.

Anything else (NaN and infinities, ints past 64 bits, bytes, containers, subclasses) is not
written here: :func:`scalar` returns None and the caller takes the general path.
"""

from __future__ import annotations

import struct
from typing import Any

__all__ = ["head", "scalar", "text", "text_cached"]

_HEAD_SMALL = [bytes([i]) for i in range(256)]
_U16 = struct.Struct(">H")
_U32 = struct.Struct(">I")
_U64 = struct.Struct(">Q")
_F64 = struct.Struct(">d")
_INT_MIN, _INT_MAX = -0x10000000000000000, 0xFFFFFFFFFFFFFFFF


def head(major: int, n: int) -> bytes:
    """The head of major type ``major`` with argument ``n`` (0 <= n < 2**64), shortest form."""
    m = major << 5
    if n < 24:
        return _HEAD_SMALL[m | n]
    if n < 0x100:
        return bytes((m | 24, n))
    if n < 0x10000:
        return _HEAD_SMALL[m | 25] + _U16.pack(n)
    if n < 0x100000000:
        return _HEAD_SMALL[m | 26] + _U32.pack(n)
    return _HEAD_SMALL[m | 27] + _U64.pack(n)


def text(s: str) -> bytes:
    """A text string (raises ``UnicodeEncodeError`` for text UTF-8 cannot carry, such as a
    lone surrogate, as cbor2 does)."""
    b = s.encode("utf-8")
    return head(3, len(b)) + b


_TEXTS: dict[str, bytes] = {}
_TEXTS_MAX = 4096


def text_cached(s: str) -> bytes:
    """:func:`text`, remembered for the strings that recur (bands, derivations, scene ids)."""
    got = _TEXTS.get(s)
    if got is None:
        got = text(s)
        if len(_TEXTS) >= _TEXTS_MAX:
            _TEXTS.clear()
        _TEXTS[s] = got
    return got


def scalar(x: Any) -> bytes | None:
    """A plain scalar of exact type ``float`` (finite), ``int`` (within 64 bits), ``str``,
    ``bool`` or None; None for anything else (see the module docstring)."""
    t = type(x)
    if t is float:
        if x - x != 0.0:  # NaN or infinity
            return None
        return b"\xfb" + _F64.pack(x)
    if t is int:
        if 0 <= x <= _INT_MAX:
            return head(0, x)
        if _INT_MIN <= x < 0:
            return head(1, -1 - x)
        return None
    if t is str:
        try:
            return text(x)
        except UnicodeEncodeError:
            return None
    if x is None:
        return b"\xf6"
    if t is bool:
        return b"\xf5" if x else b"\xf4"
    return None
