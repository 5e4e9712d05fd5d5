"""Query digests, answer digests and signed receipts.

Everything here is pure except :meth:`Signer.load_or_create`, which reads or
creates the signing key file.

Digests
-------
Query and answer digests are blake3 over the canonical CBOR of
:mod:`store.facts` (the encoding fact ids use): the query digest hashes
``{primitive, args}`` with ``None`` values dropped, the answer digest hashes
the answer without its ``receipt`` (nulls kept). Verification works on the
parsed JSON value: whitespace and key order of a saved file do not matter, any
change of a value, a key, a type (``1`` -> ``1.0``) does. Values without a
canonical form raise :class:`api.errors.InvalidArgument` here, with the code
of the store error (``invalid_number``, ``invalid_value``).

Receipt preimage (version 1)
----------------------------
Each item below is written as a 4-byte big-endian length followed by its bytes
(``lp(x) = u32be(len(x)) || x``); lists are ``u32be(count)`` followed by ``lp``
of each element::

    lp(b"earthmem.receipt.v1")
    lp(request_id utf-8)
    lp(served_at utf-8)               # RFC 3339 UTC, "YYYY-MM-DDTHH:MM:SS.mmmZ"
    lp(primitive utf-8)
    lp(query_digest, 32 raw bytes)    # blake3(cbor({primitive, args}))
    u32be(n) lp(cell_1) .. lp(cell_n)         # sorted, unique, utf-8
    u32be(m) lp(fact_1) .. lp(fact_m)         # sorted, unique, utf-8
    lp(snapshot_id utf-8)
    lp(answer_digest, 32 raw bytes)   # blake3(cbor(answer without "receipt"))
    lp(key_id utf-8)

The signed message is ``blake3(preimage)`` (32 bytes); the signature is
ed25519 over it. The query arguments travel in the receipt (``receipt.query``,
normalised) so that ``verify_answer`` can recompute the query digest offline.
"""

from __future__ import annotations

import base64
import json
import os
import re
import struct
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Self

from nacl.exceptions import BadSignatureError
from nacl.signing import VerifyKey

from api.errors import InvalidArgument, ReceiptKeyError, from_store_error
from store.errors import CanonicalFormError, SigningKeyError
from store.facts import FACT_ID_PREFIX, canonical_cbor, digest, fast_cbor, normalise
from store.keys import KEY_FILE, Ed25519Key, key_id_of

__all__ = [
    "DOMAIN_TAG",
    "KEY_FILE",
    "RECEIPT_VERSION",
    "Signer",
    "VerifyResult",
    "answer_digest",
    "query_digest",
    "receipt_preimage",
    "sign_answer",
    "signed_answer_of",
    "trusted_keys",
    "verify_answer",
    "verify_saved",
]

RECEIPT_VERSION = 1
"""Version of the receipt layout; bump together with :data:`DOMAIN_TAG`."""

DOMAIN_TAG = b"earthmem.receipt.v1"
"""Domain-separation tag, the first item of every receipt preimage."""

_U32 = struct.Struct(">I")
_HEX64 = re.compile(r"[0-9a-f]{64}")
_HEX128 = re.compile(r"[0-9a-f]{128}")
_SERVED_AT = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d{1,9})?Z")
_RECEIPT_FIELDS = frozenset(
    {
        "version",
        "request_id",
        "served_at",
        "primitive",
        "query",
        "query_digest",
        "cells",
        "fact_ids",
        "snapshot_id",
        "answer_digest",
        "key_id",
        "public_key",
        "signature",
    }
)


# --------------------------------------------------------------------------- query and answer digests


def query_digest(primitive: str, args: Mapping[str, Any]) -> bytes:
    """Digest of a query: blake3 of the canonical CBOR of ``{primitive, args}``.

    ``None`` values are dropped (at every depth of mappings) and keys sorted, so
    an omitted optional argument and an explicit null give the same digest.

    Args:
        primitive: Name of the query, e.g. ``"did_change"``.
        args: The query arguments as JSON-shaped data.

    Returns:
        32 raw bytes.

    Raises:
        InvalidArgument: An argument value has no canonical form (NaN, ...).
    """
    if type(args) is dict and type(primitive) is str:
        fast = fast_cbor({"primitive": primitive, "args": args}, allow_bytes=True, drop_none=True)
        if fast is not None:
            return digest(fast)
    try:
        return digest(
            canonical_cbor({"primitive": primitive, "args": normalise(dict(args), drop_none=True)})
        )
    except CanonicalFormError as exc:
        raise from_store_error(exc) from exc


