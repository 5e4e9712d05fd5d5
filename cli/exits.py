"""The ``earthmem`` command's exit statuses: 2 for bad input, 1 for the environment's failures."""

from __future__ import annotations

__all__ = ["ENVIRONMENT_CODES", "EXIT_ENVIRONMENT", "EXIT_USAGE", "error_line", "exit_status"]

EXIT_USAGE = 2
"""Status of bad input (a typed error of the arguments or of what they name)."""
EXIT_ENVIRONMENT = 1
"""Status of a failure of the machine rather than of the input (a full disk, storage down)."""
ENVIRONMENT_CODES = frozenset(
    {"storage_unavailable", "storage_timeout", "memory_backend_unavailable"}
)
"""Error codes that are the environment's failure, not the input's: the cube's storage or the
memory database could not be reached or did not answer in time (a missing bucket, denied
credentials, a server down). ``catalog_unreachable`` is not among them: it also names a
catalog path that does not exist, which is the input's. They exit :data:`EXIT_ENVIRONMENT`; running again once the
storage answers can succeed with the same arguments."""


def exit_status(code: str) -> int:
    """The exit status of a typed error: :data:`EXIT_ENVIRONMENT` for the codes of
    :data:`ENVIRONMENT_CODES`, else :data:`EXIT_USAGE` (bad input)."""
    return EXIT_ENVIRONMENT if code in ENVIRONMENT_CODES else EXIT_USAGE


def error_line(code: str, message: object) -> str:
    """The one stderr line of a typed error: ``earthmem: error [code]: message``, the message's
    line breaks and runs of spaces folded (a driver's message can span lines: psycopg's
    "connection refused" does)."""
    return f"earthmem: error [{code}]: {' '.join(str(message).split())}"
