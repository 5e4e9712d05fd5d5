"""Typed errors of the API layer.

One root (:class:`ApiError`) carrying a stable machine ``code``, a human
``message``, the HTTP ``status`` the REST adapter answers with, and optional
structured ``details`` (for example the nearest valid tslots). The MCP adapter
turns the same error into a tool error with the same code. Each subclass also
inherits the builtin it resembles, so callers that only know ``ValueError`` or
``LookupError`` still catch it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = [
    "ApiError",
    "InvalidArgument",
    "NotFound",
    "ReceiptKeyError",
]


class ApiError(Exception):
    """Root of every error raised by ``api``.

    Args:
        code: Stable machine-readable code (snake_case), e.g. ``"invalid_argument"``.
        message: Human-readable explanation, safe to show to the caller.
        status: HTTP status the REST adapter uses.
        details: Optional JSON-serialisable structured context.
    """

    def __init__(
        self,
        code: str,
        message: str,
        status: int = 500,
        details: Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.status = status
        self.details: dict[str, Any] = dict(details or {})

    def to_dict(self) -> dict[str, Any]:
        """The error as the JSON body both adapters send: ``{code, message, details?}``."""
        body: dict[str, Any] = {"code": self.code, "message": self.message}
        if self.details:
            body["details"] = self.details
        return body

    def __repr__(self) -> str:
        return f"{type(self).__name__}(code={self.code!r}, message={self.message!r})"


class InvalidArgument(ApiError, ValueError):
    """The caller sent something malformed or out of range (HTTP 422 by default)."""

    def __init__(
        self,
        message: str,
        *,
        code: str = "invalid_argument",
        status: int = 422,
        details: Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__(code, message, status, details)


class NotFound(ApiError, LookupError):
    """The thing asked about does not exist in the store (HTTP 404)."""

    def __init__(
        self,
        message: str,
        *,
        code: str = "not_found",
        details: Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__(code, message, 404, details)


class ReceiptKeyError(ApiError, OSError):
    """The receipt signing key is missing, unreadable, malformed or too widely readable."""

    def __init__(
        self,
        message: str,
        *,
        code: str = "receipt_key_error",
        details: Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__(code, message, 500, details)
