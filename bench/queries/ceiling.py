"""The HTTP ceiling: a minimal ASGI app, served by uvicorn as ``earthmem serve`` serves the API.

It answers every request with a constant small JSON body and does nothing
else, so its requests/s on this machine, under the same load generator, is the
most one uvicorn process can answer: the limit the did_change-over-HTTP share
is taken of. (``/healthz`` of the API is no such limit: it goes through the
full FastAPI stack, while ``POST /v1/<primitive>`` takes the API's fast ASGI
path ahead of it.)

    python -m uvicorn bench.queries.ceiling:app --port P [--no-access-log]
"""

from __future__ import annotations

from typing import Any

__all__ = ["app"]

_BODY = b'{"status":"ok"}'
_HEADERS = [(b"content-type", b"application/json"), (b"content-length", str(len(_BODY)).encode())]


async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    """Drain the request body, answer 200 with a constant JSON body."""
    if scope["type"] != "http":
        return
    more = True
    while more:
        msg = await receive()
        more = bool(msg.get("more_body"))
    await send({"type": "http.response.start", "status": 200, "headers": _HEADERS})
    await send({"type": "http.response.body", "body": _BODY})
