"""The access log of ``earthmem serve``: one compact line per HTTP request, written in batches.

uvicorn's access log goes through :mod:`logging` for every request: a
``LogRecord``, its ``AccessFormatter`` (a copy of the record, the status
phrase, the client address), the handler's lock, and a ``write`` + ``flush``
system call per line. On the did_change bench that was about a fifth of the
server's CPU (1,272 req/s with it, 1,579 without). :class:`AccessLog` keeps
the log and drops that cost: it is an ASGI middleware that formats one line
per request with an f-string on the event loop, keeps the lines in a list and
writes them with one ``write`` + ``flush`` at most every
:data:`FLUSH_SECONDS` (or as soon as :data:`FLUSH_LINES` are waiting), and at
shutdown (the ASGI lifespan's end, and at process exit).

A line::

    2026-12-02T15:40:01Z 127.0.0.1:51234 "POST /v1/did_change" 200 0.8ms

time (UTC, to the second, when the request arrived), client address, method
and path (with the query string), response status (``-`` when the app sent
none: the client left, or the app failed before answering), and the time from
the request reaching the app to the app's return, in milliseconds.
"""

from __future__ import annotations

import asyncio
import atexit
import sys
import time
import weakref
from typing import IO

from starlette.types import ASGIApp, Message, Receive, Scope, Send

__all__ = ["FLUSH_LINES", "FLUSH_SECONDS", "AccessLog"]

FLUSH_SECONDS = 0.25
"""A logged line is written within this many seconds (one write for all lines waiting)."""
FLUSH_LINES = 512
"""Lines waiting that are written at once, without waiting for :data:`FLUSH_SECONDS`."""


class AccessLog:
    """ASGI middleware writing one access-log line per HTTP request (see the module docstring).

    Args:
        app: The app whose requests are logged.
        stream: Where the lines go (default: ``sys.stdout`` at the time of each
            write, where uvicorn's access log went).
        flush_seconds: Longest a line waits before it is written.
        flush_lines: Lines waiting that are written at once.
    """

    def __init__(
        self,
        app: ASGIApp,
        stream: IO[str] | None = None,
        *,
        flush_seconds: float = FLUSH_SECONDS,
        flush_lines: int = FLUSH_LINES,
    ) -> None:
        self.app = app
        self.stream = stream
        self.flush_seconds = flush_seconds
        self.flush_lines = flush_lines
        self._lines: list[str] = []
        self._timer: asyncio.TimerHandle | None = None
        self._timer_loop: asyncio.AbstractEventLoop | None = None
        self._second = -1
        self._stamp = ""
        atexit.register(_flush_at_exit, weakref.ref(self))  # not keeping the app alive

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        kind = scope["type"]
        if kind != "http":
            try:
                await self.app(scope, receive, send)
            finally:
                if kind == "lifespan":  # the server is stopping: write what waits
                    self.flush()
            return
        start = time.perf_counter()
        now = int(time.time())
        status = 0

        async def send_status(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_status)
        finally:
            self._log(scope, status, now, time.perf_counter() - start)

    def _log(self, scope: Scope, status: int, now: int, seconds: float) -> None:
        if now != self._second:
            self._second = now
            self._stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now))
        client = scope.get("client")
        peer = f"{client[0]}:{client[1]}" if client else "-"
        path = scope.get("raw_path") or scope["path"].encode()
        query = scope.get("query_string")
        target = path.decode("latin-1") + ("?" + query.decode("latin-1") if query else "")
        if not (target.isascii() and target.isprintable()) or '"' in target or "\\" in target:
            # bytes past ASCII, control characters, quotes: escaped, one line stays one line
            target = target.encode("unicode_escape").decode("ascii").replace('"', '\\"')
        code = str(status) if status else "-"
        self._lines.append(
            f'{self._stamp} {peer} "{scope["method"]} {target}" {code} {seconds * 1e3:.1f}ms\n'
        )
        if len(self._lines) >= self.flush_lines:
            self.flush()
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # pragma: no cover - called outside a loop
            self.flush()
            return
        if self._timer is None or self._timer_loop is not loop:  # none, or another loop's
            if self._timer is not None:
                self._timer.cancel()
            self._timer, self._timer_loop = loop.call_later(self.flush_seconds, self.flush), loop

    def flush(self) -> None:
        """Write the waiting lines (one write and one flush)."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if not self._lines:
            return
        text = "".join(self._lines)
        self._lines.clear()
        stream = self.stream if self.stream is not None else sys.stdout
        try:
            stream.write(text)
            stream.flush()
        except (OSError, ValueError):  # a closed or broken stream: the lines are dropped
            pass


def _flush_at_exit(ref: weakref.ReferenceType[AccessLog]) -> None:
    log = ref()
    if log is not None:
        log.flush()
