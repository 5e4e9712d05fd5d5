"""ASGI layers in front of the REST app: the body cap, JSON bodies, the primitive fast path.

* :class:`BodySizeLimit` refuses request bodies above ``max_bytes`` with 413
  before anything parses them, and ``POST /v1/...`` JSON bodies nested deeper
  than :data:`api.jsonbody.MAX_JSON_DEPTH` with 400 ``json_too_deep`` (on every
  route, before FastAPI's own parser, which would let ``RecursionError`` out).
* :class:`FastPrimitiveRoutes` sits in front of FastAPI's middleware stack.
  Every ``POST /v1/...`` body is JSON whatever ``Content-Type`` the client
  declared (``curl -d`` sends ``application/x-www-form-urlencoded``): the
  header is normalised to ``application/json`` for every route, so the same
  body gets the same answer everywhere. ``POST /v1/<primitive>`` with a body
  that fits the input model is then answered directly (the same ``json.loads``
  + model validation, the same call through :mod:`api.dispatch`, the same
  ``JSONResponse`` bytes and error bodies) without FastAPI's routing,
  dependency and response machinery; anything else falls through to the
  FastAPI app, which answers or reports the error as usual. The FastAPI routes
  stay registered, so the OpenAPI schema is unchanged.

  Where the call runs: on a worker thread (Starlette's pool), except a light
  public primitive (:attr:`api.registry.Primitive.cost` ``light``, no token, no
  memory) over a data directory on local disk once it has answered on this app
  (its imports, the repository and the caches are open): that call runs on the
  event loop. Such a call is CPU-bound and sub-millisecond to a few
  milliseconds; on a worker thread it ran no sooner (the GIL) and the two hand-offs
  between the loop and the thread cost about as much CPU as the call itself. Heavy,
  memory and writing primitives, first calls, and every call over object storage
  (network reads) stay on threads, so the loop never waits on I/O.
"""

from __future__ import annotations

from typing import Any

from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel, ValidationError
from starlette.concurrency import run_in_threadpool
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from api.dispatch import PRIMITIVES, ContextProvider, Primitive, call_primitive, describe_error
from api.errors import ApiError
from api.jsonbody import TooDeep, dump_plain_json, load_json
from store.errors import StoreError
from store.snapshots import object_root

__all__ = [
    "BodySizeLimit",
    "FastPrimitiveRoutes",
    "bearer_token",
    "call_in_context",
    "json_error",
    "simple_error",
]

JSON = b"application/json"
"""The content type every ``POST /v1/...`` body is read as."""


def json_error(status: int, body: dict[str, Any]) -> JSONResponse:
    """A JSON error response (with ``Retry-After`` when the error details carry ``retry_after``)."""
    retry = ((body.get("error") or {}).get("details") or {}).get("retry_after")
    headers = {"Retry-After": str(int(retry))} if isinstance(retry, int | float) else None
    return JSONResponse(body, status_code=status, headers=headers)


def simple_error(status: int, code: str, message: str) -> JSONResponse:
    """A JSON error response with a code and a message."""
    return json_error(status, {"error": {"code": code, "message": message}})


def call_in_context(
    provider: ContextProvider, name: str, args: BaseModel, token: str | None = None
) -> dict[str, Any]:
    """Run a primitive in the provider's context (the signed answer dict)."""
    return call_primitive(provider.get(), name, args, token=token)


def bearer_token(headers: Any) -> str | None:
    """The bearer token of an ``Authorization`` header (ASGI header pairs or a mapping)."""
    if isinstance(headers, list):
        value = next((v for k, v in headers if k == b"authorization"), None)
        text = value.decode("latin-1") if value is not None else None
    else:
        text = headers.get("authorization")
    if not text:
        return None
    scheme, _, token = text.partition(" ")
    return token.strip() or None if scheme.lower() == "bearer" else None


def _as_json_post(scope: Scope) -> Scope:
    """``scope`` declaring a JSON body: a JSON media type is kept, any other one replaced."""
    declared = next((v for k, v in scope["headers"] if k == b"content-type"), b"")
    media = declared.split(b";", 1)[0].strip().lower()
    if media == JSON or media.endswith(b"+json"):
        return scope
    headers = [(k, v) for k, v in scope["headers"] if k != b"content-type"]
    headers.append((b"content-type", JSON))
    return {**scope, "headers": headers}


