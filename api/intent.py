"""The intent router, and the dispatch both adapters share.

An agent states *what it wants* in one object, ``{"type": ..., <fields>}``; the
router picks the primitive, maps the fields, runs it in the same call and
returns the answer together with the plan it ran. A missing or unknown
``type`` is not an error: the answer is a ``needs_intent_type`` envelope that
lists the valid types and each type's fields. Fields that belong to another
intent (or to none) are ignored and named in ``ignored_fields``.

The same module holds the small dispatch layer that REST, MCP and the CLI use
to call a primitive (:func:`call_primitive`) and to turn an exception into the
error body they all send (:func:`describe_error`), so the three speak with one
voice: the same codes, messages and details.
"""

from __future__ import annotations

import importlib
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from os import PathLike
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from api.errors import ApiError, InvalidArgument, NotFound, from_store_error
from api.registry import PRIMITIVES
from store.errors import StoreError

__all__ = [
    "INTENTS",
    "INTENT_TYPES",
    "ContextProvider",
    "IntentAnswer",
    "IntentRequest",
    "IntentSpec",
    "PlanStep",
    "call_primitive",
    "describe_error",
    "ensure_primitives",
    "intent_table",
    "run_intent",
]

SERVICE_MODULE = "api.service"
"""The module whose import registers the primitives."""


# --------------------------------------------------------------------------- dispatch


def ensure_primitives() -> dict[str, Any]:
    """Import :mod:`api.service` (which registers the primitives) if it exists.

    Returns:
        The registry (:data:`api.registry.PRIMITIVES`).

    Raises:
        ImportError: ``api.service`` exists but fails to import (a real bug,
            not hidden).
    """
    try:
        importlib.import_module(SERVICE_MODULE)
    except ModuleNotFoundError as exc:
        if exc.name != SERVICE_MODULE:
            raise
    return PRIMITIVES


class ContextProvider:
    """Creates the service context once, on first use, and shares it.

    Args:
        source: A ready context object, a data directory (``str`` or path), or
            a zero-argument factory returning the context.
    """

    def __init__(self, source: Any) -> None:
        self._lock = threading.Lock()
        self._ctx: Any = None
        self._factory: Callable[[], Any] | None
        if isinstance(source, str | PathLike):
            data_dir = source
            self._factory = lambda: _service_context(data_dir)
        elif callable(source):
            self._factory = source
        else:
            self._ctx = source
            self._factory = None

    def get(self) -> Any:
        """The context (created on the first call, thread-safely)."""
        if self._ctx is None:
            with self._lock:
                if self._ctx is None:
                    assert self._factory is not None
                    self._ctx = self._factory()
        return self._ctx


def _service_context(data_dir: str | PathLike[str]) -> Any:
    from api.context import ServiceContext

    return ServiceContext(data_dir)


def call_primitive(ctx: Any, name: str, args: Mapping[str, Any] | BaseModel) -> dict[str, Any]:
    """Validate ``args`` against a primitive's input model, run it, return its answer.

    Args:
        ctx: The service context.
        name: Primitive name, e.g. ``"did_change"``.
        args: JSON-shaped arguments, or an instance of the input model
            (already validated, used as is).

    Returns:
        ``answer.model_dump(mode="json")``: exactly the dict the receipt signs.

    Raises:
        NotFound: No primitive of that name (code ``unknown_primitive``).
        pydantic.ValidationError: The arguments do not fit the input model.
        ApiError, StoreError: Raised by the primitive.
    """
    prim = PRIMITIVES.get(name)
    if prim is None:
        raise NotFound(
            f"no primitive named {name!r}",
            code="unknown_primitive",
            details={"available": sorted(PRIMITIVES)},
        )
    if isinstance(args, prim.input_model):
        model = args
    elif isinstance(args, BaseModel):
        model = prim.input_model.model_validate(args.model_dump(mode="json", exclude_unset=True))
    else:
        model = prim.input_model.model_validate(dict(args))
    answer = prim.fn(ctx, model)
    if isinstance(answer, BaseModel):
        from api.queries._common import signed_dump

        signed = signed_dump(answer)  # the dict finish() signed: no second dump
        return signed if signed is not None else answer.model_dump(mode="json")
    return dict(answer)


