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

Fast path: ``POST /v1/<primitive>`` with ``Content-Type: application/json`` and
a body that fits the input model is answered by :class:`FastPrimitiveRoutes`
without FastAPI's routing, dependency and response machinery (the same
``json.loads`` + model validation, the same call, the same ``JSONResponse``
bytes and error bodies); anything else (a bad body, another content type)
falls through to the FastAPI route, which produces the usual answer or error.
The FastAPI routes stay registered, so the OpenAPI schema is unchanged.

:func:`app_from_env` builds the app of ``earthmem serve --workers N`` in each
worker process; with several workers MCP runs stateless (no session survives
between requests, so a client's requests may land on any worker).
"""

from __future__ import annotations

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
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from api.errors import ApiError, NotFound
from api.intent import (
    INTENT_TYPES,
    ContextProvider,
    IntentAnswer,
    IntentRequest,
    call_primitive,
    describe_error,
    ensure_primitives,
    run_intent,
    validation_error_body,
)
from api.mcp_server import (
    StreamableHttpEndpoint,
    _local_security,
    _version,
    build_server,
    make_provider,
)
from api.registry import PRIMITIVES, Primitive
from store.errors import StoreError

__all__ = [
    "DEFAULT_MAX_BODY_BYTES",
    "ENV_DATA",
    "ENV_HOST",
    "ENV_MCP_STATELESS",
    "ErrorBody",
    "ErrorInfo",
    "FastPrimitiveRoutes",
    "app_from_env",
    "create_app",
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


def _json_error(status: int, body: dict[str, Any]) -> JSONResponse:
    return JSONResponse(body, status_code=status)


def _simple_error(status: int, code: str, message: str) -> JSONResponse:
    return _json_error(status, {"error": {"code": code, "message": message}})


# --------------------------------------------------------------------------- body cap


class BodySizeLimit:
    """ASGI middleware refusing HTTP request bodies larger than ``max_bytes`` with 413.

    Checks ``Content-Length`` first, then counts streamed (chunked) bytes while
    buffering at most ``max_bytes`` before handing the body on.
    """

    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = dict(scope["headers"]).get(b"content-length")
        if declared is not None:
            try:
                length = int(declared)
            except ValueError:
                await _simple_error(400, "invalid_request", "Content-Length is not an integer")(
                    scope, receive, send
                )
                return
            if length > self.max_bytes:
                await self._too_large(scope, receive, send)
                return
        if scope["method"] in ("GET", "HEAD", "DELETE", "OPTIONS"):
            await self.app(scope, receive, send)
            return
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] != "http.request":
                await self.app(scope, _replay([message], receive), send)
                return
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_bytes:
                await self._too_large(scope, receive, send)
                return
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        body = b"".join(chunks)
        await self.app(
            scope,
            _replay([{"type": "http.request", "body": body, "more_body": False}], receive),
            send,
        )

    async def _too_large(self, scope: Scope, receive: Receive, send: Send) -> None:
        response = _simple_error(
            413, "payload_too_large", f"request body larger than {self.max_bytes} bytes"
        )
        await response(scope, receive, send)


def _replay(messages: list[Message], receive: Receive) -> Receive:
    pending = list(messages)

    async def replay() -> Message:
        if pending:
            return pending.pop(0)
        return await receive()

    return replay


# --------------------------------------------------------------------------- fast path


class FastPrimitiveRoutes:
    """ASGI layer answering ``POST /v1/<primitive>`` JSON requests directly.

    Does what the FastAPI route does (``json.loads`` of the body, validation
    against the input model, the primitive in a worker thread, a
    ``JSONResponse`` of the answer; API and store errors as the installed
    handlers send them, anything else a 500 ``internal`` body and the
    exception re-raised, as Starlette's ServerErrorMiddleware does) in one
    step, ahead of FastAPI's middleware stack. A request it does not take as
    is (other method, path or content type, no ``Content-Length`` or one above
    ``max_body_bytes``, a body that is not a JSON object fitting the model) is
    passed, body replayed, to ``fallback`` (the FastAPI app), whose routes and
    middleware answer it or report the error as usual.

    Args:
        fallback: The full app.
        provider: The context provider the routes use.
        max_body_bytes: Largest body taken here (larger ones get the app's 413).
    """

    def __init__(self, fallback: ASGIApp, provider: ContextProvider, max_body_bytes: int) -> None:
        self.fallback = fallback
        self.provider = provider
        self.max_body_bytes = max_body_bytes
        self.routes = {f"/v1/{prim.name}": prim for prim in list(PRIMITIVES.values())}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        prim = self.routes.get(scope["path"]) if scope["type"] == "http" else None
        if prim is None or scope["method"] != "POST" or scope.get("root_path"):
            await self.fallback(scope, receive, send)
            return
        content_type = length = None
        for name, value in scope["headers"]:
            if name == b"content-type":
                content_type = value
            elif name == b"content-length":
                length = value
        if (
            content_type is None
            or content_type.lower() != b"application/json"
            or length is None
            or not length.isdigit()
            or int(length) > self.max_body_bytes
        ):
            await self.fallback(scope, receive, send)
            return
        chunks: list[bytes] = []
        while True:
            message = await receive()
            if message["type"] != "http.request":
                await self.fallback(scope, _replay([message], receive), send)
                return
            chunks.append(message.get("body", b""))
            if not message.get("more_body", False):
                break
        body = b"".join(chunks)
        model = _parse_body(prim, body)
        if model is None:
            replay: Message = {"type": "http.request", "body": body, "more_body": False}
            await self.fallback(scope, _replay([replay], receive), send)
            return
        try:
            answer = await run_in_threadpool(_call, self.provider, prim.name, model)
        except (ApiError, StoreError, ValidationError) as exc:
            described = describe_error(exc)
            assert described is not None
            response: Response = _json_error(*described)
        except Exception:
            await _simple_error(500, "internal", "internal error")(scope, receive, send)
            raise
        else:
            response = JSONResponse(answer)
        await response(scope, receive, send)


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


def _parse_body(prim: Primitive, body: bytes) -> BaseModel | None:
    """The input model of a JSON object body, or None (the route then handles the request)."""
    if not body:
        return None
    try:
        payload = json.loads(body)
    except ValueError:  # JSONDecodeError, UnicodeDecodeError
        return None
    if not isinstance(payload, dict):
        return None
    try:
        return prim.input_model.model_validate(payload)
    except ValidationError:
        return None


# --------------------------------------------------------------------------- routes


def _primitive_endpoint(
    prim: Primitive, provider: ContextProvider
) -> Callable[..., Awaitable[Response]]:
    async def endpoint(args: BaseModel) -> Response:
        answer = await run_in_threadpool(_call, provider, prim.name, args)
        return JSONResponse(answer)

    # FastAPI reads the body model from the signature; give each route its own.
    endpoint.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
        [
            inspect.Parameter(
                "args",
                inspect.Parameter.POSITIONAL_OR_KEYWORD,
                annotation=Annotated[prim.input_model, Body()],
            )
        ],
        return_annotation=Response,
    )
    endpoint.__name__ = f"post_{prim.name}"
    return endpoint


def _call(provider: ContextProvider, name: str, args: BaseModel) -> dict[str, Any]:
    return call_primitive(provider.get(), name, args)


def _intent(provider: ContextProvider, payload: dict[str, Any]) -> dict[str, Any]:
    return run_intent(provider.get(), payload)


def _intent_openapi() -> dict[str, Any]:
    schema = IntentRequest.model_json_schema()
    return {
        "requestBody": {
            "required": True,
            "content": {"application/json": {"schema": schema}},
        }
    }


class _StatelessMcpEndpoint(StreamableHttpEndpoint):
    """MCP streamable HTTP without sessions (every request stands alone).

    Used when several worker processes share the port: a session made in one
    worker would be unknown to the others.
    """

    @asynccontextmanager
    async def run(self) -> AsyncIterator[None]:
        """Run a stateless session manager for the duration of the context."""
        from mcp.server.streamable_http_manager import StreamableHTTPSessionManager

        manager = StreamableHTTPSessionManager(
            app=self.server,
            security_settings=_local_security(self.host),
            max_request_body_size=self.max_body_bytes,
            stateless=True,
        )
        async with manager.run():
            self._manager = manager
            try:
                yield
            finally:
                self._manager = None


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


def _warm_in_background(provider: Any) -> threading.Thread:
    """Create the context and warm it on a daemon thread (errors are left to the queries)."""

    def work() -> None:
        try:
            warm = getattr(provider.get(), "warm", None)
            if callable(warm):
                warm()
        except Exception as exc:  # the first request reports it as a typed error
            logging.getLogger("earthmem.rest").warning("warm-up failed: %s", exc)

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
    warm: bool = False,
) -> FastAPI:
    """The earthmem HTTP app: REST routes for every registered primitive, plus MCP at ``/mcp``.

    Primitives are taken from the registry when the app is created (importing
    :mod:`api.service` first if it exists).

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
        warm: At start, create the context and open what a first query needs
            (:meth:`api.context.ServiceContext.warm`) on a background thread, so the
            first request does not pay for it (``earthmem serve`` does).

    Returns:
        The FastAPI app.
    """
    ensure_primitives()
    provider = make_provider(source)
    endpoint_cls = _StatelessMcpEndpoint if mcp_stateless else StreamableHttpEndpoint
    mcp_endpoint = (
        endpoint_cls(build_server(provider), host=host, max_body_bytes=max_body_bytes)
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
        version=_version(),
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
            payload = json.loads(raw)
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            return _simple_error(
                422, "invalid_argument", f"the request body is not valid JSON: {exc}"
            )
        answer = await run_in_threadpool(_intent, provider, payload)
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
            "version": _version(),
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
        return {"status": "ok", "version": _version(), "primitives": sorted(PRIMITIVES)}

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
        return _json_error(*described)

    async def request_validation(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, RequestValidationError)
        return _json_error(*validation_error_body(list(exc.errors())))

    async def http_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, StarletteHTTPException)
        codes = {404: "not_found", 405: "method_not_allowed", 413: "payload_too_large"}
        code = codes.get(exc.status_code, f"http_{exc.status_code}")
        message = exc.detail if isinstance(exc.detail, str) else str(exc.detail)
        if exc.status_code == 404:
            message = f"no route {request.method} {request.url.path}"
        return _json_error(exc.status_code, {"error": {"code": code, "message": message}})

    async def internal(request: Request, exc: Exception) -> Response:
        return _simple_error(500, "internal", "internal error")

    app.add_exception_handler(ApiError, api_error)
    app.add_exception_handler(StoreError, api_error)
    app.add_exception_handler(ValidationError, api_error)
    app.add_exception_handler(RequestValidationError, request_validation)
    app.add_exception_handler(StarletteHTTPException, http_error)
    app.add_exception_handler(Exception, internal)
