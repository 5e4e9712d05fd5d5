"""MCP streamable HTTP at ``/mcp``: the SDK's session manager behind bounded sessions.

:class:`StreamableHttpEndpoint` wraps the SDK's ``StreamableHTTPSessionManager``:

* **Stateful** (one worker): each ``initialize`` opens a session. Sessions that
  see no request for :data:`SESSION_IDLE_SECONDS` are closed by the SDK; at
  most :data:`SESSIONS_PER_CLIENT` are open per client address and
  :data:`MAX_SESSIONS` in all. A new session beyond either bound first closes
  the least recently used *idle* session (no request in flight, no open event
  stream) of that client (or, for the total bound, of anyone); when none is
  idle the answer is 503 with ``Retry-After``. A client whose session was
  closed gets 404 on its next request and, as the spec says, initializes again.
  Clients that leave without ``DELETE`` (every Inspector CLI run does) therefore
  cannot lock others out.
* **Stateless** (several workers): every POST stands alone; ``GET`` (a server
  event stream) and ``DELETE`` (end a session) have nothing to act on and answer
  405 with ``Allow: POST``, so no client holds a stream open that can never
  carry anything.
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import anyio
from mcp.server import Server
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.server.transport_security import TransportSecuritySettings
from starlette.types import Message, Receive, Scope, Send

__all__ = [
    "MAX_SESSIONS",
    "SESSIONS_PER_CLIENT",
    "SESSION_IDLE_SECONDS",
    "SessionTable",
    "StreamableHttpEndpoint",
    "local_security",
]

SESSION_IDLE_SECONDS = 120.0
"""A stateful MCP session with no request for this long is closed."""
SESSIONS_PER_CLIENT = 64
"""Most stateful MCP sessions open at once from one client address."""
MAX_SESSIONS = 512
"""Most stateful MCP sessions open at once in all."""

SESSION_HEADER = b"mcp-session-id"


def local_security(host: str) -> TransportSecuritySettings | None:
    """DNS-rebinding protection for loopback hosts (Host/Origin must be loopback)."""
    if host in ("127.0.0.1", "localhost", "::1"):
        return TransportSecuritySettings(
            enable_dns_rebinding_protection=True,
            allowed_hosts=["127.0.0.1:*", "localhost:*", "[::1]:*"],
            allowed_origins=["http://127.0.0.1:*", "http://localhost:*", "http://[::1]:*"],
        )
    return None


@dataclass
class _Session:
    client: str
    last_used: float
    in_flight: int = 0


class SessionTable:
    """The open stateful sessions by client, and which one to close to admit a new one.

    Args:
        per_client: Most sessions per client address.
        total: Most sessions in all.
        idle_seconds: Sessions unused this long are gone (the SDK closed them).
        clock: Monotonic clock (seconds).
    """

    def __init__(
        self,
        *,
        per_client: int = SESSIONS_PER_CLIENT,
        total: int = MAX_SESSIONS,
        idle_seconds: float = SESSION_IDLE_SECONDS,
        clock: Any = time.monotonic,
    ) -> None:
        self.per_client = per_client
        self.total = total
        self.idle_seconds = idle_seconds
        self.clock = clock
        self.sessions: dict[str, _Session] = {}

    def opened(self, session_id: str, client: str) -> None:
        """Record a session the SDK just opened for ``client``."""
        self.sessions[session_id] = _Session(client, self.clock())

    def closed(self, session_id: str) -> None:
        """Forget a session (ended by the client, unknown to the SDK, or evicted)."""
        self.sessions.pop(session_id, None)

    def enter(self, session_id: str) -> None:
        """A request of a known session starts."""
        session = self.sessions.get(session_id)
        if session is not None:
            session.in_flight += 1
            session.last_used = self.clock()

    def leave(self, session_id: str) -> None:
        """A request of a known session ended."""
        session = self.sessions.get(session_id)
        if session is not None:
            session.in_flight = max(0, session.in_flight - 1)
            session.last_used = self.clock()

    def expired(self) -> list[str]:
        """Sessions idle past the timeout (already closed by the SDK): forgotten here."""
        cutoff = self.clock() - self.idle_seconds
        gone = [
            sid for sid, s in self.sessions.items() if s.in_flight == 0 and s.last_used < cutoff
        ]
        for sid in gone:
            self.closed(sid)
        return gone

    def to_evict(self, client: str) -> tuple[list[str], bool]:
        """Sessions to close before ``client`` may open one, and whether it then may.

        Returns:
            ``(session ids to close, admitted)``: the least recently used idle
            session of ``client`` when it is at its bound, and the least recently
            used idle one of anyone when the table is full; ``admitted`` is False
            when a bound is reached and nothing there is idle.
        """
        evict: list[str] = []
        mine = [(s.last_used, sid) for sid, s in self.sessions.items() if s.client == client]
        if len(mine) >= self.per_client:
            idle = sorted((t, sid) for t, sid in mine if self.sessions[sid].in_flight == 0)
            if not idle:
                return [], False
            evict.append(idle[0][1])
        if len(self.sessions) - len(evict) >= self.total:
            idle = sorted(
                (s.last_used, sid)
                for sid, s in self.sessions.items()
                if s.in_flight == 0 and sid not in evict
            )
            if not idle:
                return evict, False
            evict.append(idle[0][1])
        return evict, True


async def _send_json(
    send: Send, status: int, body: dict[str, Any], headers: dict[str, str]
) -> None:
    data = json.dumps(body).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(data)).encode()),
                *((k.encode(), v.encode()) for k, v in headers.items()),
            ],
        }
    )
    await send({"type": "http.response.body", "body": data})


def _header(scope: Scope, name: bytes) -> str | None:
    for key, value in scope["headers"]:
        if key == name:
            return str(value.decode("latin-1"))
    return None


class StreamableHttpEndpoint:
    """ASGI endpoint serving MCP streamable HTTP, with a re-enterable lifespan.

    The SDK's session manager runs once per instance, inside an app lifespan.
    This endpoint makes a fresh manager each time :meth:`run` is entered (so an
    app can start, stop and start again, as test clients do) and answers 503
    while no manager runs. Mount it as a plain route (no ``Mount``, which would
    redirect ``/mcp`` to ``/mcp/``) and enter :meth:`run` in the app lifespan.

    Args:
        server: The MCP server.
        host: The host the HTTP server binds; loopback hosts enable the SDK's
            DNS-rebinding protection (Host/Origin must be loopback).
        max_body_bytes: Largest request body accepted (413 above).
        stateless: Serve without sessions, every request standing alone (needed when
            several worker processes share the port: a session made in one worker
            would be unknown to the others).
        sessions: The bounds of stateful sessions (defaults: the module constants).
    """

    def __init__(
        self,
        server: Server[Any],
        *,
        host: str = "127.0.0.1",
        max_body_bytes: int = 256 * 1024,
        stateless: bool = False,
        sessions: SessionTable | None = None,
    ) -> None:
        self.server = server
        self.host = host
        self.max_body_bytes = max_body_bytes
        self.stateless = stateless
        self.sessions = sessions or SessionTable()
        self._manager: StreamableHTTPSessionManager | None = None
        self._admission = anyio.Lock()

    @asynccontextmanager
    async def run(self) -> AsyncIterator[None]:
        """Run a session manager for the duration of the context (the app lifespan)."""
        manager = StreamableHTTPSessionManager(
            app=self.server,
            security_settings=local_security(self.host),
            max_request_body_size=self.max_body_bytes,
            stateless=self.stateless,
            session_idle_timeout=self.sessions.idle_seconds,
            # A backstop above the table's bound (which evicts before the SDK refuses).
            max_sessions=self.sessions.total + 16,
        )
        async with manager.run():
            self._manager = manager
            self.sessions.sessions.clear()
            try:
                yield
            finally:
                self._manager = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        manager = self._manager
        if manager is None:
            await _send_json(
                send,
                503,
                {
                    "error": {
                        "code": "mcp_not_running",
                        "message": "the MCP session manager is not running",
                    }
                },
                {"retry-after": "1"},
            )
            return
        method = scope["method"]
        if self.stateless:
            if method != "POST":
                await _send_json(
                    send,
                    405,
                    {
                        "error": {
                            "code": "method_not_allowed",
                            "message": f"{method} /mcp: this server runs MCP stateless (several "
                            "workers), so there is no session stream to open or end; POST only",
                        }
                    },
                    {"allow": "POST"},
                )
                return
            await manager.handle_request(scope, receive, send)
            return
        session_id = _header(scope, SESSION_HEADER)
        if session_id is None and method == "POST":
            await self._open(manager, scope, receive, send)
            return
        if session_id is None:
            await manager.handle_request(scope, receive, send)
            return
        await self._use(manager, session_id, scope, receive, send)

    async def _use(
        self,
        manager: StreamableHTTPSessionManager,
        session_id: str,
        scope: Scope,
        receive: Receive,
        send: Send,
    ) -> None:
        status: int | None = None

        async def watch(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
            await send(message)

        self.sessions.enter(session_id)
        try:
            await manager.handle_request(scope, receive, watch)
        finally:
            self.sessions.leave(session_id)
            if status == 404 or (
                scope["method"] == "DELETE" and status is not None and status < 300
            ):
                self.sessions.closed(session_id)

    async def _open(
        self, manager: StreamableHTTPSessionManager, scope: Scope, receive: Receive, send: Send
    ) -> None:
        client = (scope.get("client") or ("unknown", 0))[0]
        async with self._admission:
            for sid in self.sessions.expired():
                await self._close(manager, scope, sid)
            evict, admitted = self.sessions.to_evict(client)
            for sid in evict:
                self.sessions.closed(sid)
                await self._close(manager, scope, sid)
        if not admitted:
            await _send_json(
                send,
                503,
                {
                    "error": {
                        "code": "too_many_sessions",
                        "message": "every MCP session allowed is busy; retry, or end unused "
                        "sessions with DELETE /mcp",
                        "details": {
                            "sessions_per_client": self.sessions.per_client,
                            "max_sessions": self.sessions.total,
                            "retry_after": 5,
                        },
                    }
                },
                {"retry-after": "5"},
            )
            return

        async def watch(message: Message) -> None:
            if message["type"] == "http.response.start" and int(message["status"]) < 400:
                for key, value in message.get("headers", []):
                    if key.lower() == SESSION_HEADER:
                        self.sessions.opened(value.decode("latin-1"), client)
            await send(message)

        await manager.handle_request(scope, receive, watch)

    async def _close(self, manager: StreamableHTTPSessionManager, scope: Scope, sid: str) -> None:
        """End session ``sid`` through the SDK, as the client's own ``DELETE`` would."""
        host, port = scope.get("server") or (self.host, 0)
        headers = [
            (b"host", f"{host}:{port}".encode()),
            (SESSION_HEADER, sid.encode()),
        ]
        request: Scope = {
            **scope,
            "method": "DELETE",
            "headers": headers,
            "query_string": b"",
        }
        sent = False

        async def receive() -> Message:
            nonlocal sent
            if not sent:
                sent = True
                return {"type": "http.request", "body": b"", "more_body": False}
            return {"type": "http.disconnect"}

        async def discard(message: Message) -> None:
            return None

        await manager.handle_request(request, receive, discard)
