"""The REST adapter (FastAPI): one route per primitive, the intent router, MCP at ``/mcp``.

Routes (all JSON; errors are ``{"error": {code, message, details?}}``):

* ``POST /v1/<name>`` for every registered primitive; body = its input model,
  answer = its output model (operation id = the primitive's name);
* ``POST /v1/intent``: the intent router (operation id ``intent``);
* ``GET /v1/charts/{chart_id}.png``: a chart referenced by an answer;
* ``GET /.well-known/earthmem.json``: receipt public key(s), version, primitives;
* ``GET /healthz``;
* ``/mcp``: MCP streamable HTTP (the same tools as ``earthmem mcp``).

The handlers hold no logic: they validate the body against the input model,
call the primitive (in a worker thread) and send ``model_dump(mode="json")``
unchanged, so the receipt verifies byte for byte. Request bodies above
``max_body_bytes`` (256 kB by default) are refused with 413 before parsing.

Every ``POST /v1/...`` body is read as JSON whatever content type the client
declared, and a body that fits a primitive's input model is answered by the
fast path in front of FastAPI (:mod:`api.asgi`: the same validation, call and
bytes); anything else goes through the FastAPI routes, which answer or send the
error. Every call goes through :mod:`api.dispatch`.

:func:`app_from_env` builds the app of ``earthmem serve --workers N`` in each
worker process; with several workers MCP runs stateless (no session survives
between requests, so a client's requests may land on any worker).
"""

from __future__ import annotations

import gc
import inspect
import json
import logging
import os
import threading
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Annotated, Any

from fastapi import Body, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel, Field, ValidationError
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

from api.asgi import (
    BodySizeLimit,
    FastPrimitiveRoutes,
    bearer_token,
    call_in_context,
    json_error,
    simple_error,
)
from api.dispatch import (
    PRIMITIVES,
    ContextProvider,
    Primitive,
    describe_error,
    provider_for,
    run_intent,
    service_version,
    validation_error_body,
)
from api.errors import ApiError, NotFound
from api.intent import INTENT_TYPES, IntentAnswer, IntentRequest
from api.jsonbody import load_json
from api.mcp_http import SessionTable, StreamableHttpEndpoint
from api.mcp_server import build_server
from store.errors import StoreError

__all__ = [
    "DEFAULT_MAX_BODY_BYTES",
    "ENV_DATA",
    "ENV_HOST",
    "ENV_MCP_STATELESS",
    "ErrorBody",
    "ErrorInfo",
    "app_from_env",
    "create_app",
    "freeze_start_up",
]

ENV_DATA = "EARTHMEM_SERVE_DATA"
"""Data directory of the app built by :func:`app_from_env` (set by ``earthmem serve``)."""

ENV_HOST = "EARTHMEM_SERVE_HOST"
"""Bound host of the app built by :func:`app_from_env` (MCP DNS-rebinding protection)."""

ENV_MCP_STATELESS = "EARTHMEM_SERVE_MCP_STATELESS"
"""``"1"``: the app built by :func:`app_from_env` serves MCP stateless."""

DEFAULT_MAX_BODY_BYTES = 256 * 1024
"""Largest request body accepted (bytes); larger bodies get 413."""

PRIMITIVE_TAG = "primitives"
INTENT_TAG = "intent"
META_TAG = "meta"


class ErrorInfo(BaseModel):
    """What went wrong."""

    code: str = Field(description="Stable machine-readable code, e.g. invalid_cell, not_found.")
    message: str = Field(description="Human-readable explanation.")
    details: dict[str, Any] | None = Field(
        None, description="Structured context (field errors, nearest valid tslots, ...)."
    )


class ErrorBody(BaseModel):
    """The body of every error response."""

    error: ErrorInfo


_ERROR_RESPONSES: dict[int | str, dict[str, Any]] = {
    400: {"model": ErrorBody, "description": "Bad input caught by the store (bad cell64, ...)."},
    404: {"model": ErrorBody, "description": "Nothing stored there."},
    413: {"model": ErrorBody, "description": "Request body too large."},
    422: {"model": ErrorBody, "description": "Arguments do not fit the input model."},
}


class _EarthmemApi(FastAPI):
    """FastAPI with :class:`FastPrimitiveRoutes` in front of its middleware stack."""

    fast: FastPrimitiveRoutes | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if self.fast is not None:
            await self.fast(scope, receive, send)
        else:
            await super().__call__(scope, receive, send)

    async def _full(self, scope: Scope, receive: Receive, send: Send) -> None:
        await super().__call__(scope, receive, send)


# --------------------------------------------------------------------------- routes


def _primitive_endpoint(
    prim: Primitive, provider: ContextProvider
) -> Callable[..., Awaitable[Response]]:
    async def endpoint(request: Request, args: BaseModel) -> Response:
        token = bearer_token(request.headers)
        answer = await run_in_threadpool(call_in_context, provider, prim.name, args, token)
        return JSONResponse(answer)

    # FastAPI reads the body model from the signature; give each route its own.
    endpoint.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
        [
            inspect.Parameter(
                "request", inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=Request
            ),
            inspect.Parameter(
                "args",
                inspect.Parameter.POSITIONAL_OR_KEYWORD,
                annotation=Annotated[prim.input_model, Body()],
            ),
        ],
        return_annotation=Response,
    )
    endpoint.__name__ = f"post_{prim.name}"
    return endpoint


