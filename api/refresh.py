"""The refresh policy of a running server: how often it looks for a newer cube snapshot.

A server moves to a newer snapshot (and reopens moved k-NN tables and a changed inventory) at
most once per :func:`refresh_seconds`; :class:`api.context.ServiceContext` applies it, and
``earthmem serve --refresh-seconds`` sets it for every worker through the environment.
"""

from __future__ import annotations

import os

from api.errors import InvalidArgument

__all__ = ["DEFAULT_TIP_CHECK_SECONDS", "ENV_REFRESH_SECONDS", "refresh_seconds"]

DEFAULT_TIP_CHECK_SECONDS = 1.0
"""At most one branch-tip lookup per this many seconds (when nothing else is set)."""

ENV_REFRESH_SECONDS = "EARTHMEM_REFRESH_SECONDS"
"""Environment variable: the refresh interval of a running server, in seconds."""


def refresh_seconds(value: str | float | None = None) -> float:
    """The refresh interval: ``value``, else ``$EARTHMEM_REFRESH_SECONDS``, else the default.

    A server moves to a newer snapshot (and reopens moved k-NN tables and a changed
    inventory) at most once per this interval; 0 checks on every request.

    Raises:
        InvalidArgument: not a finite number >= 0 (``invalid_refresh_seconds``).
    """
    raw = value if value is not None else os.environ.get(ENV_REFRESH_SECONDS)
    if raw is None or raw == "":
        return DEFAULT_TIP_CHECK_SECONDS
    try:
        seconds = float(raw)
    except ValueError:
        seconds = float("nan")
    if not (seconds >= 0 and seconds != float("inf")):
        raise InvalidArgument(
            f"the refresh interval ({ENV_REFRESH_SECONDS} / --refresh-seconds) must be a "
            f"number of seconds >= 0, got {raw!r}",
            code="invalid_refresh_seconds",
        )
    return seconds