def _error(code: str, message: str, details: Mapping[str, Any] | None = None) -> dict[str, Any]:
    body: dict[str, Any] = {"code": code, "message": message}
    if details:
        body["details"] = dict(details)
    return {"error": body}


def _plain(value: Any) -> Any:
    """Keep a value only if it is small plain JSON (error details echo caller data)."""
    if value is None or isinstance(value, bool | int | float):
        return value
    if isinstance(value, str):
        return value if len(value) <= 200 else value[:200] + "..."
    return None


def validation_error_body(errors: Sequence[Mapping[str, Any]]) -> tuple[int, dict[str, Any]]:
    """The error body for pydantic-style field errors.

    When a field validator raised a domain error (a ``StoreError`` or an
    ``ApiError``, e.g. ``InvalidCell`` from parsing a cell64), its code and
    status win, so a bad cell64 answers ``invalid_cell`` wherever it is caught.

    Args:
        errors: ``ValidationError.errors()`` or ``RequestValidationError.errors()``.

    Returns:
        ``(status, {"error": {code, message, details: {errors: [...]}}})``.
    """
    fields: list[dict[str, Any]] = []
    domain: ApiError | StoreError | None = None
    for err in errors[:50]:
        cause = (err.get("ctx") or {}).get("error")
        if domain is None and isinstance(cause, ApiError | StoreError):
            domain = cause
        item: dict[str, Any] = {
            "loc": [p if isinstance(p, int) else str(p) for p in err.get("loc", ())],
            "msg": str(err.get("msg", "")),
            "type": str(err.get("type", "")),
        }
        fields.append(item)
    details = {"errors": fields}
    if isinstance(domain, StoreError):
        domain = from_store_error(domain)
    if isinstance(domain, ApiError):
        return domain.status, _error(domain.code, domain.message, {**domain.details, **details})
    if any(f["type"] == "json_invalid" for f in fields):
        return 422, _error("invalid_argument", "the request body is not valid JSON", details)
    first = fields[0] if fields else {"loc": [], "msg": "invalid arguments"}
    where = ".".join(str(p) for p in first["loc"] if p != "body") or "arguments"
    message = f"{where}: {first['msg']}"
    if first["loc"] == ["body"]:
        message += " (send a JSON object with Content-Type: application/json)"
    return 422, _error("invalid_argument", message, details)


def describe_error(exc: BaseException) -> tuple[int, dict[str, Any]] | None:
    """Map an exception to ``(http_status, {"error": {code, message, details?}})``.

    ``ApiError`` keeps its status and code; a ``StoreError`` keeps its code and
    gets the status of :func:`api.errors.from_store_error` (422 for bad input
    such as ``invalid_cell``, 404 unknown snapshot, 503 store missing), the
    same status the service layer uses when it converts one itself; a pydantic
    ``ValidationError`` is a 422 ``invalid_argument`` (or the domain error a
    validator raised). Anything else returns None: an internal error the
    adapter reports without detail.
    """
    if isinstance(exc, StoreError):
        exc = from_store_error(exc)
    if isinstance(exc, ApiError):
        return exc.status, {"error": exc.to_dict()}
    if isinstance(exc, ValidationError):
        return validation_error_body(exc.errors(include_url=False))
    return None


# --------------------------------------------------------------------------- intents


