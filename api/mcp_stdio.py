"""MCP over stdio that answers every line: the SDK's transport behind a line check.

The SDK's stdio transport hands a line it cannot read as a JSON-RPC message (not
JSON, nested deeper than its parser allows, not a request, response or
notification) to the server as an exception, and no reply is ever written, so
the client waits for ever. Here each line is checked first: a good line goes
on to the SDK unchanged; a bad one is answered on stdout and dropped:

* not JSON, or nested deeper than Python can parse: ``-32700`` Parse error,
  ``id: null``;
* JSON but not a valid message (nested too deep for the SDK, missing fields):
  ``-32600`` Invalid Request, with the line's ``id`` when it has a usable one,
  else ``id: null``.

Blank lines (whitespace only) are skipped, as they carry no message.
"""

from __future__ import annotations

import json
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from io import TextIOWrapper
from typing import Any, cast

import anyio
import mcp_types as types
from mcp.server.stdio import stdio_server
from mcp.shared.message import SessionMessage

__all__ = ["INVALID_REQUEST", "PARSE_ERROR", "checked_stdio_server", "line_error"]

PARSE_ERROR = -32700
"""JSON-RPC: the line is not JSON."""
INVALID_REQUEST = -32600
"""JSON-RPC: JSON, but not a valid message."""


def line_error(line: str) -> types.JSONRPCError | None:
    """The error reply to a stdin line that is not a JSON-RPC message, or None for a good line."""
    try:
        types.jsonrpc_message_adapter.validate_json(line, by_name=False)
        return None
    except Exception as exc:  # any failure to read the line is answered, never raised
        reason = _first_error(exc)
    try:
        doc = json.loads(line)
    except (ValueError, RecursionError) as exc:
        return _reply(
            None,
            PARSE_ERROR,
            f"Parse error: {exc}"
            if isinstance(exc, ValueError)
            else "Parse error: nested too deep",
        )
    request_id = doc.get("id") if isinstance(doc, dict) else None
    if isinstance(request_id, bool) or not isinstance(request_id, str | int):
        request_id = None
    return _reply(request_id, INVALID_REQUEST, f"Invalid Request: {reason}")


def _first_error(exc: Exception) -> str:
    errors = getattr(exc, "errors", None)
    if callable(errors):
        try:
            first = errors(include_url=False)[0]
            return str(first.get("msg", exc))[:200]
        except Exception:
            pass
    return str(exc)[:200]


def _reply(request_id: str | int | None, code: int, message: str) -> types.JSONRPCError:
    return types.JSONRPCError(
        jsonrpc="2.0", id=request_id, error=types.ErrorData(code=code, message=message)
    )


class _CheckedLines:
    """stdin lines for the SDK transport; bad lines are answered through ``replies``."""

    def __init__(self, lines: Any) -> None:
        self._lines = lines
        self._replies: Any = None
        self._ready = anyio.Event()

    def connect(self, replies: Any) -> None:
        self._replies = replies
        self._ready.set()

    def __aiter__(self) -> AsyncIterator[str]:
        return self._checked()

    async def _checked(self) -> AsyncIterator[str]:
        async for line in self._lines:
            if not line.strip():
                continue
            error = line_error(line)
            if error is None:
                yield line
                continue
            await self._ready.wait()
            await self._replies.send(SessionMessage(error))


@asynccontextmanager
async def checked_stdio_server() -> AsyncIterator[tuple[Any, Any]]:
    """:func:`mcp.server.stdio.stdio_server` over this process's stdin, every line answered.

    Yields the ``(read_stream, write_stream)`` pair of the SDK transport.
    """
    stdin = anyio.wrap_file(TextIOWrapper(sys.stdin.buffer, encoding="utf-8", errors="replace"))
    lines = _CheckedLines(stdin)
    async with stdio_server(stdin=cast(Any, lines)) as (read_stream, write_stream):
        lines.connect(write_stream)
        yield read_stream, write_stream