class _NotPlain(Exception):
    """The value needs :func:`normalise` and the JSON round trip."""


def _plain_query(value: Any) -> Any:
    """What ``_json_round_trip(normalise(value, drop_none=True))`` gives for a tree of exact
    JSON types (dict with str keys, list, str, int, finite float, bool, None): a copy with
    the None values of its maps dropped, in the same key order. Anything else (a tuple, a
    numpy value, a subclass, NaN) raises :class:`_NotPlain`: the reference path takes it."""
    t = type(value)
    if t is dict:
        out: dict[str, Any] = {}
        for k, v in value.items():
            if type(k) is not str:
                raise _NotPlain
            if v is not None:
                out[k] = _plain_query(v)
        return out
    if t is list:
        return [_plain_query(v) for v in value]
    if t is str or t is int or t is bool or value is None:
        return value
    if t is float and value - value == 0.0:
        return value
    raise _NotPlain


def _json_round_trip(value: Any, what: str) -> Any:
    try:
        return json.loads(json.dumps(value, allow_nan=False))
    except (TypeError, ValueError) as exc:
        raise InvalidArgument(f"{what} is not plain JSON: {exc}", code=f"invalid_{what}") from exc


def answer_digest(answer: Mapping[str, Any]) -> bytes:
    """Digest of an answer body: blake3 of canonical CBOR of it without ``receipt``.

    The answer is taken through a JSON round trip first (``allow_nan=False``),
    so the digest of a saved and reloaded document is unchanged.

    Args:
        answer: The answer document (with or without its receipt).

    Returns:
        32 raw bytes.

    Raises:
        InvalidArgument: The answer is not JSON-serialisable or holds NaN/inf.
    """
    body = {k: v for k, v in answer.items() if k != "receipt"}
    # Plain JSON values come back from a JSON round trip unchanged, so the fast path
    # encodes them directly (bytes are not JSON: they take the slow path, which refuses them).
    fast = fast_cbor(body, allow_bytes=False)
    if fast is not None:
        return digest(fast)
    try:
        return digest(canonical_cbor(_json_round_trip(body, "answer")))
    except CanonicalFormError as exc:
        raise from_store_error(exc) from exc


# --------------------------------------------------------------------------- preimage


def _lp(data: bytes) -> bytes:
    return _U32.pack(len(data)) + data


def _lp_list(items: Sequence[str]) -> bytes:
    return _U32.pack(len(items)) + b"".join(_lp(s.encode("utf-8")) for s in items)


def receipt_preimage(
    *,
    request_id: str,
    served_at: str,
    primitive: str,
    query_digest: bytes,
    cells: Sequence[str],
    fact_ids: Sequence[str],
    snapshot_id: str,
    answer_digest: bytes,
    key_id: str,
) -> bytes:
    """The exact bytes whose blake3 digest a receipt signs (layout in module docstring).

    ``cells`` and ``fact_ids`` must already be sorted and unique (the receipt
    stores them that way); this function does not reorder them.
    """
    return b"".join(
        [
            _lp(DOMAIN_TAG),
            _lp(request_id.encode("utf-8")),
            _lp(served_at.encode("utf-8")),
            _lp(primitive.encode("utf-8")),
            _lp(query_digest),
            _lp_list(cells),
            _lp_list(fact_ids),
            _lp(snapshot_id.encode("utf-8")),
            _lp(answer_digest),
            _lp(key_id.encode("utf-8")),
        ]
    )


# --------------------------------------------------------------------------- keys