class BodySizeLimit:
    """ASGI middleware refusing HTTP request bodies larger than ``max_bytes`` with 413.

    Checks ``Content-Length`` first, then counts streamed (chunked) bytes while
    buffering at most ``max_bytes`` before handing the body on. A ``POST /v1/...``
    body that is JSON nested too deep is refused here with 400 ``json_too_deep``;
    any other body (JSON or not) goes on to the route, which reports its errors.
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
                await simple_error(400, "invalid_request", "Content-Length is not an integer")(
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
        if body and scope["path"].startswith("/v1/") and _too_deep(body):
            await json_error(400, {"error": TooDeep().to_dict()})(scope, receive, send)
            return
        await self.app(
            scope,
            _replay([{"type": "http.request", "body": body, "more_body": False}], receive),
            send,
        )

    async def _too_large(self, scope: Scope, receive: Receive, send: Send) -> None:
        response = simple_error(
            413, "payload_too_large", f"request body larger than {self.max_bytes} bytes"
        )
        await response(scope, receive, send)


def _too_deep(body: bytes) -> bool:
    try:
        load_json(body)
    except TooDeep:
        return True
    except ValueError:
        return False
    return False


def _replay(messages: list[Message], receive: Receive) -> Receive:
    pending = list(messages)

    async def replay() -> Message:
        if pending:
            return pending.pop(0)
        return await receive()

    return replay


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
        try:
            local = object_root() is None
        except StoreError:  # a malformed setting: every query reports it, from a thread
            local = False
        self.may_inline = {
            name
            for name, prim in PRIMITIVES.items()
            if local
            and prim.cost == "light"
            and prim.access == "public"
            and not prim.consults_memory
        }
        """Primitives that may run on the event loop (see the module docstring)."""
        self.settled: set[str] = set()
        """Of those, the ones that have answered once on this app (on a thread)."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "POST" or scope.get("root_path"):
            await self.fallback(scope, receive, send)
            return
        if scope["path"].startswith("/v1/"):
            scope = _as_json_post(scope)
        prim = self.routes.get(scope["path"])
        if prim is None:
            await self.fallback(scope, receive, send)
            return
        content_type = length = None
        for name, value in scope["headers"]:
            if name == b"content-type":
                content_type = value
            elif name == b"content-length":
                length = value
        if (
            content_type != JSON
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
        model = parse_body(prim, body)
        if model is None:
            replay: Message = {"type": "http.request", "body": body, "more_body": False}
            await self.fallback(scope, _replay([replay], receive), send)
            return
        token = bearer_token(scope["headers"])
        try:
            if token is None and prim.name in self.settled:
                answer = call_in_context(self.provider, prim.name, model, None)
            else:
                answer = await run_in_threadpool(
                    call_in_context, self.provider, prim.name, model, token
                )
                if prim.name in self.may_inline:
                    self.settled.add(prim.name)
        except (ApiError, StoreError, ValidationError) as exc:
            described = describe_error(exc)
            assert described is not None
            response: Response = json_error(*described)
        except Exception:
            await simple_error(500, "internal", "internal error")(scope, receive, send)
            raise
        else:
            # what JSONResponse(answer) sends (same head, same bytes), without building one;
            # the answer is plain JSON (its body passed the answer digest's check)
            try:
                body = dump_plain_json(answer)
            except Exception:  # e.g. NaN: the app's typed 500, not the server's plain one
                await simple_error(500, "internal", "internal error")(scope, receive, send)
                raise
            await send(
                {
                    "type": "http.response.start",
                    "status": 200,
                    "headers": [
                        (b"content-length", str(len(body)).encode("latin-1")),
                        (b"content-type", JSON),
                    ],
                }
            )
            await send({"type": "http.response.body", "body": body})
            return
        await response(scope, receive, send)


def parse_body(prim: Primitive, body: bytes) -> BaseModel | None:
    """The input model of a JSON object body, or None (the route then handles the request)."""
    if not body:
        return None
    try:
        payload = load_json(body)
    except ValueError:  # JSONDecodeError, UnicodeDecodeError, TooDeep: the route answers
        return None
    if not isinstance(payload, dict):
        return None
    try:
        return prim.input_model.model_validate(payload)
    except ValidationError:
        return None
