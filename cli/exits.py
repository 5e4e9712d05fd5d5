"""The ``earthmem`` command's exit statuses: 2 for bad input, 1 for the environment's failures."""

from __future__ import annotations

import errno
import re
import sys

from api.errors import InvalidArgument

__all__ = [
    "ENVIRONMENT_CODES",
    "EXIT_ENVIRONMENT",
    "EXIT_USAGE",
    "disk_full",
    "disk_full_line",
    "error_line",
    "exit_status",
    "report",
    "typed_error",
    "unwritable",
]

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
catalog path that does not exist, which is the input's. They exit :data:`EXIT_ENVIRONMENT`;
running again once the storage answers can succeed with the same arguments."""


def exit_status(code: str) -> int:
    """The exit status of a typed error: :data:`EXIT_ENVIRONMENT` for the codes of
    :data:`ENVIRONMENT_CODES`, else :data:`EXIT_USAGE` (bad input)."""
    return EXIT_ENVIRONMENT if code in ENVIRONMENT_CODES else EXIT_USAGE


def error_line(code: str, message: object) -> str:
    """The one stderr line of a typed error: ``earthmem: error [code]: message``, the message's
    line breaks and runs of spaces folded (a driver's message can span lines: psycopg's
    "connection refused" does)."""
    return f"earthmem: error [{code}]: {' '.join(str(message).split())}"


TYPED_PACKAGES = frozenset({"store", "api", "pipelines", "cli"})
"""Packages whose errors carry a stable ``code`` and a ``message`` (each layer's errors module:
``store.errors``, ``api.errors``, ``pipelines.sources.errors``, ``pipelines.sample.errors``,
``store.export``...)."""


def typed_error(exc: BaseException) -> tuple[str, str] | None:
    """``(code, message)`` of one of earthmem's typed errors, else None (a bug: shown whole).

    Recognised by what every layer's errors share (a string ``code``, a class defined in one
    of :data:`TYPED_PACKAGES`) rather than by importing each layer's error root: the pipelines'
    packages import rasterio, pystac and Dagster, which ``earthmem cell`` must not wait for.
    """
    code = getattr(exc, "code", None)
    module = type(exc).__module__.split(".", 1)[0]
    if not isinstance(code, str) or module not in TYPED_PACKAGES:
        return None
    message = getattr(exc, "message", None)
    return code, str(message if isinstance(message, str) else exc)


_DISK_FULL = re.compile(
    r"no space left on device|database or disk is full|disk quota exceeded"
    r"|\d+ requested and \d+ written",
    re.IGNORECASE,
)


def disk_full(exc: BaseException) -> BaseException | None:
    """The exception in ``exc``'s chain that says the disk is full, if any.

    Disk-full failures arrive in many shapes: ``OSError(ENOSPC)``, SQLite's
    "database or disk is full" (through SQLAlchemy and Dagster), numpy's
    "N requested and M written", icechunk's storage errors quoting the OS error.
    """
    seen: set[int] = set()
    todo: list[BaseException | None] = [exc]
    while todo:
        e = todo.pop()
        if e is None or id(e) in seen:
            continue
        seen.add(id(e))
        if isinstance(e, OSError) and e.errno in (errno.ENOSPC, errno.EDQUOT):
            return e
        if _DISK_FULL.search(str(e)):
            return e
        todo += [e.__cause__, e.__context__]
    return None


def disk_full_line(full: BaseException) -> str:
    """The one stderr line of a full disk (:func:`disk_full`'s finding)."""
    detail = " ".join(str(full).split())[:200]
    return (
        f"earthmem: error [disk_full]: the disk is full ({detail}); what was committed "
        "before stays readable: free space (or run `earthmem gc`) and run again"
    )


def report(exc: BaseException, typed: tuple[str, str] | None = None) -> int | None:
    """Say a foreseeable failure in its one stderr line and return its exit status: a full disk
    anywhere in ``exc``'s chain first (:func:`disk_full`), else the typed error (``typed``, as
    a caller described it, or :func:`typed_error`'s). None: not foreseeable, a bug to raise."""
    full = disk_full(exc)
    if full is not None:
        print(disk_full_line(full), file=sys.stderr)
        return EXIT_ENVIRONMENT
    typed = typed if typed is not None else typed_error(exc)
    if typed is None:
        return None
    print(error_line(*typed), file=sys.stderr)
    return exit_status(typed[0])


def unwritable(path: object, exc: OSError) -> Exception:
    """The typed error of an output that cannot be written (``unwritable_output``), raised
    ``from exc``: a full disk in the chain is still said as one (:func:`report`)."""
    return InvalidArgument(f"cannot write {path}: {exc}", code="unwritable_output")