@dataclass(frozen=True)
class Signer(Ed25519Key):
    """The receipt signer: the data directory's key (:mod:`store.keys`) and its public document."""

    @classmethod
    def load_or_create(cls, data_dir: str | os.PathLike[str]) -> Self:
        """Load the signer of a data directory, creating its key on first run.

        Raises:
            ReceiptKeyError: The key file is malformed or readable by group/others.
        """
        try:
            return super().load_or_create(data_dir)
        except SigningKeyError as exc:
            raise ReceiptKeyError(exc.message, code=exc.code) from exc

    def public_info(self) -> dict[str, Any]:
        """The document served at ``/.well-known/earthmem.json``."""
        return {
            "receipt_version": RECEIPT_VERSION,
            "domain": DOMAIN_TAG.decode(),
            "fact_id_prefix": FACT_ID_PREFIX,
            "keys": [
                {
                    "key_id": self.key_id,
                    "alg": "ed25519",
                    "public_key": self.public_key.hex(),
                    "public_key_b64": base64.b64encode(self.public_key).decode(),
                    "use": "receipt",
                }
            ],
        }


# --------------------------------------------------------------------------- sign / verify


_second: tuple[int, str] = (-1, "")  # (unix second, its "YYYY-MM-DDTHH:MM:SS." text)


def _served_at_now() -> str:
    global _second
    sec, ns = divmod(time.time_ns(), 1_000_000_000)
    cached = _second  # one tuple: threads never see a second with another's text
    if cached[0] != sec:
        cached = (sec, time.strftime("%Y-%m-%dT%H:%M:%S.", time.gmtime(sec)))
        _second = cached
    return f"{cached[1]}{ns // 1_000_000:03d}Z"


_UUID4_CLEAR = ~((0xF000 << 64) | (0xC000 << 48))
_UUID4_SET = (0x4000 << 64) | (0x8000 << 48)


def _request_id() -> str:
    """A random request id: ``uuid.uuid4().hex`` (version 4, RFC 4122 variant), made from
    ``os.urandom`` as :func:`uuid.uuid4` makes it, without building a ``UUID`` object."""
    n = int.from_bytes(os.urandom(16), "big") & _UUID4_CLEAR | _UUID4_SET
    return f"{n:032x}"


def _sorted_unique(items: Iterable[str], what: str) -> list[str]:
    out = set()
    for item in items:
        if not isinstance(item, str):
            raise InvalidArgument(f"{what} must be strings, got {item!r}", code="invalid_receipt")
        out.add(item)
    return sorted(out)


def sign_answer(
    signer: Signer,
    primitive: str,
    args: Mapping[str, Any],
    answer: Mapping[str, Any],
    cells: Iterable[str],
    fact_ids: Iterable[str],
    snapshot_id: str,
    request_id: str | None = None,
    served_at: str | None = None,
) -> dict[str, Any]:
    """Attach a signed receipt to an answer.

    Args:
        signer: The receipt signer.
        primitive: Query name, e.g. ``"did_change"``.
        args: The query arguments as received (JSON-shaped); stored normalised
            under ``receipt.query`` so the digest can be recomputed offline.
        answer: The answer body (JSON-serialisable, no NaN, no ``receipt`` key).
        cells: cell64 texts the answer read (stored sorted and unique).
        fact_ids: Ids of the facts the answer rests on (stored sorted and unique).
        snapshot_id: The store snapshot the answer read.
        request_id: Caller- or server-chosen id; a random one if omitted.
        served_at: RFC 3339 UTC time ending in ``Z``; now if omitted.

    Returns:
        A new dict: the answer's fields plus ``"receipt"``.

    Raises:
        InvalidArgument: The answer already has a receipt, is not JSON, or an
            argument is malformed.
    """
    if "receipt" in answer:
        raise InvalidArgument("answer already carries a receipt", code="invalid_answer")
    served = served_at if served_at is not None else _served_at_now()
    if served_at is not None and not _SERVED_AT.fullmatch(served):
        raise InvalidArgument(
            f"served_at must be RFC 3339 UTC ending in Z, got {served!r}", code="invalid_receipt"
        )
    req = request_id if request_id is not None else _request_id()
    try:
        query = _plain_query(dict(args))
    except (_NotPlain, RecursionError):
        try:
            query = _json_round_trip(normalise(dict(args), drop_none=True), "query")
        except CanonicalFormError as exc:
            raise from_store_error(exc) from exc
    q_digest = query_digest(primitive, query)
    a_digest = answer_digest(answer)
    cell_list = _sorted_unique(cells, "cells")
    fact_list = _sorted_unique(fact_ids, "fact ids")
    key_id = signer.key_id
    preimage = receipt_preimage(
        request_id=req,
        served_at=served,
        primitive=primitive,
        query_digest=q_digest,
        cells=cell_list,
        fact_ids=fact_list,
        snapshot_id=snapshot_id,
        answer_digest=a_digest,
        key_id=key_id,
    )
    signature = signer.sign(digest(preimage))
    receipt = {
        "version": RECEIPT_VERSION,
        "request_id": req,
        "served_at": served,
        "primitive": primitive,
        "query": query,
        "query_digest": q_digest.hex(),
        "cells": cell_list,
        "fact_ids": fact_list,
        "snapshot_id": snapshot_id,
        "answer_digest": a_digest.hex(),
        "key_id": key_id,
        "public_key": signer.public_key.hex(),
        "signature": signature.hex(),
    }
    return {**answer, "receipt": receipt}