@dataclass(frozen=True)
class IntentSpec:
    """One row of the intent table."""

    name: str
    """The intent ``type``."""
    primitive: str
    """The primitive the plan runs."""
    needs: tuple[str, ...]
    """Fields that must all be present."""
    one_of: tuple[str, ...] = ()
    """Fields of which at least one must be present (empty: no such group)."""
    optional: tuple[str, ...] = ()
    """Fields read when present."""
    aliases: Mapping[str, str] = field(default_factory=dict)
    """Accepted alternative names: alias -> field (used when the field is absent)."""
    answers: str = ""
    """What the answer holds."""

    @property
    def fields(self) -> tuple[str, ...]:
        """Every field this intent reads (without aliases)."""
        return (*self.needs, *(f for f in self.one_of if f not in self.needs), *self.optional)

    def describe(self) -> dict[str, Any]:
        """The row as sent in the ``needs_intent_type`` envelope."""
        row: dict[str, Any] = {
            "needs": list(self.needs),
            "optional": list(self.optional),
            "primitive": self.primitive,
            "available": self.primitive in PRIMITIVES,
            "answers": self.answers,
        }
        if self.one_of:
            row["one_of"] = list(self.one_of)
        if self.aliases:
            row["aliases"] = dict(self.aliases)
        return row


INTENTS: dict[str, IntentSpec] = {
    spec.name: spec
    for spec in (
        IntentSpec(
            "where_is",
            "where_is",
            needs=("description",),
            answers="cell64 of a named place, its bounds, confidence and alternatives",
        ),
        IntentSpec(
            "what_is_here",
            "what_is_here",
            needs=(),
            one_of=("cell", "place", "description"),
            answers="what the store holds at a location: latest values, recent changes, land cover",
        ),
        IntentSpec(
            "is_like",
            "is_like",
            needs=("a", "b"),
            answers="cosine similarity of the two cells' embeddings",
        ),
        IntentSpec(
            "did_change",
            "did_change",
            needs=("cell", "band", "window"),
            answers="values at both tslots, the delta, and whether it is significant",
        ),
        IntentSpec(
            "find_like",
            "find_similar",
            needs=("key",),
            optional=("k", "filter"),
            aliases={"cell": "key", "cell64": "key"},
            answers="nearest cells by embedding (full parameter set: earthmem_find_similar)",
        ),
        IntentSpec(
            "confirm",
            "confirm",
            needs=("claim", "cell"),
            answers="verdict true/false/unknown and the facts it rests on",
        ),
        IntentSpec(
            "ask",
            "ask",
            needs=("description",),
            optional=("place", "cell", "lat", "lng"),
            answers="a free-text question about a place, answered by the intents it routes to",
        ),
        IntentSpec(
            "area_over_time",
            "area_over_time",
            needs=("start_date", "end_date"),
            one_of=("geometry", "bbox", "areas"),
            optional=("index", "max_scenes"),
            answers="an index over an area for each overpass, with spread, anomaly, trend and chart",
        ),
    )
}
"""The intent table (``type`` -> row)."""

INTENT_TYPES: tuple[str, ...] = tuple(INTENTS)
"""The valid intent types, in table order."""


