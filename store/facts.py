"""Canonical form of hashed values, and fact ids.

Pure (no I/O, no clocks) and independent of the API, so the pipeline can
compute and re-check fact ids itself; :mod:`api.receipts` builds its query and
answer digests on the same encoding.

Canonical encoding (used by fact ids, query digests and answer digests)
-----------------------------------------------------------------------
Values are first *normalised* into a JSON-shaped tree, then encoded as
canonical CBOR (``cbor2.dumps(canonical=True)``: definite lengths, map keys
sorted length-first then bytewise), except that every float is forced to a
9-byte float64 (canonical CBOR would otherwise shrink ``1.5`` to a float16).
Normalisation:

* ``None``, ``bool`` and ``str`` are kept; ``bytes`` stay a CBOR byte string.
* Integers stay CBOR integers and floats are always float64 (numpy float32
  values are widened exactly); ``1`` and ``1.0`` are different values, as
  they are in a JSON document written by Python. NaN and ±inf are refused.
* Lists, tuples and numpy arrays become arrays; mappings become maps with
  string keys.
* Query arguments only: ``None`` values are dropped from mappings, so an
  omitted optional argument and an explicit ``null`` digest alike. Answers
  keep their nulls (removing one is a change).

Because the normalised tree is what JSON can carry, a document that went
through ``json.dumps``/``json.loads`` digests to the same bytes.

Two encoders give the same bytes and the same errors: the reference
:func:`canonical_cbor_reference` (normalise, then ``cbor2``) and the one-pass
:func:`fast_cbor` for plain values (key order in Python, bytes by cbor2's C encoder in
its default mode, which writes every float as float64); :func:`canonical_cbor` tries the second
and falls back to the first.

Fact id
-------
``"f2:" + hex + ":" + cell + ":" + band + ":" + tslot`` where ``hex`` is
``blake3(cbor({cell, band, tslot, value, sources, derivation})).hex()``,
``sources`` sorted and de-duplicated. The digest is the content id; the address
after it (cell, band, tslot: what the digest already covers) lets any process
resolve the id by re-reading that one value (:func:`parse_fact_id`), with no
index of served answers. No clocks and no snapshot go in, so two replicas
holding the same fact agree, and the same fact in two snapshots has one id.
The earlier layout ``"f1:" + hex`` (the same digest, no address) is still
recognised: :func:`same_fact` compares the digests, so an ``f1`` id and the
``f2`` id of the same fact name the same fact.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Mapping, Sequence
from typing import Any

import blake3
import cbor2

from store.cbor_scalars import head as _head
from store.cbor_scalars import scalar as _scalar
from store.cbor_scalars import text as _text_once
from store.cbor_scalars import text_cached as _text
from store.errors import CanonicalFormError, InvalidFact, NonFiniteNumber
from store.fact_address import (
    FACT_ID_PREFIX,
    LEGACY_FACT_ID_PREFIX,
    FactAddress,
    content_digest,
    parse_fact_id,
    same_fact,
)
from store.memo import BoundedMemo

__all__ = [
    "FACT_ID_PREFIX",
    "LEGACY_FACT_ID_PREFIX",
    "FactAddress",
    "canonical_cbor",
    "canonical_cbor_reference",
    "content_digest",
    "digest",
    "fact_id",
    "fact_ids",
    "fact_record",
    "fast_cbor",
    "normalise",
    "parse_fact_id",
    "same_fact",
]

_F64 = struct.Struct(">d")


# --------------------------------------------------------------------------- normalise and the reference encoder


class _Float64:
    """Marker so the CBOR encoder writes a float as 9-byte float64."""

    __slots__ = ("value",)

    def __init__(self, value: float) -> None:
        self.value = value


def _encode_marker(encoder: Any, value: Any) -> None:
    if isinstance(value, _Float64):
        encoder.write(b"\xfb" + _F64.pack(value.value))
        return
    raise TypeError(f"cannot encode {type(value).__name__}")


def _number(x: float) -> float:
    if not math.isfinite(x):
        raise NonFiniteNumber(f"non-finite number {x!r} cannot be hashed")
    return float(x)


def normalise(value: Any, *, drop_none: bool = False) -> Any:
    """Normalise a value into the JSON-shaped tree that is hashed.

    Args:
        value: None, bool, int, float, str, bytes, a sequence, a mapping with
            string keys, or a numpy scalar/array (anything with ``tolist``).
        drop_none: Drop ``None`` values from mappings (query arguments).

    Returns:
        A tree of None/bool/int/float/str/bytes/list/dict with the rules in the
        module docstring applied.

    Raises:
        NonFiniteNumber: NaN or infinity.
        CanonicalFormError: Non-string mapping keys, or an unsupported type.
    """
    if value is None or isinstance(value, bool | str | bytes):
        return value
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return _number(value)
    if isinstance(value, Mapping):
        out: dict[str, Any] = {}
        for k, v in value.items():
            if not isinstance(k, str):
                raise CanonicalFormError(f"mapping keys must be strings, got {type(k).__name__}")
            if v is not None or not drop_none:
                out[k] = normalise(v, drop_none=drop_none)
        return out
    if isinstance(value, list | tuple):
        return [normalise(v, drop_none=drop_none) for v in value]
    tolist = getattr(value, "tolist", None)
    if callable(tolist):  # numpy scalar or array
        return normalise(tolist(), drop_none=drop_none)
    raise CanonicalFormError(f"cannot hash a value of type {type(value).__name__}")


def _mark_floats(tree: Any) -> Any:
    if isinstance(tree, float):
        return _Float64(tree)
    if isinstance(tree, dict):
        return {k: _mark_floats(v) for k, v in tree.items()}
    if isinstance(tree, list):
        return [_mark_floats(v) for v in tree]
    return tree


def canonical_cbor_reference(value: Any) -> bytes:
    """Canonical CBOR by the reference path: :func:`normalise`, then ``cbor2`` (canonical).

    :func:`canonical_cbor` gives the same bytes (faster for plain values); this
    one is the definition the fast encoder is checked against.

    Args:
        value: Anything :func:`normalise` accepts.

    Returns:
        The encoded bytes.

    Raises:
        CanonicalFormError: As :func:`normalise`.
    """
    return cbor2.dumps(_mark_floats(normalise(value)), canonical=True, default=_encode_marker)


# --------------------------------------------------------------------------- the one-pass encoder

# One pass checks plain values (exact types dict, list, tuple, str, int within 64 bits,
# finite float, bool, None, bytes) and re-makes their maps in canonical key order; then
# cbor2's C encoder in its default mode writes them: definite lengths, maps in the order
# given, every float as float64 -- the canonical bytes. Anything else (numpy values,
# subclasses, non-string keys, NaN, big ints, unencodable strings, deep nesting) raises
# _Slow and the caller takes the reference path above, so both paths give the same bytes
# and the same errors. Map keys are sorted length-first, then bytewise, as
# ``cbor2.dumps(canonical=True)`` does; the order of a key set is cached.


class _Slow(Exception):
    """The value needs the reference (normalise + cbor2) path."""


_KEY_ORDER: dict[tuple[str, ...], tuple[tuple[str, bytes], ...]] = {}
_KEY_ORDER_MAX = 4096


def _key_order(keys: tuple[str, ...]) -> tuple[tuple[str, bytes], ...]:
    order = _KEY_ORDER.get(keys)
    if order is None:
        for k in keys:
            if type(k) is not str:
                raise _Slow
        encoded = [(k, k.encode("utf-8")) for k in keys]
        encoded.sort(key=lambda kb: (len(kb[1]), kb[1]))
        order = tuple((k, _head(3, len(b)) + b) for k, b in encoded)
        if len(_KEY_ORDER) >= _KEY_ORDER_MAX:
            _KEY_ORDER.clear()
        _KEY_ORDER[keys] = order
    return order


_INT_MIN, _INT_MAX = -0x10000000000000000, 0xFFFFFFFFFFFFFFFF


def _plain(value: Any, allow_bytes: bool, drop_none: bool) -> Any:
    """The value with its maps re-made in canonical key order (None values dropped when
    ``drop_none``), checked to be plain; raises _Slow otherwise."""
    t = type(value)
    if t is dict:
        return _plain_map(value, allow_bytes, drop_none)
    if t is list or t is tuple:
        return _plain_seq(value, allow_bytes, drop_none)
    return _plain_leaf(value, t, allow_bytes)


# The two loops below check each member's type inline (exact types, most common first)
# instead of calling a function per member, which was most of the pass's cost; a member
# that is neither a container nor an everyday scalar goes to _plain_leaf.


def _plain_map(value: dict[Any, Any], allow_bytes: bool, drop_none: bool) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, _ in _key_order(tuple(value)):
        x = value[k]
        tx = type(x)
        if tx is str or tx is bool:
            out[k] = x
        elif x is None:
            if not drop_none:
                out[k] = x
        elif tx is dict:
            out[k] = _plain_map(x, allow_bytes, drop_none)
        elif tx is list or tx is tuple:
            out[k] = _plain_seq(x, allow_bytes, drop_none)
        elif tx is float:
            if x - x != 0.0:  # NaN or infinity
                raise _Slow
            out[k] = x
        else:
            out[k] = _plain_leaf(x, tx, allow_bytes)
    return out


def _plain_seq(value: list[Any] | tuple[Any, ...], allow_bytes: bool, drop_none: bool) -> list[Any]:
    items: list[Any] = []
    append = items.append
    for x in value:
        tx = type(x)
        if tx is str or tx is bool or x is None:
            append(x)
        elif tx is float:
            if x - x != 0.0:
                raise _Slow
            append(x)
        elif tx is dict:
            append(_plain_map(x, allow_bytes, drop_none))
        elif tx is list or tx is tuple:
            append(_plain_seq(x, allow_bytes, drop_none))
        else:
            append(_plain_leaf(x, tx, allow_bytes))
    return items


def _plain_leaf(x: Any, tx: type, allow_bytes: bool) -> Any:
    """A scalar member as encoded (str, bool, None, finite float, int within 64 bits, bytes
    when allowed); anything else needs the reference path."""
    if tx is str or tx is bool or x is None:
        return x
    if tx is float:
        if x - x != 0.0:  # NaN or infinity
            raise _Slow
        return x
    if tx is int:
        if not _INT_MIN <= x <= _INT_MAX:
            raise _Slow
        return x
    if tx is bytes and allow_bytes:
        return x
    raise _Slow


def fast_cbor(value: Any, *, allow_bytes: bool, drop_none: bool = False) -> bytes | None:
    """Canonical CBOR of a plain value in one pass, or None when the reference path is needed.

    Where it answers, the bytes equal :func:`canonical_cbor_reference` of the
    value (with ``None`` map values removed first when ``drop_none``).

    Args:
        value: The value; only exact plain types are taken (see the comment above).
        allow_bytes: Encode ``bytes`` (False declines them: JSON cannot carry bytes).
        drop_none: Leave out map entries whose value is ``None`` (query arguments).

    Returns:
        The encoded bytes, or None when the value needs the reference path
        (which also raises the errors this one does not).
    """
    try:
        return cbor2.dumps(_plain(value, allow_bytes, drop_none))
    except (_Slow, UnicodeEncodeError, RecursionError, cbor2.CBOREncodeError):
        return None


# --------------------------------------------------------------------------- canonical bytes, digests, fact ids


def canonical_cbor(value: Any) -> bytes:
    """Canonical CBOR bytes of ``normalise(value)``, floats as float64.

    Args:
        value: Anything :func:`normalise` accepts.

    Returns:
        The encoded bytes.

    Raises:
        CanonicalFormError: As :func:`normalise`.
    """
    fast = fast_cbor(value, allow_bytes=True)
    return fast if fast is not None else canonical_cbor_reference(value)


def digest(data: bytes) -> bytes:
    """blake3 digest of ``data``: 32 raw bytes (fact ids, query and answer digests, receipts)."""
    return blake3.blake3(data).digest()


def fact_id(
    cell: str,
    band: str,
    tslot: int,
    value: Any,
    source_ids: Sequence[str],
    derivation: str,
) -> str:
    """Content id of one fact; identical on every replica holding the same fact.

    Args:
        cell: cell64 text of the fact's cell.
        band: Band name, e.g. ``"indices.ndvi"``.
        tslot: Time slot (day or year slot of the band's tempo).
        value: The fact's value: a number, a list (embedding), bytes, or None
            (absence). NaN is refused: an absent value must be ``None``.
        source_ids: Source item ids (STAC ids); order and duplicates do not matter.
        derivation: Name and version of the computation, e.g. ``"ndvi.v1"``.

    Returns:
        ``"f2:<64 lowercase hex>:<cell>:<band>:<tslot>"``.

    Raises:
        NonFiniteNumber: NaN or infinity in the value.
        InvalidFact: Wrongly typed arguments.
        CanonicalFormError: A value :func:`normalise` refuses.
    """
    fast = _fact_id_plain(cell, band, tslot, value, source_ids, derivation)
    if fast is not None:
        return fast
    if not isinstance(cell, str) or not isinstance(band, str) or not isinstance(derivation, str):
        raise InvalidFact("cell, band and derivation must be strings")
    if isinstance(tslot, bool) or not isinstance(tslot, int):
        tslot_int = getattr(tslot, "item", lambda: None)()
        if isinstance(tslot_int, bool) or not isinstance(tslot_int, int):
            raise InvalidFact(f"tslot must be an integer, got {tslot!r}")
        tslot = tslot_int
    if isinstance(source_ids, str) or not all(isinstance(s, str) for s in source_ids):
        raise InvalidFact("source_ids must be a sequence of strings")
    body = {
        "cell": cell,
        "band": band,
        "tslot": int(tslot),
        "value": value,  # canonical_cbor normalises it
        "sources": sorted(set(source_ids)),
        "derivation": derivation,
    }
    hexdigest = blake3.blake3(canonical_cbor(body)).hexdigest()
    return f"{FACT_ID_PREFIX}{hexdigest}:{cell}:{band}:{int(tslot)}"


_FACT_KEYS = ("cell", "band", "tslot", "value", "sources", "derivation")
_FACT_KEY = dict(_key_order(_FACT_KEYS))
_FACT_HEAD = _head(5, len(_FACT_KEYS))


def _fact_id_plain(
    cell: Any, band: Any, tslot: Any, value: Any, source_ids: Any, derivation: Any
) -> str | None:
    """:func:`fact_id` of a scalar fact of exact plain types (str cell, band and derivation,
    int tslot, a value :func:`store.cbor_scalars.scalar` writes, a list or tuple of str
    sources), its canonical map written directly: the same bytes, the same id. None for
    anything else (the general path then gives the id or the error)."""
    if not (
        type(cell) is str
        and type(band) is str
        and type(derivation) is str
        and type(tslot) is int
        and (type(source_ids) is list or type(source_ids) is tuple)
    ):
        return None
    enc_value = _scalar(value)
    enc_tslot = _scalar(tslot)
    if enc_value is None or enc_tslot is None:
        return None
    for s in source_ids:
        if type(s) is not str:
            return None
    srcs = sorted(set(source_ids))
    k = _FACT_KEY
    try:
        data = b"".join(
            [
                _FACT_HEAD,
                k["band"],
                _text(band),
                k["cell"],
                _text_once(cell),
                k["tslot"],
                enc_tslot,
                k["value"],
                enc_value,
                k["sources"],
                _head(4, len(srcs)),
                *[_text(s) for s in srcs],
                k["derivation"],
                _text(derivation),
            ]
        )
    except UnicodeEncodeError:
        return None
    return f"{FACT_ID_PREFIX}{blake3.blake3(data).hexdigest()}:{cell}:{band}:{tslot}"


def fact_ids(
    cells: Sequence[str],
    band: str,
    tslots: Sequence[int],
    values: Sequence[Any],
    source_ids: Sequence[Sequence[str]],
    derivation: str,
) -> list[str]:
    """The ids :func:`fact_id` gives, for many facts of one band and derivation.

    The same bytes are hashed, item by item: the canonical map is joined from its
    fields' encodings in the canonical key order, with the band, the derivation and
    each distinct source list encoded once. An item the one-pass encoder declines
    (a numpy value, a non-string, a non-finite number) takes :func:`fact_id` itself,
    so its id or its error is the one :func:`fact_id` gives.

    Raises:
        As :func:`fact_id`.
    """
    items = zip(cells, tslots, values, source_ids, strict=True)
    enc_band = fast_cbor(band, allow_bytes=False) if type(band) is str else None
    enc_deriv = fast_cbor(derivation, allow_bytes=False) if type(derivation) is str else None
    if enc_band is None or enc_deriv is None:
        return [fact_id(c, band, t, v, s, derivation) for c, t, v, s in items]
    order = _key_order(_FACT_KEYS)
    head = _head(5, len(order))
    enc_sources: dict[tuple[str, ...], bytes | None] = {}
    out: list[str] = []
    for cell, tslot, value, srcs in items:
        if isinstance(srcs, str):  # fact_id refuses it
            es = None
        else:
            key = tuple(srcs)
            if key in enc_sources:
                es = enc_sources[key]
            else:
                plain = all(type(s) is str for s in key)
                es = fast_cbor(sorted(set(key)), allow_bytes=False) if plain else None
                enc_sources[key] = es
        parts = {
            "band": enc_band,
            "derivation": enc_deriv,
            "cell": fast_cbor(cell, allow_bytes=False) if type(cell) is str else None,
            "tslot": fast_cbor(tslot, allow_bytes=False) if type(tslot) is int else None,
            "value": fast_cbor(value, allow_bytes=True),
            "sources": es,
        }
        if None in parts.values():  # the general path gives the same id, or the error
            out.append(fact_id(cell, band, tslot, value, srcs, derivation))
            continue
        data = head + b"".join([kb + parts[k] for k, kb in order])  # type: ignore[operator]
        out.append(f"{FACT_ID_PREFIX}{blake3.blake3(data).hexdigest()}:{cell}:{band}:{tslot}")
    return out


def fact_record(
    cell: str,
    band: str,
    tslot: int,
    value: Any,
    sources: Sequence[str],
    derivation: str,
    date: str,
) -> dict[str, Any]:
    """A fact as answers cite it: its content id and the content it is the id of.

    Args:
        cell: cell64 text (or an area's ``geom:<digest>``).
        band: Band name.
        tslot: Slot of the value.
        value: The value (a non-finite float is stored as None: no value).
        sources: Source scene ids, sorted and unique.
        derivation: Derivation label (``earthmem.<band>.v1``).
        date: ISO date of the slot.
    """
    if isinstance(value, float) and not math.isfinite(value):
        value = None
    tv = type(value)
    if (
        tv in _MEMO_VALUE_TYPES
        and type(tslot) is int
        and type(sources) is list
        and type(cell) is str
        and type(band) is str
        and type(derivation) is str
        and type(date) is str
        and all(type(s) is str for s in sources)
    ):
        # a pure function of its arguments: plain scalar facts are remembered (bounded);
        # the type and a float's sign are part of the key (1, 1.0 and True, 0.0 and -0.0
        # are equal keys but different facts), and every caller gets its own dict
        sign = tv is float and math.copysign(1.0, value) < 0
        key = (cell, band, tslot, tv, sign, value, tuple(sources), derivation, date)
        rec = _FACT_MEMO.get(
            key, lambda: _fact_record(cell, band, tslot, value, sources, derivation, date)
        )
        return {**rec, "sources": list(rec["sources"])}
    return _fact_record(cell, band, tslot, value, sources, derivation, date)


FACT_MEMO_ENTRIES = 4096
"""Fact records :func:`fact_record` remembers (least recent dropped first): a few MB at most."""

_MEMO_VALUE_TYPES = frozenset({int, float, bool, str, type(None)})
_FACT_MEMO = BoundedMemo(FACT_MEMO_ENTRIES)


def _fact_record(
    cell: str,
    band: str,
    tslot: int,
    value: Any,
    sources: Sequence[str],
    derivation: str,
    date: str,
) -> dict[str, Any]:
    return {
        "fact_id": fact_id(cell, band, int(tslot), value, list(sources), derivation),
        "cell": cell,
        "band": band,
        "tslot": int(tslot),
        "date": date,
        "value": value,
        "sources": list(sources),
        "derivation": derivation,
    }
