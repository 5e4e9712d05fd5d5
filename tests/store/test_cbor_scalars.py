"""Scalars written directly (store.cbor_scalars) are cbor2's bytes; fact ids written with them
are the reference encoding's ids."""

from __future__ import annotations

import enum
import math

import blake3
import cbor2
from hypothesis import given
from hypothesis import strategies as st

from store.cbor_scalars import head, scalar, text, text_cached
from store.facts import (
    FACT_ID_PREFIX,
    _fact_id_plain,
    canonical_cbor_reference,
    fact_id,
)

INT64 = st.integers(min_value=-(2**64), max_value=2**64 - 1)
PLAIN = st.one_of(
    st.floats(allow_nan=False, allow_infinity=False),
    INT64,
    st.text(),
    st.booleans(),
    st.none(),
)


@given(PLAIN)
def test_a_plain_scalar_is_what_cbor2_writes(x: object) -> None:
    assert scalar(x) == cbor2.dumps(x)


@given(st.integers(min_value=0, max_value=2**64 - 1))
def test_heads_are_cbor2s(n: int) -> None:
    assert head(0, n) == cbor2.dumps(n)
    assert head(1, n) == cbor2.dumps(-1 - n)


@given(st.text())
def test_texts_are_cbor2s(s: str) -> None:
    assert text(s) == text_cached(s) == cbor2.dumps(s)


class _Small(enum.IntEnum):
    ONE = 1


def test_what_is_not_a_plain_scalar_is_left_to_the_general_path() -> None:
    for x in (math.nan, math.inf, -math.inf, 2**64, -(2**64) - 1, b"x", [1], {}, _Small.ONE):
        assert scalar(x) is None, x
    assert scalar("\ud800") is None  # a lone surrogate: no UTF-8
    assert scalar(-0.0) == cbor2.dumps(-0.0) == b"\xfb\x80" + bytes(7)


def _reference_id(cell: str, band: str, tslot: int, value: object, sources: list[str]) -> str:
    body = {
        "cell": cell,
        "band": band,
        "tslot": tslot,
        "value": value,
        "sources": sorted(set(sources)),
        "derivation": "d.v1",
    }
    hexdigest = blake3.blake3(canonical_cbor_reference(body)).hexdigest()
    return f"{FACT_ID_PREFIX}{hexdigest}:{cell}:{band}:{tslot}"


@given(
    st.text(min_size=1),
    st.sampled_from(["indices.ndvi", "s2.clear", "s1.vv", "bänd"]),
    INT64,
    PLAIN,
    st.lists(st.text(max_size=30), max_size=5),
)
def test_fact_ids_written_directly_are_the_references(
    cell: str, band: str, tslot: int, value: object, sources: list[str]
) -> None:
    want = _reference_id(cell, band, tslot, value, sources)
    assert _fact_id_plain(cell, band, tslot, value, sources, "d.v1") == want
    assert _fact_id_plain(cell, band, tslot, value, tuple(sources), "d.v1") == want
    assert fact_id(cell, band, tslot, value, sources, "d.v1") == want


def test_other_facts_take_the_general_path() -> None:
    args = ("c", "b", 5, 0.5, ["s"], "d.v1")
    assert _fact_id_plain(*args) == fact_id(*args)
    for bad in (
        ("c", "b", 5, [0.5, 1.0], ["s"], "d.v1"),  # an embedding
        ("c", "b", 5, math.nan, ["s"], "d.v1"),
        ("c", "b", True, 0.5, ["s"], "d.v1"),
        ("c", "b", 5, 0.5, "s", "d.v1"),
        ("c", "b", 5, 0.5, ["s", 1], "d.v1"),
        ("\ud800", "b", 5, 0.5, ["s"], "d.v1"),
        ("c", "b", 2**64, 0.5, ["s"], "d.v1"),
    ):
        assert _fact_id_plain(*bad) is None, bad