class IntentRequest(BaseModel):
    """``earthmem_intent`` arguments: a tagged union on ``type``.

    Fields of other intents are ignored (and listed in ``ignored_fields``).
    This model documents the fields (OpenAPI, MCP input schema); the router
    reads the raw object, so a field of another intent never fails validation.
    """

    model_config = ConfigDict(extra="allow")

    type: str | None = Field(
        None,
        description="Which intent: " + ", ".join(INTENT_TYPES) + ". Missing or unknown: "
        "the answer is a needs_intent_type envelope listing each type's fields.",
        json_schema_extra={"examples": list(INTENT_TYPES)},
    )
    description: str | None = Field(
        None,
        description="where_is: the place to resolve. ask: the question, verbatim. "
        "what_is_here: free text used as the place when `place` is absent.",
    )
    place: str | None = Field(None, description="what_is_here, ask: a place name to geocode.")
    cell: str | None = Field(
        None,
        description="cell64. Required by did_change and confirm; optional for what_is_here and "
        "ask; find_like accepts it as an alias of `key`.",
    )
    lat: float | None = Field(None, description="ask: latitude, paired with `lng`.")
    lng: float | None = Field(None, description="ask: longitude, paired with `lat`.")
    a: str | None = Field(None, description="is_like: cell64 of the first place.")
    b: str | None = Field(None, description="is_like: cell64 of the second place.")
    band: str | None = Field(None, description='did_change: the band, e.g. "indices.ndvi".')
    window: list[int] | None = Field(
        None,
        description="did_change: [start, end] tslots (day slots since 1970-01-01 for "
        "S2/S1/indices); list valid ones with the trajectory primitive.",
    )
    key: str | None = Field(
        None, description="find_like: a cell64, or 'inline:[x, ...]' (a literal vector)."
    )
    k: int | None = Field(None, description="find_like: how many neighbours (1..1000).")
    filter: dict[str, Any] | None = Field(
        None, description="find_like: a claim the returned cells must satisfy."
    )
    claim: dict[str, Any] | None = Field(
        None,
        description="confirm: {band, op, value, tslot? | window?, agg?}, e.g. "
        '{"band": "indices.ndvi", "op": "gt", "value": 0.4}.',
    )
    geometry: dict[str, Any] | None = Field(
        None, description="area_over_time: a GeoJSON Polygon or MultiPolygon."
    )
    bbox: Any = Field(None, description="area_over_time: {min_lat, min_lng, max_lat, max_lng}.")
    areas: list[dict[str, Any]] | None = Field(
        None, description="area_over_time: up to 6 {id, geometry | bbox}, one chart line each."
    )
    start_date: str | None = Field(None, description="area_over_time: YYYY-MM-DD.")
    end_date: str | None = Field(None, description="area_over_time: YYYY-MM-DD.")
    index: str | None = Field(
        None, description="area_over_time: ndvi, ndwi, ndmi, lswi, evi, vv, vh or vh_vv."
    )
    max_scenes: int | None = Field(None, description="area_over_time: 3..24 (default 16).")


class PlanStep(BaseModel):
    """One primitive call the router ran."""

    primitive: str = Field(description="The primitive's name.")
    args: dict[str, Any] = Field(description="The arguments it was called with.")


class IntentRow(BaseModel):
    """One row of the intent table, as listed in a ``needs_intent_type`` envelope."""

    needs: list[str] = Field(description="Fields that must all be present.")
    one_of: list[str] | None = Field(None, description="At least one of these is required.")
    optional: list[str] = Field(description="Fields read when present.")
    aliases: dict[str, str] | None = Field(None, description="Accepted alternative names.")
    primitive: str = Field(description="The primitive the plan runs.")
    available: bool = Field(description="Whether that primitive is served here.")
    answers: str = Field(description="What the answer holds.")


class IntentAnswer(BaseModel):
    """The router's answer: the plan it ran and the primitive's answer, or an envelope."""

    status: Literal["answered", "needs_intent_type"] = Field(
        description="answered: `result` holds the primitive's answer. needs_intent_type: "
        "`type` was missing or unknown; see `intents`."
    )
    type: str | None = Field(description="The intent that ran (None in an envelope).")
    plan: list[PlanStep] = Field(description="The primitive calls that ran, in order.")
    result: dict[str, Any] | None = Field(
        description="The last primitive's answer, with its signed receipt."
    )
    ignored_fields: list[str] = Field(description="Fields sent but not read by this intent.")
    message: str | None = Field(None, description="Why an envelope was returned.")
    received_type: Any = Field(None, description="The unknown `type` that was sent, if any.")
    valid_types: list[str] | None = Field(None, description="The valid intent types.")
    intents: dict[str, IntentRow] | None = Field(
        None, description="Each intent's fields (needs, one_of, optional)."
    )


