"""Canonical form and fact ids (store/facts.py): ids, encodings, and the fast encoder."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from store.errors import InvalidFact, NonFiniteNumber
from store.facts import (
    canonical_cbor,
    canonical_cbor_reference,
    fact_id,
    fact_ids,
    fact_record,
    fast_cbor,
    normalise,
    parse_fact_id,
    same_fact,
)

REPO = Path(__file__).resolve().parents[2]

CELL_A = "c64:23.3431:85.3094"
CELL_B = "c64:23.3432:85.3095"
FACTS = [
    fact_id(CELL_A, "indices.ndvi", 19800, 0.71, ["S2A_1", "S2B_2"], "ndvi.v1"),
    fact_id(CELL_A, "indices.ndvi", 19830, 0.23, ["S2A_3"], "ndvi.v1"),
]


# ----------------------------------------------------------------------------- fact ids


def test_fact_id_format_and_source_order_independence() -> None:
    a = fact_id(CELL_A, "indices.ndvi", 19800, 0.71, ["S2B_2", "S2A_1"], "ndvi.v1")
    b = fact_id(CELL_A, "indices.ndvi", 19800, 0.71, ("S2A_1", "S2B_2", "S2A_1"), "ndvi.v1")
    assert a == b == FACTS[0]
    assert a.startswith("f2:")
    assert a == f"f2:{a[3:67]}:{CELL_A}:indices.ndvi:19800"
    int(a[3:67], 16)
    addr = parse_fact_id(a)
    assert (addr.layout, addr.cell, addr.band, addr.tslot) == ("f2", CELL_A, "indices.ndvi", 19800)


def test_fact_ids_of_both_layouts_compare_by_digest() -> None:
    a = FACTS[0]
    legacy = "f1:" + a[3:67]  # the earlier layout of the same fact
    assert parse_fact_id(legacy).layout == "f1"
    assert same_fact(a, legacy)
    assert not same_fact(FACTS[1], legacy)
    area = fact_id("geom:" + "ab" * 16, "indices.ndvi", 7, 0.5, [], "d")
    assert parse_fact_id(area).cell == "geom:" + "ab" * 16
    for bad in ("", "f1:xyz", "f2:" + "0" * 64, "f2:" + "0" * 64 + ":c:b:x", "f3:" + a[3:], 5):
        with pytest.raises(InvalidFact):
            parse_fact_id(bad)
        assert not same_fact(a, bad) if isinstance(bad, str) else True


def test_fact_id_same_in_another_process() -> None:
    """Two 'replicas' (separate interpreters, different hash seeds) agree."""
    code = (
        "from store.facts import fact_id;"
        f"print(fact_id({CELL_A!r}, 'indices.ndvi', 19800, 0.71, ['S2B_2', 'S2A_1'], 'ndvi.v1'))"
    )
    env = {**os.environ, "PYTHONHASHSEED": "12345", "PYTHONPATH": str(REPO)}
    out = subprocess.run(
        [sys.executable, "-c", code],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    assert out.stdout.strip() == FACTS[0]


def test_fact_id_sensitive_to_every_field() -> None:
    base = (CELL_A, "indices.ndvi", 19800, 0.71, ["S2A_1", "S2B_2"], "ndvi.v1")
    variants = [
        (CELL_B, *base[1:]),
        (CELL_A, "indices.ndwi", *base[2:]),
        (CELL_A, "indices.ndvi", 19801, *base[3:]),
        (CELL_A, "indices.ndvi", 19800, 0.7100000000000001, *base[4:]),
        (CELL_A, "indices.ndvi", 19800, 0.71, ["S2A_1"], "ndvi.v1"),
        (CELL_A, "indices.ndvi", 19800, 0.71, ["S2A_1", "S2B_2"], "ndvi.v2"),
        (CELL_A, "indices.ndvi", 19800, None, ["S2A_1", "S2B_2"], "ndvi.v1"),
    ]
    ids = {fact_id(*base)} | {fact_id(*v) for v in variants}  # type: ignore[arg-type]
    assert len(ids) == len(variants) + 1


def test_fact_id_value_normalisation() -> None:
    # numpy scalars, int/float with integral value, and arrays vs lists agree.
    f32 = np.float32(0.25)
    assert fact_id(CELL_A, "b", 1, f32, [], "d") == fact_id(CELL_A, "b", 1, 0.25, [], "d")
    # Integers and floats are distinct types, as in JSON written by Python.
    assert fact_id(CELL_A, "b", 1, 2.0, [], "d") != fact_id(CELL_A, "b", 1, 2, [], "d")
    assert fact_id(CELL_A, "b", np.int64(1), 2, [], "d") == fact_id(CELL_A, "b", 1, 2, [], "d")
    vec = np.arange(-64, 64, dtype=np.int8)
    assert fact_id(CELL_A, "geotessera", 54, vec, [], "t") == fact_id(
        CELL_A, "geotessera", 54, list(range(-64, 64)), [], "t"
    )
    # Booleans are not integers.
    assert fact_id(CELL_A, "b", 1, True, [], "d") != fact_id(CELL_A, "b", 1, 1, [], "d")


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), [1.0, float("-inf")]])
def test_fact_id_rejects_non_finite(bad: Any) -> None:
    with pytest.raises(NonFiniteNumber):
        fact_id(CELL_A, "b", 1, bad, [], "d")


def test_fact_id_rejects_bad_types() -> None:
    with pytest.raises(InvalidFact):
        fact_id(CELL_A, "b", 1.5, 1, [], "d")  # type: ignore[arg-type]
    with pytest.raises(InvalidFact):
        fact_id(CELL_A, "b", 1, 1, "S2A_1", "d")  # a str is not a list of ids


def test_canonical_cbor_floats_are_float64_and_maps_sorted() -> None:
    assert canonical_cbor(1.5) == b"\xfb" + bytes.fromhex("3ff8000000000000")
    assert canonical_cbor({"b": 1, "a": 2}) == canonical_cbor({"a": 2, "b": 1})


# ----------------------------------------------------------------------------- fast encoder


json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**64 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=20),
    lambda children: (
        st.lists(children, max_size=5) | st.dictionaries(st.text(max_size=8), children, max_size=5)
    ),
    max_leaves=30,
)


@settings(max_examples=300, deadline=None)
@given(json_values)
def test_fast_cbor_equals_the_reference_encoder(value) -> None:
    fast = fast_cbor(value, allow_bytes=True)
    slow = canonical_cbor_reference(value)
    if fast is not None:  # the fast path may decline (then canonical_cbor takes the slow one)
        assert fast == slow
    assert canonical_cbor(value) == slow


@settings(max_examples=200, deadline=None)
@given(json_values, st.binary(max_size=8))
def test_fast_cbor_drop_none_and_bytes_equal_the_reference(value, raw: bytes) -> None:
    doc = {"v": value, "raw": raw, "gone": None, "nested": [{"x": None, "y": raw}]}
    fast = fast_cbor(doc, allow_bytes=True, drop_none=True)
    assert fast == canonical_cbor_reference(normalise(doc, drop_none=True))
    assert fast_cbor(doc, allow_bytes=False) is None  # JSON cannot carry bytes


facts_in = st.tuples(
    st.text(max_size=12),
    st.integers(min_value=-(2**63), max_value=2**64 - 1),
    json_values,
    st.lists(st.text(max_size=6), max_size=4),
)


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=12), st.text(max_size=12), st.lists(facts_in, max_size=6))
def test_fact_ids_in_a_batch_equal_fact_id(band: str, derivation: str, items: list) -> None:
    cells, tslots, values, sources = (
        (list(x) for x in zip(*items, strict=True))
        if items
        else (
            [],
            [],
            [],
            [],
        )
    )
    assert fact_ids(cells, band, tslots, values, sources, derivation) == [
        fact_id(c, band, t, v, s, derivation) for c, t, v, s in items
    ]


def test_fact_ids_declined_items_take_fact_id() -> None:
    """numpy values and repeated source lists give fact_id's ids; bad items its errors."""
    got = fact_ids(
        [CELL_A, CELL_B, CELL_A],
        "indices.ndvi",
        [np.int64(19800), 19800, 19801],
        [np.float32(0.25), 0.71, 1],
        [["S2B_2", "S2A_1"], ("S2A_1", "S2B_2"), []],
        "ndvi.v1",
    )
    assert got == [
        fact_id(CELL_A, "indices.ndvi", 19800, 0.25, ["S2A_1", "S2B_2"], "ndvi.v1"),
        fact_id(CELL_B, "indices.ndvi", 19800, 0.71, ["S2A_1", "S2B_2"], "ndvi.v1"),
        fact_id(CELL_A, "indices.ndvi", 19801, 1, [], "ndvi.v1"),
    ]
    with pytest.raises(NonFiniteNumber):
        fact_ids([CELL_A], "b", [1], [float("nan")], [[]], "d")
    with pytest.raises(InvalidFact):
        fact_ids([CELL_A], "b", [1], [1.0], ["S2A_1"], "d")
    with pytest.raises(InvalidFact):
        fact_ids([CELL_A], "b", [True], [1.0], [[]], "d")