def _intent(
    provider: ContextProvider, payload: dict[str, Any], token: str | None
) -> dict[str, Any]:
    return run_intent(provider.get(), payload, token=token)


def _intent_openapi() -> dict[str, Any]:
    schema = IntentRequest.model_json_schema()
    return {
        "requestBody": {
            "required": True,
            "content": {"application/json": {"schema": schema}},
        }
    }


def app_from_env() -> FastAPI:
    """The app of one ``earthmem serve`` worker, configured by environment variables.

    Reads :data:`ENV_DATA` (data directory, required), :data:`ENV_HOST` (default
    127.0.0.1) and :data:`ENV_MCP_STATELESS`. Used as uvicorn's app factory
    (``api.rest:app_from_env``) when serving with several worker processes.
    """
    from api.context import ServiceContext

    data = os.environ.get(ENV_DATA)
    if not data:
        raise RuntimeError(f"{ENV_DATA} is not set (start the server with `earthmem serve`)")
    return create_app(
        ServiceContext(data),
        host=os.environ.get(ENV_HOST) or "127.0.0.1",
        mcp_stateless=os.environ.get(ENV_MCP_STATELESS) == "1",
        warm=True,
    )


def freeze_start_up() -> None:
    """What a server does once warm: collect, then freeze what start-up built (``gc.freeze``).

    The modules, tables, indexes and caches of a warm server live as long as the process;
    frozen, the collector's later passes no longer traverse them. A full pass over such a heap
    took ~200 ms once per ~400 recall calls, and with a 700,000-object heap, 8 threads writing
    memories with a claim the cube confirms did 592 writes/s (1.73 ms CPU a write) unfrozen
    against 720 (1.43 ms) frozen.
    """
    gc.collect()
    gc.freeze()


def _warm_in_background(provider: Any) -> threading.Thread:
    """Create the context and warm it on a daemon thread (errors are left to the queries),
    then :func:`freeze_start_up`."""

    def work() -> None:
        try:
            warm = getattr(provider.get(), "warm", None)
            if callable(warm):
                warm()
        except Exception as exc:  # the first request reports it as a typed error
            logging.getLogger("earthmem.rest").warning("warm-up failed: %s", exc)
        freeze_start_up()

    thread = threading.Thread(target=work, name="earthmem-warmup", daemon=True)
    thread.start()
    return thread