def intent_table() -> dict[str, dict[str, Any]]:
    """Each intent's row: needs, one_of, optional, aliases, primitive, availability."""
    return {name: spec.describe() for name, spec in INTENTS.items()}


def _present(payload: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in payload.items() if v is not None}


def run_intent(ctx: Any, payload: Mapping[str, Any]) -> dict[str, Any]:
    """Run one intent: pick the primitive, map the fields, run it, return answer and plan.

    Args:
        ctx: The service context.
        payload: ``{"type": ..., <fields>}`` (JSON-shaped). ``None`` values
            count as absent.

    Returns:
        ``{"status": "answered", "type", "plan": [{"primitive", "args"}],
        "result": <the primitive's answer>, "ignored_fields": [...]}``, or for a
        missing/unknown type the ``needs_intent_type`` envelope (status
        ``needs_intent_type``, ``valid_types``, ``intents``).

    Raises:
        InvalidArgument: ``payload`` is not an object, or required fields are
            missing (``details.missing``).
        ApiError: code ``not_available`` (501) when the intent's primitive is
            not served here; otherwise whatever the primitive raises.
        pydantic.ValidationError: The mapped arguments do not fit the
            primitive's input model.
    """
    if not isinstance(payload, Mapping):
        raise InvalidArgument(
            f"an intent is a JSON object with a `type`, got {type(payload).__name__}"
        )
    present = _present(payload)
    kind = present.pop("type", None)
    spec = INTENTS.get(kind) if isinstance(kind, str) else None
    if spec is None:
        return _needs_intent_type(kind, present)

    args: dict[str, Any] = {}
    used: set[str] = set()
    for name in spec.fields:
        if name in present:
            args[name] = present[name]
            used.add(name)
    for alias, target in spec.aliases.items():
        if target not in args and alias in present:
            args[target] = present[alias]
            used.add(alias)
    ignored = sorted(k for k in present if k not in used)

    missing = [n for n in spec.needs if n not in args]
    if spec.one_of and not any(n in args for n in spec.one_of):
        missing.append(" | ".join(spec.one_of))
    if missing:
        raise InvalidArgument(
            f"intent {spec.name!r} needs {', '.join(missing)}",
            code="missing_fields",
            details={"type": spec.name, "missing": missing, **spec.describe()},
        )
    if spec.name == "ask" and ("lat" in args) != ("lng" in args):
        raise InvalidArgument(
            "intent 'ask' takes lat and lng together",
            code="missing_fields",
            details={"type": "ask", "missing": ["lng" if "lat" in args else "lat"]},
        )
    if spec.primitive not in PRIMITIVES:
        served = sorted(PRIMITIVES)
        raise ApiError(
            "not_available",
            f"intent {spec.name!r} needs the {spec.primitive!r} primitive, which this server "
            f"does not serve yet; available primitives: {', '.join(served) or 'none'}",
            501,
            {
                "type": spec.name,
                "primitive": spec.primitive,
                "available_primitives": served,
                "available_intents": [n for n, s in INTENTS.items() if s.primitive in PRIMITIVES],
            },
        )
    result = call_primitive(ctx, spec.primitive, args)
    return {
        "status": "answered",
        "type": spec.name,
        "plan": [{"primitive": spec.primitive, "args": args}],
        "result": result,
        "ignored_fields": ignored,
    }


def _needs_intent_type(kind: Any, present: Mapping[str, Any]) -> dict[str, Any]:
    if kind is None:
        message = "the intent has no `type`; choose one of the valid types and send its fields"
    else:
        message = f"unknown intent type {kind!r}; choose one of the valid types"
    return {
        "status": "needs_intent_type",
        "type": None,
        "plan": [],
        "result": None,
        "ignored_fields": sorted(present),
        "message": message,
        "received_type": _plain(kind),
        "valid_types": list(INTENT_TYPES),
        "intents": intent_table(),
    }