def test_fact_record_remembered_facts_keep_their_type_and_sign() -> None:
    """Values equal as keys (0.0 / -0.0, 1 / 1.0 / True) are different facts, asked in any
    order and again; each call gets its own record, so changing one changes no other."""
    srcs = ["S2A_X", "S2B_Y"]
    values: list[Any] = [0.0, -0.0, 1, 1.0, True, None, "a"]
    for _ in range(2):
        for value in values:
            rec = fact_record(CELL_A, "indices.ndvi", 19000, value, srcs, "d.v1", "2022-01-08")
            assert rec["fact_id"] == fact_id(CELL_A, "indices.ndvi", 19000, value, srcs, "d.v1")
            assert type(rec["value"]) is type(value)
            assert str(rec["value"]) == str(value)
            rec["sources"].append("changed")
            rec["value"] = "changed"
    again = fact_record(CELL_A, "indices.ndvi", 19000, 1.0, srcs, "d.v1", "2022-01-08")
    assert again["sources"] == srcs
    assert again["value"] == 1.0
    with pytest.raises(InvalidFact):  # an error is not remembered as a record
        fact_record(CELL_A, "indices.ndvi", 19000, 1.0, [1], "d.v1", "2022-01-08")  # type: ignore[list-item]


def test_store_facts_does_not_import_the_api() -> None:
    """The pipeline computes fact ids without the API layer."""
    code = (
        "import sys, store.facts; print(sorted(m for m in sys.modules if m.split('.')[0] == 'api'))"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    out = subprocess.run(
        [sys.executable, "-c", code],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    assert out.stdout.strip() == "[]"
