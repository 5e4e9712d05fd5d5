"""Query digests and signed receipts (api/receipts.py); fact ids: tests/store/test_facts.py."""

from __future__ import annotations

import copy
import json
import os
import stat
from collections.abc import Callable
from pathlib import Path
from typing import Any

import blake3
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from api.errors import InvalidArgument, ReceiptKeyError
from api.receipts import (
    DOMAIN_TAG,
    KEY_FILE,
    Signer,
    answer_digest,
    query_digest,
    receipt_preimage,
    sign_answer,
    verify_answer,
)
from store.facts import fact_id, normalise
from store.keys import KEY_FILE_ENV

REPO = Path(__file__).resolve().parents[2]

CELL_A = "c64:23.3431:85.3094"
CELL_B = "c64:23.3432:85.3095"
ARGS = {"cell": CELL_A, "band": "indices.ndvi", "window": [19800, 19830], "scope": None}
ANSWER = {
    "cell": CELL_A,
    "band": "indices.ndvi",
    "values": [{"tslot": 19800, "value": 0.71}, {"tslot": 19830, "value": 0.23}],
    "delta": -0.48,
    "significant": True,
    "n": 12,
}
FACTS = [
    fact_id(CELL_A, "indices.ndvi", 19800, 0.71, ["S2A_1", "S2B_2"], "ndvi.v1"),
    fact_id(CELL_A, "indices.ndvi", 19830, 0.23, ["S2A_3"], "ndvi.v1"),
]


@pytest.fixture(scope="module")
def signer() -> Signer:
    return Signer.generate()


@pytest.fixture(scope="module")
def signed(signer: Signer) -> dict[str, Any]:
    return sign_answer(
        signer,
        "did_change",
        ARGS,
        ANSWER,
        cells=[CELL_B, CELL_A, CELL_A],
        fact_ids=FACTS,
        snapshot_id="snap-0001",
        request_id="req-1",
        served_at="2025-06-01T12:00:00.000Z",
    )


# ----------------------------------------------------------------------------- query digest


def test_query_digest_drops_none_and_ignores_key_order() -> None:
    a = query_digest("did_change", {"cell": CELL_A, "band": "x", "scope": None})
    b = query_digest("did_change", {"band": "x", "cell": CELL_A})
    assert a == b
    assert len(a) == 32
    assert query_digest("trajectory", {"band": "x", "cell": CELL_A}) != a
    assert query_digest("did_change", {"band": "y", "cell": CELL_A}) != a


# ----------------------------------------------------------------------------- keys


def test_key_created_with_owner_only_permissions_and_reused(tmp_path: Path) -> None:
    s1 = Signer.load_or_create(tmp_path)
    key_path = tmp_path / KEY_FILE
    assert stat.S_IMODE(key_path.stat().st_mode) == 0o600
    assert stat.S_IMODE(key_path.parent.stat().st_mode) == 0o700
    assert len(key_path.read_bytes()) == 32
    s2 = Signer.load_or_create(tmp_path)
    assert s2.public_key == s1.public_key
    assert s2.key_id == s1.key_id == blake3.blake3(s1.public_key).hexdigest()[:16]
    # no temporary files left behind
    assert [p.name for p in key_path.parent.iterdir()] == [key_path.name]


def test_key_creation_ignores_permissive_umask(tmp_path: Path) -> None:
    old = os.umask(0)
    try:
        Signer.load_or_create(tmp_path)
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / KEY_FILE).stat().st_mode) == 0o600
    assert stat.S_IMODE((tmp_path / KEY_FILE).parent.stat().st_mode) == 0o700


def test_key_file_too_open_or_malformed_is_refused(tmp_path: Path) -> None:
    Signer.load_or_create(tmp_path)
    key_path = tmp_path / KEY_FILE
    os.chmod(key_path, 0o644)
    with pytest.raises(ReceiptKeyError) as err:
        Signer.load_or_create(tmp_path)
    assert err.value.code == "receipt_key_insecure"
    os.chmod(key_path, 0o600)
    key_path.write_bytes(b"short")
    with pytest.raises(ReceiptKeyError) as err:
        Signer.load_or_create(tmp_path)
    assert err.value.code == "receipt_key_malformed"


