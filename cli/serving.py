"""How ``earthmem serve`` runs uvicorn: the options, the access log, a read deadline for slow clients.

The access log is :class:`api.access_log.AccessLog` around the app (one compact line per
request, written in batches), not uvicorn's per-request :mod:`logging` record: the options
turn uvicorn's own access log off and :func:`logged_app` / :func:`app_from_env` put ours on
when ``--access-log`` (the default) asks for it.

uvicorn bounds only the idle time between keep-alive requests; a client that
opens a socket and sends nothing, or drips a request one byte at a time, holds
the connection for ever. :class:`ReadDeadlineHttpTools` (uvicorn's httptools
protocol plus one timer) closes a connection whose request (head and body) is
not fully received within :data:`READ_TIMEOUT_SECONDS` of the connection
opening or of the request's first byte. Responses, including MCP event streams,
are not limited: the deadline stops once the request is read.
"""

from __future__ import annotations

import asyncio
import os
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from api.access_log import AccessLog

__all__ = [
    "COALESCE_BYTES",
    "ENV_ACCESS_LOG",
    "ENV_READ_TIMEOUT",
    "KEEP_ALIVE_SECONDS",
    "READ_TIMEOUT_SECONDS",
    "CoalescedWrites",
    "ReadDeadlineHttpTools",
    "app_from_env",
    "logged_app",
    "uvicorn_options",
]

READ_TIMEOUT_SECONDS = 10.0
"""A request's head and body must arrive within this many seconds (``--read-timeout``)."""
KEEP_ALIVE_SECONDS = 5
"""An idle keep-alive connection is closed after this many seconds (uvicorn's default)."""
ENV_READ_TIMEOUT = "EARTHMEM_SERVE_READ_TIMEOUT"
"""The read deadline handed to the server processes (set by :func:`uvicorn_options`)."""
ENV_ACCESS_LOG = "EARTHMEM_SERVE_ACCESS_LOG"
"""``"1"``: the server processes log each request (set by :func:`uvicorn_options`)."""


COALESCE_BYTES = 64 * 1024
"""Writes are held for the end of the loop step only while fewer bytes than this wait."""


class CoalescedWrites:
    """A connection's transport whose writes of one event-loop step go out as one send.

    uvicorn writes a response's head and its body with two ``transport.write`` calls,
    and uvloop sends each at once: two system calls and two TCP segments per small
    answer (on loopback the sender's ``send`` also runs the receiver's TCP path). Here
    the writes wait in a list until the end of the current loop step (``call_soon``),
    then leave together (``writelines``: one ``writev``). More than
    :data:`COALESCE_BYTES` waiting, a close or a protocol switch sends them at once,
    in order. Everything else is the wrapped transport's.
    """

    def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop) -> None:
        self.transport = transport
        self.loop = loop
        self.parts: list[bytes] = []
        self.size = 0
        self.scheduled = False

    def write(self, data: bytes) -> None:
        """Queue ``data``; it is sent at the end of this loop step (or now, when large)."""
        self.parts.append(data)
        self.size += len(data)
        if self.size >= COALESCE_BYTES:
            self.flush()
        elif not self.scheduled:
            self.scheduled = True
            self.loop.call_soon(self.flush)

    def flush(self) -> None:
        """Send what waits (one ``writelines``)."""
        self.scheduled = False
        if not self.parts:
            return
        parts, self.parts, self.size = self.parts, [], 0
        if not self.transport.is_closing():
            if len(parts) == 1:
                self.transport.write(parts[0])
            else:
                self.transport.writelines(parts)

    def close(self) -> None:
        """Send what waits, then close (closed even when the send fails)."""
        try:
            self.flush()
        finally:
            self.transport.close()

    def set_protocol(self, protocol: asyncio.BaseProtocol) -> None:
        """Send what waits, then hand the connection to ``protocol`` (an upgrade)."""
        self.flush()
        self.transport.set_protocol(protocol)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.transport, name)


class ReadDeadlineHttpTools(HttpToolsProtocol):
    """uvicorn's httptools HTTP/1.1 protocol with a deadline for reading each request.

    Its transport is :class:`CoalescedWrites`: a response's head and body leave in one send.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.read_timeout = float(os.environ.get(ENV_READ_TIMEOUT) or READ_TIMEOUT_SECONDS)
        self.read_deadline: asyncio.TimerHandle | None = None

    def _arm(self) -> None:
        if self.read_deadline is None:
            self.read_deadline = self.loop.call_later(self.read_timeout, self._too_slow)

    def _disarm(self) -> None:
        if self.read_deadline is not None:
            self.read_deadline.cancel()
            self.read_deadline = None

    def _too_slow(self) -> None:
        self.read_deadline = None
        if not self.transport.is_closing():
            self.logger.info(
                "closing a connection: request not received in %.0f s", self.read_timeout
            )
            self.transport.close()

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        coalesced: Any = CoalescedWrites(transport, self.loop)
        super().connection_made(coalesced)
        self._arm()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def eof_received(self) -> None:
        """The peer half-closed (``shutdown(SHUT_WR)``, as ``nc -N`` and some proxies do):
        what waits to be sent leaves now, before the transport closes itself on this EOF
        (an answer written in this loop step would otherwise be dropped)."""
        transport: Any = self.transport  # the connection's CoalescedWrites
        transport.flush()
        super().eof_received()

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._arm()

    def on_message_complete(self) -> None:
        # Read in full; between keep-alive requests uvicorn's keep-alive timeout applies.
        self._disarm()
        super().on_message_complete()


def uvicorn_options(
    host: str, port: int, *, access_log: bool, read_timeout: float = READ_TIMEOUT_SECONDS
) -> dict[str, Any]:
    """The keyword arguments of ``uvicorn.run`` / ``uvicorn.Config`` for ``earthmem serve``.

    uvicorn's own access log is always off: with ``access_log`` the app is wrapped in
    :class:`api.access_log.AccessLog` instead (:func:`logged_app`, :func:`app_from_env`).
    """
    os.environ[ENV_READ_TIMEOUT] = str(read_timeout)  # read by each server process
    os.environ[ENV_ACCESS_LOG] = "1" if access_log else "0"
    return {
        "host": host,
        "port": port,
        "log_level": "info",
        "access_log": False,
        "http": ReadDeadlineHttpTools,
        "timeout_keep_alive": KEEP_ALIVE_SECONDS,
    }


def logged_app(app: Any) -> Any:
    """``app`` in :class:`api.access_log.AccessLog` when :data:`ENV_ACCESS_LOG` is ``"1"``."""
    return AccessLog(app) if os.environ.get(ENV_ACCESS_LOG) == "1" else app


def app_from_env() -> Any:
    """uvicorn's app factory in each ``earthmem serve`` worker: the REST app, access-logged."""
    from api.rest import app_from_env as build  # deferred: the service layer is slow to import

    return logged_app(build())
