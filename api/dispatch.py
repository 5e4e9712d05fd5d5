"""The one dispatch room: validate -> run -> answer, or a typed error with one shape.

REST (:mod:`api.rest`), MCP (:mod:`api.mcp_server`) and the command line call
primitives and the intent router only through this module, so the three speak
with one voice: the same codes, messages and details.

* :data:`PRIMITIVES` — the primitives served, registered explicitly here in one
  ordered list (no import side effects);
* :func:`call_primitive` — validate JSON-shaped arguments, run, return exactly
  the signed answer dict; :func:`run` — the same, returning the answer model;
* :func:`run_intent` — the intent router (:mod:`api.intent`) plus the call;
* :func:`describe_error` — any exception -> ``(status, {"error": {code, message,
  details?}})``, or None for an internal error the adapter reports without detail;
* :class:`ContextProvider` — the service context created once, on first use;
* :data:`LIMITERS` — the gate of each cost class (:mod:`api.limiter`): every
  call of a ``heavy`` primitive waits there (bounded queue) or gets ``busy``
  (503, ``retry_after``).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from contextlib import nullcontext
from importlib.metadata import PackageNotFoundError, version
from os import PathLike
from typing import Any

from pydantic import BaseModel, ValidationError

from api.context import ServiceContext
from api.errors import ApiError, NotFound, from_store_error
from api.intent import plan_intent
from api.limiter import HEAVY, Limiter
from api.memory.auth import TOKEN_REFUSALS, authenticate, forget
from api.memory.service import (
    memory_create,
    memory_delete,
    memory_get,
    memory_history,
    memory_list,
    memory_relate,
    memory_update,
    memory_verify,
)
from api.models.tools import ToolsAnswer, ToolsBody, ToolsIn
from api.queries._common import finish, signed_dump
from api.queries.area import area_over_time
from api.queries.ask import ask
from api.queries.cell import confirm, trajectory
from api.queries.change import did_change
from api.queries.coverage import coverage
from api.queries.describe import what_is_here
from api.queries.fact import resolve_fact
from api.queries.is_like import is_like
from api.queries.lattice import cells_in, locate_point
from api.queries.places import where_is
from api.queries.read import read_cell_values, read_cells_values
from api.queries.read_area import read_area
from api.queries.season import compare_same_doy
from api.queries.similar import find_similar
from api.queries.verify import verify_receipt
from api.recall.graph_api import memory_neighbors, memory_relations
from api.recall.service import recall
from api.registry import Primitive, primitive, spec_of
from store.errors import StoreError

__all__ = [
    "ALIASES",
    "CORE_PRIMITIVES",
    "LIMITERS",
    "PRIMITIVES",
    "ContextProvider",
    "Primitive",
    "as_api_error",
    "call_primitive",
    "core_primitives",
    "describe_error",
    "parse_args",
    "provider_for",
    "run",
    "run_intent",
    "service_version",
    "validation_error_body",
]

CORE_PRIMITIVES: tuple[str, ...] = (
    "find_similar",
    "recall",
    "memory_create",
    "memory_get",
    "memory_neighbors",
    "memory_relations",
    "read_cell",
    "locate",
    "fact",
    "verify_receipt",
    "tools",
)
"""The core set MCP ``tools/list`` shows (with the intent router), those served here; every
other primitive is called by name through ``tools/call`` and listed by :func:`tools`."""


def core_primitives() -> list[str]:
    """The names of the core set served here, in :data:`CORE_PRIMITIVES` order."""
    return [n for n in CORE_PRIMITIVES if n in PRIMITIVES]


@primitive(
    "tools",
    ToolsIn,
    ToolsAnswer,
    "Every primitive this server has, including those MCP tools/list leaves out.",
    "MCP tools/list shows a core set (the intent router, find_similar, recall, memory_create, "
    "memory_get, memory_neighbors, memory_relations, read_cell, locate, fact, verify_receipt, tools); every primitive listed here is callable by "
    "name (earthmem_<name>) through tools/call and at POST /v1/<name>. With name: that "
    "primitive's input and output schemas and full description.",
)
def tools(ctx: Any, args: ToolsIn) -> ToolsAnswer:
    """tools {name?}."""
    one: Primitive | None = None
    if args.name is not None:
        one = _primitive(args.name.removeprefix("earthmem_"))
    core = core_primitives()
    answer = {
        "tools": [
            {
                "name": p.name,
                "mcp_tool": f"earthmem_{p.name}",
                "route": f"/v1/{p.name}",
                "summary": p.summary,
                "cost": p.cost,
                "access": p.access,
                "read_only": p.read_only,
                "core": p.name in core,
            }
            for p in PRIMITIVES.values()
        ],
        "core": core,
        "input_schema": one.input_model.model_json_schema() if one else None,
        "output_schema": one.output_model.model_json_schema(mode="serialization") if one else None,
        "description": one.description if one else None,
        "snapshot_id": f"registry:{service_version()}",
    }
    snapshot = f"registry:{service_version()}"
    return finish(ctx, "tools", args, ToolsBody, ToolsAnswer, answer, [], snapshot)


PRIMITIVES: dict[str, Primitive] = {
    spec.name: spec
    for spec in map(
        spec_of,
        (
            area_over_time,
            did_change,
            trajectory,
            confirm,
            find_similar,
            is_like,
            what_is_here,
            ask,
            where_is,
            memory_create,
            memory_get,
            memory_list,
            memory_update,
            memory_relate,
            memory_history,
            memory_delete,
            memory_verify,
            recall,
            memory_neighbors,
            memory_relations,
            # the agent's loop (issue 17): reads, locate, cite, verify, coverage, seasons
            read_cell_values,
            read_cells_values,
            read_area,
            locate_point,
            cells_in,
            verify_receipt,
            resolve_fact,
            coverage,
            compare_same_doy,
            tools,
        ),
    )
}
"""The primitives served, in the order adapters list them (routes, tools, well-known)."""

ALIASES: dict[str, str] = {"find_like": "find_similar"}
"""Names that run another primitive."""

LIMITERS: dict[str, Limiter] = {"heavy": HEAVY}
"""The gate of each cost class (a class without one, ``light``, runs at once)."""


# --------------------------------------------------------------------------- errors


def _error(code: str, message: str, details: Mapping[str, Any] | None = None) -> dict[str, Any]:
    body: dict[str, Any] = {"code": code, "message": message}
    if details:
        body["details"] = dict(details)
    return {"error": body}


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
    such as ``invalid_cell``, 404 unknown snapshot, 503 store missing); a pydantic
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


def as_api_error(exc: ValidationError) -> ApiError:
    """The :class:`ApiError` whose body is what :func:`describe_error` sends for ``exc``."""
    status, body = validation_error_body(exc.errors(include_url=False))
    err = body["error"]
    return ApiError(err["code"], err["message"], status, err.get("details"))


# --------------------------------------------------------------------------- calls


def _primitive(name: str) -> Primitive:
    prim = PRIMITIVES.get(ALIASES.get(name, name))
    if prim is None:
        raise NotFound(
            f"unknown primitive {name!r}",
            code="unknown_primitive",
            details={"valid": sorted([*PRIMITIVES, *ALIASES])},
        )
    return prim


def _validated(prim: Primitive, args: Mapping[str, Any] | BaseModel) -> BaseModel:
    if isinstance(args, prim.input_model):
        return args
    if isinstance(args, BaseModel):
        return prim.input_model.model_validate(args.model_dump(mode="json", exclude_unset=True))
    return prim.input_model.model_validate(dict(args))


def _run(
    prim: Primitive,
    ctx: Any,
    model: BaseModel,
    token: str | None,
    fn: Callable[..., Any] | None = None,
) -> Any:
    """Run a primitive (``fn``: ``prim.fn`` unless given, e.g. ``prim.signed``) through its
    cost class's gate (a memory primitive with the caller its token stands for); a store
    error leaves as the API error of the same code."""
    call = prim.fn if fn is None else fn
    gate = LIMITERS.get(prim.cost)
    try:
        with gate.slot() if gate is not None else nullcontext():
            if prim.access == "public":
                if getattr(ctx, "require_token", False):
                    authenticate(ctx.memory, token, "read")  # the read-token setting
                if prim.consults_memory:  # memory is read for a caller who presents a token
                    reader = authenticate(ctx.memory, token, "read") if token else None
                    return call(ctx, model, reader)
                return call(ctx, model)
            # writes may take the token from the memo: their transaction checks it again
            caller = authenticate(ctx.memory, token, prim.access, memo=prim.access == "write")
            try:
                return call(ctx, model, caller)
            except ApiError as exc:
                if caller.remembered and exc.code in TOKEN_REFUSALS:
                    forget(ctx.memory(), caller)  # the next call reads the token again
                raise
    except StoreError as exc:
        if isinstance(exc, ApiError):
            raise
        raise from_store_error(exc) from exc


def parse_args(name: str, args: Mapping[str, Any]) -> BaseModel:
    """Validate raw arguments into a primitive's input model.

    Raises:
        NotFound: unknown primitive (``unknown_primitive``).
        ApiError: the arguments do not fit the model (the body :func:`describe_error`
            sends: ``invalid_argument`` with the field errors, or a validator's code).
    """
    prim = _primitive(name)
    try:
        return _validated(prim, args)
    except ValidationError as exc:
        raise as_api_error(exc) from None


def run(
    ctx: ServiceContext, name: str, args: Mapping[str, Any], *, token: str | None = None
) -> BaseModel:
    """Validate ``args`` and run primitive ``name`` (aliases such as ``find_like`` accepted).

    Args:
        token: The caller's bearer token (memory primitives need one).

    Returns:
        The answer model.
    """
    model = parse_args(name, args)
    return _run(_primitive(name), ctx, model, token)


def call_primitive(
    ctx: Any, name: str, args: Mapping[str, Any] | BaseModel, *, token: str | None = None
) -> dict[str, Any]:
    """Validate ``args`` against a primitive's input model, run it, return its answer.

    Args:
        ctx: The service context.
        name: Primitive name, e.g. ``"did_change"`` (aliases accepted).
        args: JSON-shaped arguments, or an instance of the input model
            (already validated, used as is).
        token: The caller's bearer token (memory primitives need one: 401 without).

    Returns:
        ``answer.model_dump(mode="json")``: exactly the dict the receipt signs.

    Raises:
        NotFound: No primitive of that name (code ``unknown_primitive``).
        pydantic.ValidationError: The arguments do not fit the input model
            (:func:`describe_error` gives its body).
        ApiError, StoreError: Raised by the primitive.
    """
    prim = _primitive(name)
    if prim.signed is not None:  # the signed dict itself, no answer model built
        signed_dict: dict[str, Any] = _run(prim, ctx, _validated(prim, args), token, prim.signed)
        return signed_dict
    answer = _run(prim, ctx, _validated(prim, args), token)
    signed = signed_dump(answer)  # the dict finish() signed: no second dump
    return signed if signed is not None else answer.model_dump(mode="json")


def run_intent(ctx: Any, payload: Any, *, token: str | None = None) -> dict[str, Any]:
    """Run one intent: pick the primitive, map the fields, run it, return answer and plan.

    Returns:
        ``{"status": "answered", "type", "plan": [{"primitive", "args"}],
        "result": <the primitive's answer>, "ignored_fields": [...]}``, or for a
        missing/unknown type the ``needs_intent_type`` envelope.

    Raises:
        InvalidArgument: not an object, or required fields missing (``missing_fields``).
        ApiError: ``not_available`` (501) when the primitive is not served here;
            otherwise whatever the primitive raises.
        pydantic.ValidationError: The mapped arguments do not fit the primitive's input.
    """
    plan = plan_intent(payload, PRIMITIVES)
    if isinstance(plan, dict):
        return plan
    return plan.answer(call_primitive(ctx, plan.spec.primitive, plan.args, token=token))


# --------------------------------------------------------------------------- context


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
            self._factory = lambda: ServiceContext(data_dir)
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


def provider_for(source: Any) -> ContextProvider:
    """A :class:`ContextProvider` for ``source`` (returned unchanged if it already is one)."""
    return source if isinstance(source, ContextProvider) else ContextProvider(source)


def service_version() -> str:
    """The installed earthmem version (``0.1.0`` when run from a source tree)."""
    try:
        return version("earthmem")
    except PackageNotFoundError:
        return "0.1.0"