def test_a_secret_key_file_replaces_the_data_directory_key(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Replicas given one secret sign with one key and never create one of their own."""
    seed = os.urandom(32)
    raw, hexed = tmp_path / "secret.raw", tmp_path / "secret.hex"
    raw.write_bytes(seed)
    hexed.write_text(seed.hex() + "\n")
    for f in (raw, hexed):
        os.chmod(f, 0o400)
    own = Signer.load_or_create(tmp_path / "own")  # without the secret: the directory's key
    signers = []
    for secret, data in ((raw, "a"), (hexed, "b")):
        monkeypatch.setenv(KEY_FILE_ENV, str(secret))
        signers.append(Signer.load_or_create(tmp_path / data))
        assert not (tmp_path / data / KEY_FILE).exists()  # nothing written to the data dir
    assert signers[0].key_id == signers[1].key_id != own.key_id
    monkeypatch.setenv(KEY_FILE_ENV, str(tmp_path / "missing"))  # a missing secret
    with pytest.raises(ReceiptKeyError) as err:
        Signer.load_or_create(tmp_path / "c")
    assert err.value.code == "receipt_key_missing"
    assert not (tmp_path / "c" / KEY_FILE).exists()  # is an error, not a fresh key
    os.chmod(raw, 0o644)
    monkeypatch.setenv(KEY_FILE_ENV, str(raw))
    with pytest.raises(ReceiptKeyError) as err:
        Signer.load_or_create(tmp_path / "d")
    assert err.value.code == "receipt_key_insecure"


def test_public_info(signer: Signer) -> None:
    info = signer.public_info()
    (key,) = info["keys"]
    assert key == {
        "key_id": signer.key_id,
        "alg": "ed25519",
        "public_key": signer.public_key.hex(),
        "public_key_b64": key["public_key_b64"],
        "use": "receipt",
    }
    assert info["domain"] == DOMAIN_TAG.decode()
    json.dumps(info)


# ----------------------------------------------------------------------------- sign / verify


def test_receipt_shape(signed: dict[str, Any], signer: Signer) -> None:
    r = signed["receipt"]
    assert {k: v for k, v in signed.items() if k != "receipt"} == ANSWER
    assert r["version"] == 1
    assert r["cells"] == [CELL_A, CELL_B]  # sorted, unique
    assert r["fact_ids"] == sorted(FACTS)
    assert r["query"] == {"cell": CELL_A, "band": "indices.ndvi", "window": [19800, 19830]}
    assert r["query_digest"] == query_digest("did_change", ARGS).hex()
    assert r["answer_digest"] == answer_digest(ANSWER).hex()
    assert r["key_id"] == signer.key_id
    assert len(bytes.fromhex(r["signature"])) == 64


def test_preimage_layout_is_length_prefixed() -> None:
    pre = receipt_preimage(
        request_id="r",
        served_at="2025-01-01T00:00:00.000Z",
        primitive="p",
        query_digest=b"\x01" * 32,
        cells=["a", "bc"],
        fact_ids=[],
        snapshot_id="s",
        answer_digest=b"\x02" * 32,
        key_id="k",
    )
    expected = (
        b"\x00\x00\x00\x13earthmem.receipt.v1"
        + b"\x00\x00\x00\x01r"
        + b"\x00\x00\x00\x182025-01-01T00:00:00.000Z"
        + b"\x00\x00\x00\x01p"
        + b"\x00\x00\x00\x20"
        + b"\x01" * 32
        + b"\x00\x00\x00\x02"
        + b"\x00\x00\x00\x01a"
        + b"\x00\x00\x00\x02bc"
        + b"\x00\x00\x00\x00"
        + b"\x00\x00\x00\x01s"
        + b"\x00\x00\x00\x20"
        + b"\x02" * 32
        + b"\x00\x00\x00\x01k"
    )
    assert pre == expected


def test_verify_ok_and_after_json_round_trip(signed: dict[str, Any], signer: Signer) -> None:
    assert verify_answer(signed).ok
    reloaded = json.loads(json.dumps(signed, indent=2))
    result = verify_answer(reloaded)
    assert result.ok, result.reason
    assert not result.key_trusted
    trusted = verify_answer(reloaded, {signer.key_id: signer.public_key})
    assert trusted.ok
    assert trusted.key_trusted


def test_round_trip_with_awkward_floats(signer: Signer) -> None:
    answer = {"x": 0.1 + 0.2, "y": 1e-300, "z": -0.0, "w": 2.0, "big": 1e20, "n": None, "i": 2**70}
    doc = sign_answer(signer, "p", {"f": 1.0 / 3}, answer, [], [], "s")
    reloaded = json.loads(json.dumps(doc))
    assert verify_answer(reloaded).ok


def test_defaults_fill_request_id_and_served_at(signer: Signer) -> None:
    doc = sign_answer(signer, "p", {}, {"a": 1}, [], [], "s")
    assert doc["receipt"]["request_id"]
    assert doc["receipt"]["served_at"].endswith("Z")
    assert verify_answer(doc).ok


def _set(path: tuple[Any, ...], value: Any) -> Callable[[dict[str, Any]], None]:
    def apply(doc: dict[str, Any]) -> None:
        target: Any = doc
        for key in path[:-1]:
            target = target[key]
        target[path[-1]] = value

    return apply


def _flip_hex(path: tuple[str, ...]) -> Callable[[dict[str, Any]], None]:
    def apply(doc: dict[str, Any]) -> None:
        target: Any = doc
        for key in path[:-1]:
            target = target[key]
        s = target[path[-1]]
        target[path[-1]] = ("1" if s[0] == "0" else "0") + s[1:]

    return apply


def _delete(path: tuple[str, ...]) -> Callable[[dict[str, Any]], None]:
    def apply(doc: dict[str, Any]) -> None:
        target: Any = doc
        for key in path[:-1]:
            target = target[key]
        del target[path[-1]]

    return apply


TAMPERS: dict[str, Callable[[dict[str, Any]], None]] = {
    "answer value": _set(("values", 1, "value"), 0.24),
    "answer value tiny": _set(("values", 1, "value"), 0.23000000000000004),
    "answer flag": _set(("significant",), False),
    "answer count": _set(("n",), 13),
    "answer new field": _set(("extra",), "x"),
    "answer dropped field": _delete(("delta",)),
    "answer cell": _set(("cell",), CELL_B),
    "answer int to float": _set(("n",), 12.0),
    "answer null added": _set(("nothing",), None),
    "answer tslot to string": _set(("values", 0, "tslot"), "19800"),
    "receipt cell": _set(("receipt", "cells", 0), "c64:0:0"),
    "receipt cells dropped": _set(("receipt", "cells"), [CELL_A]),
    "receipt cells reordered": _set(("receipt", "cells"), [CELL_B, CELL_A]),
    "receipt fact id": _flip_hex(("receipt", "fact_ids", 0)),
    "receipt fact ids extra": _set(("receipt", "fact_ids"), sorted([*FACTS, "f1:" + "0" * 64])),
    "served_at": _set(("receipt", "served_at"), "2025-06-01T12:00:01.000Z"),
    "served_at unparseable": _set(("receipt", "served_at"), "yesterday"),
    "request_id": _set(("receipt", "request_id"), "req-2"),
    "primitive": _set(("receipt", "primitive"), "trajectory"),
    "snapshot": _set(("receipt", "snapshot_id"), "snap-0002"),
    "query arg": _set(("receipt", "query", "band"), "indices.ndwi"),
    "query window": _set(("receipt", "query", "window"), [19800, 19831]),
    "query null added": _set(("receipt", "query", "scope"), None),
    "query int to float": _set(("receipt", "query", "window"), [19800.0, 19830]),
    "query digest": _flip_hex(("receipt", "query_digest")),
    "answer digest": _flip_hex(("receipt", "answer_digest")),
    "signature byte": _flip_hex(("receipt", "signature")),
    "signature upper-case": lambda d: d["receipt"].update(
        signature=d["receipt"]["signature"].upper()
    ),
    "key id": _flip_hex(("receipt", "key_id")),
    "public key": _flip_hex(("receipt", "public_key")),
    "version": _set(("receipt", "version"), 2),
    "version float": _set(("receipt", "version"), 1.0),
    "version bool": _set(("receipt", "version"), True),
    "receipt extra field": _set(("receipt", "note"), "hi"),
    "receipt missing field": _delete(("receipt", "snapshot_id")),
    "receipt removed": _delete(("receipt",)),
}


@pytest.mark.parametrize("name", sorted(TAMPERS))
def test_any_tamper_fails(signed: dict[str, Any], name: str) -> None:
    doc = copy.deepcopy(json.loads(json.dumps(signed)))
    TAMPERS[name](doc)
    result = verify_answer(doc)
    assert not result.ok, name
    assert result.reason != "ok"


def test_every_single_character_change_of_receipt_strings_fails(signed: dict[str, Any]) -> None:
    """Exhaustive over the receipt's string fields: change one character at each position."""
    base = json.loads(json.dumps(signed))
    for field in ("request_id", "served_at", "primitive", "snapshot_id", "signature"):
        value = base["receipt"][field]
        for i in range(len(value)):
            doc = copy.deepcopy(base)
            repl = "1" if value[i] != "1" else "2"
            doc["receipt"][field] = value[:i] + repl + value[i + 1 :]
            assert not verify_answer(doc).ok, (field, i)


def test_resigned_by_another_key_fails_against_trusted_keys(
    signed: dict[str, Any], signer: Signer
) -> None:
    forger = Signer.generate()
    answer = {k: v for k, v in signed.items() if k != "receipt"}
    answer["delta"] = -0.9
    forged = sign_answer(
        forger, "did_change", ARGS, answer, [CELL_A, CELL_B], FACTS, "snap-0001", "req-1"
    )
    assert verify_answer(forged).ok  # self-consistent ...
    result = verify_answer(forged, {signer.key_id: signer.public_key})
    assert not result.ok  # ... but not from the trusted key
    assert "trusted" in result.reason
    # Swapping in the trusted public key and key id breaks the signature instead.
    forged["receipt"]["public_key"] = signer.public_key.hex()
    forged["receipt"]["key_id"] = signer.key_id
    assert not verify_answer(forged, {signer.key_id: signer.public_key}).ok


def test_wrong_trusted_key_for_key_id_fails(signed: dict[str, Any], signer: Signer) -> None:
    other = Signer.generate()
    assert not verify_answer(signed, {signer.key_id: other.public_key}).ok


def test_key_persists_across_loads_and_verifies(tmp_path: Path) -> None:
    doc = sign_answer(Signer.load_or_create(tmp_path), "p", {"a": 1}, {"b": 2}, [], [], "s")
    again = Signer.load_or_create(tmp_path)
    assert verify_answer(doc, {again.key_id: again.public_key}).ok


@pytest.mark.parametrize(
    "answer",
    [{"x": float("nan")}, {"x": object()}, {"receipt": {}}],
)
def test_sign_rejects_bad_answers(signer: Signer, answer: dict[str, Any]) -> None:
    with pytest.raises(InvalidArgument):
        sign_answer(signer, "p", {}, answer, [], [], "s")


def test_sign_rejects_bad_served_at(signer: Signer) -> None:
    with pytest.raises(InvalidArgument):
        sign_answer(signer, "p", {}, {}, [], [], "s", served_at="2025-06-01 12:00")


@pytest.mark.parametrize(
    ("args", "code"),
    [({"x": float("nan")}, "invalid_number"), ({"x": {1: 2}}, "invalid_value")],
)
def test_args_without_canonical_form_are_invalid_arguments(
    signer: Signer, args: dict[str, Any], code: str
) -> None:
    """store.facts refuses them with a store error; the API raises InvalidArgument, same code."""
    with pytest.raises(InvalidArgument) as err:
        sign_answer(signer, "p", args, {}, [], [], "s")
    assert err.value.code == code
    assert err.value.status == 422
    with pytest.raises(InvalidArgument) as err:
        query_digest("p", args)
    assert err.value.code == code


_JSONISH = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats()
    | st.text(max_size=5),
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.tuples(inner, inner)
        | st.dictionaries(st.text(max_size=3), inner, max_size=4)
    ),
    max_leaves=12,
)


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(st.text(max_size=4), _JSONISH, max_size=5))
def test_receipt_query_is_the_normalised_json_of_the_args(args: dict[str, Any]) -> None:
    """receipt.query is the JSON round trip of the normalised args (key order, types, nulls
    dropped), whichever path built it; args without a canonical form are refused."""
    signer = Signer.generate()
    try:
        expected = json.loads(json.dumps(normalise(args, drop_none=True), allow_nan=False))
    except (ValueError, TypeError):
        with pytest.raises(InvalidArgument):
            sign_answer(signer, "p", args, {}, [], [], "s")
        return
    query = sign_answer(signer, "p", args, {}, [], [], "s")["receipt"]["query"]
    assert json.dumps(query) == json.dumps(expected)
    assert query_digest("p", query) == query_digest("p", expected)


def test_verify_nan_in_saved_doc_does_not_raise(signed: dict[str, Any]) -> None:
    text = json.dumps(signed).replace("0.71", "NaN")  # json.loads accepts NaN
    assert not verify_answer(json.loads(text)).ok
    doc = copy.deepcopy(signed)
    doc["receipt"]["query"]["window"] = [float("nan"), 1]
    assert not verify_answer(doc).ok


@pytest.mark.parametrize("doc", [{}, {"receipt": "x"}, {"receipt": []}, {"receipt": None}])
def test_verify_never_raises_on_malformed(doc: dict[str, Any]) -> None:
    assert not verify_answer(doc).ok


def test_verify_garbage_field_types_do_not_raise(signed: dict[str, Any]) -> None:
    for field in sorted(signed["receipt"]):
        for junk in (None, 1, [], {}, "zz"):
            if junk == signed["receipt"][field]:
                continue
            doc = copy.deepcopy(signed)
            doc["receipt"][field] = junk
            assert not verify_answer(doc).ok, (field, junk)
