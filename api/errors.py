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
from typing import Any, Literal

from store.errors import StoreError

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


# --------------------------------------------------------------------------- service layer (api/queries)


class NoObservation(NotFound):
    """The cell has no (clear) observation of the band at the asked tslot (HTTP 404).

    ``details`` carries ``nearest_before`` / ``nearest_after`` (the closest
    tslots where the cell does have a value, or null) so the caller can retry;
    an absent value is never answered as zero.
    """

    def __init__(self, message: str, *, details: Mapping[str, Any] | None = None) -> None:
        super().__init__(message, code="no_observation", details=details)


class Unavailable(ApiError, RuntimeError):
    """The store has nothing to answer from yet (no cube, no table): HTTP 503."""

    def __init__(
        self, message: str, *, code: str = "unavailable", details: Mapping[str, Any] | None = None
    ) -> None:
        super().__init__(code, message, 503, details)


class Busy(Unavailable):
    """Too many costly requests already running or waiting here: HTTP 503, try again later.

    ``details`` carries ``retry_after`` (whole seconds, also sent as the REST
    ``Retry-After`` header), the ``cost_class`` and its ``concurrency`` and ``queue``.
    """

    def __init__(self, message: str, *, details: Mapping[str, Any] | None = None) -> None:
        super().__init__(message, code="busy", details=details)

    @property
    def retry_after(self) -> int:
        """Seconds after which a retry may find a free slot."""
        return int(self.details.get("retry_after", 1))


_STORE_STATUS = {
    "invalid_cell": 422,
    "invalid_latitude": 422,
    "invalid_longitude": 422,
    "invalid_address": 422,
    "invalid_block": 422,
    "invalid_date": 422,
    "invalid_tempo": 422,
    "unknown_band": 422,
    "region_out_of_bounds": 422,
    "region_too_large": 422,
    "invalid_vector_query": 422,
    "invalid_claim": 422,
    "invalid_window": 422,
    "invalid_value": 422,
    "invalid_number": 422,
    "invalid_fact": 422,
    "snapshot_not_found": 404,
    "memory_not_found": 404,
    "version_conflict": 409,
    "operation_conflict": 409,
    "invalid_transition": 409,
    "import_conflict": 409,
    "invalid_cursor": 422,
    "memory_backend_unavailable": 503,
    "invalid_memory_url": 422,
    "snapshot_expired": 404,
    "cube_not_found": 503,
    "storage_unavailable": 503,
    "storage_timeout": 503,
    "vector_table_error": 503,
    "token_invalid": 401,  # a write's transaction refused its token (store.errors.TokenRefused)
    "token_revoked": 401,
    "token_expired": 401,
    "insufficient_permission": 403,
}


def from_store_error(exc: Exception) -> ApiError:
    """Map a ``store.errors.StoreError`` (anything with ``.code``) to an :class:`ApiError`.

    Codes are kept; the HTTP status comes from a fixed table (422 for bad input,
    404 for unknown snapshots, 503 when the store itself is missing, 500 else).

    Args:
        exc: The store error.

    Returns:
        The API error to raise (``raise from_store_error(e) from e``).
    """
    code = str(getattr(exc, "code", "store_error"))
    message = str(getattr(exc, "message", str(exc)))
    status = _STORE_STATUS.get(code, 500)
    if status == 422:
        return InvalidArgument(message, code=code)
    if status == 404:
        return NotFound(message, code=code)
    if status == 503:
        return Unavailable(message, code=code)
    return ApiError(code, message, status)


__all__ += ["Busy", "NoObservation", "Unavailable", "from_store_error", "store_errors"]


class store_errors:
    """Context manager mapping ``StoreError`` into ``ApiError`` at the service boundary."""

    def __enter__(self) -> None:
        return None

    def __exit__(self, et: Any, exc: BaseException | None, tb: Any) -> Literal[False]:
        if isinstance(exc, StoreError) and not isinstance(exc, ApiError):
            raise from_store_error(exc) from exc
        return False
