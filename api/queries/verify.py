"""verify_receipt: the server checks a saved answer's receipt, as ``earthmem verify`` does.

One check for both (:func:`api.receipts.verify_saved`); a tampered answer is an
answer ``{valid: false, reason}``, a document that is no answer at all (no
``receipt`` object) is the typed ``invalid_answer``.
"""

from __future__ import annotations

from collections.abc import Mapping

from api.context import ServiceContext
from api.errors import InvalidArgument
from api.models.cite import VerifyReceiptAnswer, VerifyReceiptBody, VerifyReceiptIn
from api.queries._common import finish
from api.receipts import signed_answer_of, verify_saved
from api.registry import primitive

__all__ = ["RECEIPT_CHECK_SNAPSHOT", "verify_receipt"]

RECEIPT_CHECK_SNAPSHOT = "receipt-check:v1"
"""The receipt's snapshot of a verify_receipt answer (it reads no store)."""


@primitive(
    "verify_receipt",
    VerifyReceiptIn,
    VerifyReceiptAnswer,
    "Check a saved answer's signed receipt on the server (the same check as `earthmem verify`).",
    "Recomputes the query and answer digests and checks the ed25519 signature (the protocol's "
    "verify). A tampered answer gives valid: false with the failed check as reason (not an "
    "error); a document without a receipt object is invalid_answer. public_key makes the "
    "check one of provenance too.",
)
def verify_receipt(ctx: ServiceContext, args: VerifyReceiptIn) -> VerifyReceiptAnswer:
    """verify_receipt {answer, public_key?}."""
    doc = signed_answer_of(args.answer)
    receipt = doc.get("receipt") if isinstance(doc, Mapping) else None
    if not isinstance(receipt, Mapping):
        raise InvalidArgument(
            "answer has no receipt object (send a saved answer as returned, or an intent "
            "answer with its result)",
            code="invalid_answer",
        )
    result = verify_saved(doc, args.public_key)
    primitive_name = receipt.get("primitive")
    snapshot = receipt.get("snapshot_id")
    answer = {
        "valid": result.ok,
        "reason": result.reason,
        "key_id": result.key_id,
        "key_trusted": result.key_trusted,
        "signed_by_this_server": result.ok and result.key_id == ctx.signer.key_id,
        "primitive": primitive_name if isinstance(primitive_name, str) else None,
        "checked_snapshot_id": snapshot if isinstance(snapshot, str) else None,
    }
    return finish(
        ctx,
        "verify_receipt",
        args,
        VerifyReceiptBody,
        VerifyReceiptAnswer,
        answer,
        [],
        RECEIPT_CHECK_SNAPSHOT,
    )