@dataclass(frozen=True)
class VerifyResult:
    """Outcome of checking a saved answer."""

    ok: bool
    """True when every check passed."""
    reason: str
    """``"ok"`` or the first check that failed."""
    key_id: str | None = None
    """Key id named by the receipt, when readable."""
    key_trusted: bool = False
    """True when the key came from the caller's trusted set, not only from the document."""


def _typed_json(value: Any) -> str:
    # json.dumps distinguishes 1 from 1.0 and True from 1, unlike ==.
    return json.dumps(value, sort_keys=True, allow_nan=False)


def _fail(reason: str, key_id: str | None = None) -> VerifyResult:
    return VerifyResult(ok=False, reason=reason, key_id=key_id)


def _str_field(receipt: Mapping[str, Any], name: str) -> str | None:
    value = receipt.get(name)
    return value if isinstance(value, str) else None


def _canonical_list(receipt: Mapping[str, Any], name: str) -> list[str] | None:
    value = receipt.get(name)
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        return None
    # Stored order must already be canonical, otherwise a reordering would verify.
    return value if value == sorted(set(value)) else None


def verify_answer(
    doc: Mapping[str, Any],
    public_keys: Mapping[str, bytes] | None = None,
) -> VerifyResult:
    """Check a saved answer and its receipt, recomputing every digest.

    Checks, in order: receipt present and has exactly the v1 fields; every field
    well typed and in canonical form (sorted lists, lowercase hex); the key
    (from ``public_keys`` when given, else the embedded key) matches ``key_id``;
    the query digest recomputed from ``receipt.query``; the answer digest
    recomputed from the document without its receipt; the ed25519 signature
    over the preimage digest.

    Args:
        doc: The answer document, e.g. ``json.load`` of a saved answer.
        public_keys: Trusted keys by key id (raw 32 bytes). When given, a
            receipt signed by any other key fails. When None, the key embedded
            in the receipt is used: that proves integrity, not provenance.

    Returns:
        The result; never raises for malformed documents.
    """
    receipt = doc.get("receipt") if isinstance(doc, Mapping) else None
    if not isinstance(receipt, Mapping):
        return _fail("no receipt")
    fields = set(receipt)
    if fields != _RECEIPT_FIELDS:
        extra = sorted(fields - _RECEIPT_FIELDS)
        missing = sorted(_RECEIPT_FIELDS - fields)
        return _fail(f"receipt fields differ from v1 (missing {missing}, unexpected {extra})")
    version = receipt["version"]
    if type(version) is not int or version != RECEIPT_VERSION:
        return _fail(f"unsupported receipt version {version!r}")
    key_id = _str_field(receipt, "key_id")
    strings = {
        n: _str_field(receipt, n)
        for n in ("request_id", "served_at", "primitive", "snapshot_id", "key_id")
    }
    bad = [n for n, v in strings.items() if v is None]
    if bad:
        return _fail(f"receipt fields not strings: {bad}", key_id)
    if not _SERVED_AT.fullmatch(strings["served_at"] or ""):
        return _fail("served_at is not RFC 3339 UTC", key_id)
    hexes = {n: _str_field(receipt, n) or "" for n in ("query_digest", "answer_digest")}
    if not all(_HEX64.fullmatch(v) for v in hexes.values()):
        return _fail("digest fields are not 64 lowercase hex characters", key_id)
    signature_hex = _str_field(receipt, "signature") or ""
    if not _HEX128.fullmatch(signature_hex):
        return _fail("signature is not 128 lowercase hex characters", key_id)
    public_hex = _str_field(receipt, "public_key") or ""
    if not _HEX64.fullmatch(public_hex):
        return _fail("public_key is not 64 lowercase hex characters", key_id)
    cells = _canonical_list(receipt, "cells")
    facts = _canonical_list(receipt, "fact_ids")
    if cells is None or facts is None:
        return _fail("cells / fact_ids are not sorted unique string lists", key_id)

    embedded = bytes.fromhex(public_hex)
    if key_id_of(embedded) != key_id:
        return _fail("key_id does not match the embedded public key", key_id)
    trusted = public_keys is not None
    if public_keys is not None:
        known = public_keys.get(key_id or "")
        if known is None:
            return _fail(f"key {key_id} is not among the trusted keys", key_id)
        if bytes(known) != embedded:
            return _fail("embedded public key differs from the trusted key", key_id)

    query = receipt["query"]
    if not isinstance(query, Mapping):
        return _fail("receipt.query is not an object", key_id)
    try:
        if _typed_json(normalise(dict(query), drop_none=True)) != _typed_json(query):
            return _fail("receipt.query is not in normalised form", key_id)
        q_digest = query_digest(strings["primitive"] or "", query)
        a_digest = answer_digest(doc)
    except (ValueError, TypeError) as exc:  # InvalidArgument, CanonicalFormError: ValueErrors
        return _fail(f"cannot recompute digests: {exc}", key_id)
    if q_digest.hex() != hexes["query_digest"]:
        return _fail("query digest does not match receipt.query", key_id)
    if a_digest.hex() != hexes["answer_digest"]:
        return _fail("answer digest does not match the answer body", key_id)

    preimage = receipt_preimage(
        request_id=strings["request_id"] or "",
        served_at=strings["served_at"] or "",
        primitive=strings["primitive"] or "",
        query_digest=q_digest,
        cells=cells,
        fact_ids=facts,
        snapshot_id=strings["snapshot_id"] or "",
        answer_digest=a_digest,
        key_id=key_id or "",
    )
    try:
        VerifyKey(embedded).verify(digest(preimage), bytes.fromhex(signature_hex))
    except BadSignatureError:
        return _fail("signature does not verify", key_id)
    except Exception as exc:  # malformed key material (e.g. not a curve point)
        return _fail(f"signature check failed: {type(exc).__name__}", key_id)
    return VerifyResult(ok=True, reason="ok", key_id=key_id, key_trusted=trusted)


