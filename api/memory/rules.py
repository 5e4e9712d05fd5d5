"""The memory writer's rules: types, confidence, scope, sizes — what the reference writer says.

* Confidence, when omitted, comes from ``asserted_by`` (user 1.0, test 0.95,
  source/git/doc 0.9, runtime 0.7, agent 0.6); a hypothesis is capped at 0.4
  whatever was asked (the answer says so); an observation keeps its asserter's.
* An invariant needs ``metadata.verificationMethod`` and ``metadata.condition``
  (a claim, checked like ``claim``); a decision without ``metadata.rationale`` is
  accepted with a warning.
* Scope: ``user``, ``project``, ``path``, ``task``, ``team`` or ``{kind, value}``;
  default ``project``. ``user`` scope is the caller's actor. Isolation is the
  token's project; scope is a label inside it, which recall's ``scopes`` select:
  project = items scoped to the project, personal = items scoped ``user`` written
  by the caller's actor, team = items scoped ``team`` or ``task``.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from api.errors import InvalidArgument
from api.memory.auth import Caller
from api.memory.models import MAX_METADATA_BYTES, MAX_TAG_CHARS, MemoryCreateIn, MemoryListIn
from store.errors import StoreError
from store.facts import canonical_cbor, digest
from store.memory.model import PLACELESS_TYPES, NewItem
from store.tslot import parse_when

__all__ = [
    "CONFIDENCE_BY_ASSERTER",
    "HYPOTHESIS_CAP",
    "SCOPE_KINDS",
    "Draft",
    "complete_item",
    "request_digest",
    "valid_time",
]

CONFIDENCE_BY_ASSERTER: Mapping[str, float] = {
    "user": 1.0,
    "test": 0.95,
    "source": 0.9,
    "git": 0.9,
    "doc": 0.9,
    "runtime": 0.7,
    "agent": 0.6,
}
"""Confidence of an item whose writer gave none, by who asserted it."""

HYPOTHESIS_CAP = 0.4
"""Highest confidence a hypothesis may carry (never promoted automatically)."""

SCOPE_KINDS = ("user", "project", "path", "task", "team")
"""Scope labels (inside the token's project)."""


@dataclass(frozen=True)
class Draft:
    """A validated item before its place, evidence and claim are resolved."""

    fields: dict[str, Any]
    placeless: bool
    warnings: list[str] = field(default_factory=list)
    applied: dict[str, Any] = field(default_factory=dict)
    """Defaults and caps applied (the answer reports them)."""

    def build(self, **resolved: Any) -> NewItem:
        """The item to store, with its resolved place, evidence, valid time and claim."""
        return NewItem(**self.fields, **resolved)


def _scope(raw: str | Mapping[str, Any] | None, caller: Caller) -> dict[str, Any]:
    if raw is None:
        return {"kind": "project", "value": None}
    kind: Any
    value: Any
    if isinstance(raw, str):
        kind, value = raw, None
    else:
        kind, value = raw.get("kind"), raw.get("value")
        extra = set(raw) - {"kind", "value"}
        if extra:
            raise InvalidArgument(
                f"scope takes kind and value, not {sorted(extra)}", code="invalid_scope"
            )
    if kind not in SCOPE_KINDS:
        raise InvalidArgument(
            f"unknown scope {kind!r}; valid: {', '.join(SCOPE_KINDS)}"[:200], code="invalid_scope"
        )
    if value is not None and (not isinstance(value, str) or len(value) > 500):
        raise InvalidArgument("scope value must be a string of <= 500 chars", code="invalid_scope")
    if kind == "user":
        value = caller.actor
    return {"kind": kind, "value": value}


def complete_item(args: MemoryCreateIn, caller: Caller) -> Draft:
    """Check the item's own fields and complete them with the documented defaults.

    Raises:
        InvalidArgument: ``invalid_tags``, ``metadata_too_large``, ``invalid_metadata``,
            ``invariant_needs_verification``, ``invalid_scope``.
    """
    warnings: list[str] = []
    applied: dict[str, Any] = {}
    tags = list(dict.fromkeys(t.strip() for t in args.tags))
    if not all(tags) or any(len(t) > MAX_TAG_CHARS for t in tags):
        raise InvalidArgument(
            f"tags must be non-empty strings of at most {MAX_TAG_CHARS} characters",
            code="invalid_tags",
        )
    try:
        meta_bytes = len(json.dumps(args.metadata, separators=(",", ":"), allow_nan=False))
    except (TypeError, ValueError) as exc:
        raise InvalidArgument(
            f"metadata is not plain JSON: {exc}", code="invalid_metadata"
        ) from exc
    if meta_bytes > MAX_METADATA_BYTES:
        raise InvalidArgument(
            f"metadata is {meta_bytes} bytes; at most {MAX_METADATA_BYTES}",
            code="metadata_too_large",
        )
    if args.type == "invariant":
        missing = [k for k in ("verificationMethod", "condition") if not args.metadata.get(k)]
        if missing:
            raise InvalidArgument(
                f"an invariant needs metadata.{' and metadata.'.join(missing)}",
                code="invariant_needs_verification",
                details={"missing": missing},
            )
        if not isinstance(args.metadata["condition"], dict):
            raise InvalidArgument(
                "metadata.condition is a claim {band, op, value, ...}", code="invalid_claim"
            )
    if args.type == "decision" and not args.metadata.get("rationale"):
        warnings.append("a decision without metadata.rationale: say why it was made")
    confidence = args.confidence
    if confidence is None:
        confidence = CONFIDENCE_BY_ASSERTER[args.asserted_by]
        applied["confidence"] = f"{confidence} from asserted_by={args.asserted_by}"
    if args.type == "hypothesis" and confidence > HYPOTHESIS_CAP:
        warnings.append(f"hypothesis confidence {confidence} capped at {HYPOTHESIS_CAP}")
        applied["confidence_cap"] = HYPOTHESIS_CAP
        confidence = HYPOTHESIS_CAP
    if "importance" not in args.model_fields_set:
        applied["importance"] = args.importance
    scope = _scope(args.scope, caller)
    if args.scope is None:
        applied["scope"] = "project"
    fields = {
        "type": args.type,
        "title": args.title.strip(),
        "statement": args.statement.strip(),
        "tags": tuple(tags),
        "details": args.details,
        "confidence": float(confidence),
        "importance": float(args.importance),
        "related_memory_ids": tuple(dict.fromkeys(args.related_memory_ids)),
        "metadata": dict(args.metadata),
        "asserted_by": args.asserted_by,
        "applicability": args.applicability,
        "scope": scope,
        "actor": args.actor or caller.actor,
        "session": args.session,
    }
    return Draft(fields, args.type in PLACELESS_TYPES, warnings, applied)


def _when(text: str, name: str) -> dt.datetime:
    try:
        return parse_when(text)
    except StoreError as exc:
        raise InvalidArgument(f"{name}: {exc}", code="invalid_date") from exc


def valid_time(
    args: MemoryCreateIn | MemoryListIn,
) -> tuple[dt.datetime | None, dt.datetime | None]:
    """The valid-time interval of an item (or the instant of a list filter).

    Raises:
        InvalidArgument: ``invalid_date``; ``invalid_valid_time`` for an instant given
            with an interval, or an interval that ends before it starts.
    """
    if isinstance(args, MemoryListIn):
        at = _when(args.valid_at, "valid_at") if args.valid_at else None
        return at, at
    if args.valid_at is not None:
        if args.valid_from is not None or args.valid_to is not None:
            raise InvalidArgument(
                "give valid_at, or valid_from/valid_to, not both", code="invalid_valid_time"
            )
        at = _when(args.valid_at, "valid_at")
        return at, at
    start = _when(args.valid_from, "valid_from") if args.valid_from else None
    end = _when(args.valid_to, "valid_to") if args.valid_to else None
    if start is not None and end is not None and end < start:
        raise InvalidArgument("valid_to is before valid_from", code="invalid_valid_time")
    return start, end


def request_digest(primitive: str, args: Any) -> str:
    """Digest of a write's content (its arguments without ``request_id``): idempotency keys
    compare it, so the same operation id with other content is a conflict."""
    content = args.model_dump(mode="json", exclude={"request_id"}, exclude_none=True)
    return digest(canonical_cbor({"primitive": primitive, "args": content})).hex()