def create_app(
    source: Any,
    *,
    host: str = "127.0.0.1",
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
    mount_mcp: bool = True,
    mcp_stateless: bool = False,
    mcp_sessions: SessionTable | None = None,
    warm: bool = False,
) -> FastAPI:
    """The earthmem HTTP app: REST routes for every registered primitive, plus MCP at ``/mcp``.

    Primitives are taken from :data:`api.dispatch.PRIMITIVES` when the app is created.

    Args:
        source: The service context, a data directory, or a zero-argument
            factory returning the context (created on the first request).
        host: The host the server binds (loopback enables MCP DNS-rebinding
            protection).
        max_body_bytes: Largest request body accepted (413 above).
        mount_mcp: Serve MCP streamable HTTP at ``/mcp`` (its session manager
            runs in the app lifespan).
        mcp_stateless: Serve MCP without sessions (needed when several worker
            processes share the port).
        mcp_sessions: The bounds of stateful MCP sessions (default:
            :class:`api.mcp_http.SessionTable` with the documented constants).
        warm: At start, create the context and open what a first query needs
            (:meth:`api.context.ServiceContext.warm`) on a background thread, so the
            first request does not pay for it (``earthmem serve`` does).

    Returns:
        The FastAPI app.
    """
    provider = provider_for(source)
    mcp_endpoint = (
        StreamableHttpEndpoint(
            build_server(provider),
            host=host,
            max_body_bytes=max_body_bytes,
            stateless=mcp_stateless,
            sessions=mcp_sessions,
        )
        if mount_mcp
        else None
    )

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        if warm:
            app.state.warmup = _warm_in_background(provider)
        if mcp_endpoint is None:
            yield
            return
        async with mcp_endpoint.run():
            yield

    app = _EarthmemApi(
        title="earthmem",
        version=service_version(),
        summary="A shared, materialised memory of the Earth's surface for AI agents.",
        description=(
            "Read-only queries over Sentinel-2/Sentinel-1 indices and Tessera embeddings on the "
            "cell64 lattice. Every answer carries a signed receipt (public key at "
            "/.well-known/earthmem.json). MCP (streamable HTTP) at /mcp."
        ),
        lifespan=lifespan,
    )
    app.state.provider = provider
    _install_error_handlers(app)

    for prim in list(PRIMITIVES.values()):
        app.add_api_route(
            f"/v1/{prim.name}",
            _primitive_endpoint(prim, provider),
            methods=["POST"],
            operation_id=prim.name,
            tags=[PRIMITIVE_TAG],
            summary=prim.summary,
            description=prim.description,
            response_model=prim.output_model,
            responses=_ERROR_RESPONSES,
        )

    @app.post(
        "/v1/intent",
        operation_id="intent",
        tags=[INTENT_TAG],
        summary="Run one intent: " + ", ".join(INTENT_TYPES),
        description=(
            "State the goal as {type, ...}; the plan runs in the same call. A missing or "
            "unknown type returns a needs_intent_type envelope (200). Fields of other "
            "intents are ignored and listed in ignored_fields."
        ),
        response_model=IntentAnswer,
        responses={
            **_ERROR_RESPONSES,
            501: {"model": ErrorBody, "description": "Not served here."},
        },
        openapi_extra=_intent_openapi(),
    )
    async def intent(request: Request) -> Response:
        raw = await request.body()
        try:
            payload = load_json(raw)  # TooDeep goes to the ApiError handler (400)
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            return simple_error(
                422, "invalid_argument", f"the request body is not valid JSON: {exc}"
            )
        answer = await run_in_threadpool(_intent, provider, payload, bearer_token(request.headers))
        return JSONResponse(answer)

    @app.get(
        "/v1/charts/{chart_id}.png",
        operation_id="get_chart",
        tags=[META_TAG],
        summary="A chart (PNG) referenced by an area_over_time answer",
        response_class=Response,
        responses={200: {"content": {"image/png": {}}}, 404: {"model": ErrorBody}},
    )
    async def get_chart(chart_id: str) -> Response:
        png = await run_in_threadpool(_chart_png, provider, chart_id)
        return Response(
            png, media_type="image/png", headers={"cache-control": "public, max-age=86400"}
        )

    @app.get(
        "/.well-known/earthmem.json",
        operation_id="well_known",
        tags=[META_TAG],
        summary="Receipt public key(s), version and the primitives served",
    )
    async def well_known() -> dict[str, Any]:
        ctx = await run_in_threadpool(provider.get)
        return {
            "service": "earthmem",
            "version": service_version(),
            **ctx.signer.public_info(),
            "primitives": [
                {
                    "name": p.name,
                    "summary": p.summary,
                    "rest": f"/v1/{p.name}",
                    "mcp_tool": f"earthmem_{p.name}",
                }
                for p in PRIMITIVES.values()
            ],
            "intent_types": list(INTENT_TYPES),
            "mcp": "/mcp" if mcp_endpoint is not None else None,
        }

    @app.get("/healthz", operation_id="healthz", tags=[META_TAG], summary="Liveness")
    async def healthz() -> dict[str, Any]:
        return {"status": "ok", "version": service_version(), "primitives": sorted(PRIMITIVES)}

    if mcp_endpoint is not None:
        # A plain route, not Mount: Mount("/mcp") would redirect POST /mcp to /mcp/.
        app.router.routes.append(
            Route("/mcp", endpoint=mcp_endpoint, methods=["GET", "POST", "DELETE"])
        )

    app.add_middleware(BodySizeLimit, max_bytes=max_body_bytes)
    app.fast = FastPrimitiveRoutes(app._full, provider, max_body_bytes)
    return app


def _chart_png(provider: ContextProvider, chart_id: str) -> bytes:
    # Charts live in the context's bounded in-memory store (api.charts.ChartStore).
    store = getattr(provider.get(), "charts", None)
    png = store.get(chart_id) if store is not None else None
    if png is None:
        raise NotFound(
            f"no chart {chart_id!r} (charts are kept in memory for a while; ask again)",
            code="chart_not_found",
        )
    return bytes(png)


def _install_error_handlers(app: FastAPI) -> None:
    async def api_error(request: Request, exc: Exception) -> Response:
        described = describe_error(exc)
        assert described is not None
        return json_error(*described)

    async def request_validation(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, RequestValidationError)
        return json_error(*validation_error_body(list(exc.errors())))

    async def http_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, StarletteHTTPException)
        codes = {404: "not_found", 405: "method_not_allowed", 413: "payload_too_large"}
        code = codes.get(exc.status_code, f"http_{exc.status_code}")
        message = exc.detail if isinstance(exc.detail, str) else str(exc.detail)
        if exc.status_code == 404:
            message = f"no route {request.method} {request.url.path}"
        response = json_error(exc.status_code, {"error": {"code": code, "message": message}})
        response.headers.update(exc.headers or {})  # 405 keeps its Allow
        return response

    async def internal(request: Request, exc: Exception) -> Response:
        return simple_error(500, "internal", "internal error")

    app.add_exception_handler(ApiError, api_error)
    app.add_exception_handler(StoreError, api_error)
    app.add_exception_handler(ValidationError, api_error)
    app.add_exception_handler(RequestValidationError, request_validation)
    app.add_exception_handler(StarletteHTTPException, http_error)
    app.add_exception_handler(Exception, internal)