def signed_answer_of(doc: Any) -> Any:
    """The signed answer inside a saved document: an intent answer's ``result``, else ``doc``."""
    if isinstance(doc, Mapping) and "receipt" not in doc and isinstance(doc.get("result"), Mapping):
        return doc["result"]
    return doc


def trusted_keys(public_key_hex: str | None) -> dict[str, bytes] | None:
    """``{key_id: key}`` of one trusted ed25519 public key given as 64 hex (None: none given).

    Raises:
        InvalidArgument: not 64 hex characters (``invalid_key``).
    """
    if public_key_hex is None:
        return None
    try:
        raw = bytes.fromhex(public_key_hex)
    except ValueError:
        raw = b""
    if len(raw) != 32:
        raise InvalidArgument(
            "the trusted key must be 64 hex characters (a raw ed25519 public key)",
            code="invalid_key",
        )
    return {key_id_of(raw): raw}


def verify_saved(doc: Any, public_key_hex: str | None = None) -> VerifyResult:
    """The check of ``earthmem verify`` and the ``verify_receipt`` primitive, one for both.

    Unwraps an intent answer (:func:`signed_answer_of`), then :func:`verify_answer`
    with the trusted key when one is given.

    Raises:
        InvalidArgument: a malformed trusted key (``invalid_key``).
    """
    return verify_answer(signed_answer_of(doc), trusted_keys(public_key_hex))
