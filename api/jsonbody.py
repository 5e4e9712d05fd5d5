"""JSON from clients: one parser with a nesting bound, for REST bodies and MCP arguments.

Python's ``json.loads`` recurses once per nesting level, so a body nested about a
thousand deep raises ``RecursionError`` (not ``ValueError``) and, uncaught,
becomes a 500. No earthmem input needs more than a handful of levels (a GeoJSON
MultiPolygon inside an intent is seven), so every client document is held to
:data:`MAX_JSON_DEPTH` levels, and anything deeper is the typed 400
``json_too_deep`` on every route and every transport.
"""

from __future__ import annotations

import json
import re
from typing import Any

import pydantic_core

from api.errors import InvalidArgument

__all__ = [
    "MAX_JSON_DEPTH",
    "TooDeep",
    "check_depth",
    "dump_json",
    "dump_plain_json",
    "json_depth",
    "load_json",
]

MAX_JSON_DEPTH = 32
"""Deepest nesting of arrays and objects accepted in a request body or tool arguments."""


class TooDeep(InvalidArgument):
    """A JSON document nested deeper than :data:`MAX_JSON_DEPTH` (HTTP 400 ``json_too_deep``)."""

    def __init__(self) -> None:
        super().__init__(
            f"the JSON document is nested deeper than {MAX_JSON_DEPTH} levels",
            code="json_too_deep",
            status=400,
            details={"max_depth": MAX_JSON_DEPTH},
        )


def json_depth(value: Any, limit: int = MAX_JSON_DEPTH) -> int:
    """Nesting depth of a parsed JSON value (a scalar is 0), counted up to ``limit + 1``.

    Iterative, so it never recurses however deep ``value`` is; stops as soon as
    the depth exceeds ``limit``.
    """
    deepest = 0
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            children: Any = item.values()
        elif isinstance(item, list | tuple):
            children = item
        else:
            continue
        depth += 1
        if depth > deepest:
            deepest = depth
            if deepest > limit:
                return deepest
        stack.extend((child, depth) for child in children if isinstance(child, dict | list | tuple))
    return deepest


def check_depth(value: Any) -> Any:
    """``value`` unchanged, or :class:`TooDeep` when nested beyond :data:`MAX_JSON_DEPTH`."""
    if json_depth(value) > MAX_JSON_DEPTH:
        raise TooDeep()
    return value


def load_json(body: bytes | str) -> Any:
    """``json.loads(body)`` held to :data:`MAX_JSON_DEPTH` levels.

    Raises:
        TooDeep: nested too deep (including deeper than the interpreter can parse).
        ValueError: not JSON (``json.JSONDecodeError``) or not UTF-8.
    """
    if isinstance(body, bytes):
        openers = body.count(b"[") + body.count(b"{")
    else:
        openers = body.count("[") + body.count("{")
    try:
        payload = json.loads(body)
    except RecursionError:
        raise TooDeep() from None
    if openers <= MAX_JSON_DEPTH:  # cannot be deeper than the brackets it holds
        return payload
    return check_depth(payload)


_ENCODER = json.JSONEncoder(ensure_ascii=False, allow_nan=False, separators=(",", ":"))


def dump_json(value: Any) -> bytes:
    """The bytes Starlette's ``JSONResponse`` renders for ``value`` (compact, UTF-8, no NaN).

    The same ``json.dumps`` options, with one encoder made once instead of one per
    response (``json.dumps`` with options builds a new :class:`json.JSONEncoder` each call).

    Raises:
        ValueError: NaN or infinity; TypeError: a value JSON has no form for.
    """
    return _ENCODER.encode(value).encode("utf-8")


_DIFFERS = re.compile(rb"[0-9]e-[0-9](?![0-9])|0\.0000|NaN|Infinity")
"""(What :func:`dump_plain_json` tests without a regex.) Where pydantic-core's JSON may differ from :func:`dump_json`'s: a float below 1e-4 (it
writes ``1e-7`` and ``0.00001`` where Python writes ``1e-07`` and ``1e-05``) and the
non-finite constants (refused by :func:`dump_json`). Also matches such text inside strings:
those documents simply take :func:`dump_json`."""


def dump_plain_json(value: Any) -> bytes:
    """:func:`dump_json` of a document of plain JSON values, written by pydantic-core.

    Precondition: ``value`` is plain JSON data (dicts with str keys, lists, tuples, str,
    int, float, bool, None: a signed answer, whose body its digest has checked and whose
    receipt is built of those). For such documents: the same bytes, about four times
    faster. Other values are not refused: pydantic-core writes sets, bytes, dates or
    non-str keys that ``json.dumps`` rejects, so callers must not pass them. A document whose
    pydantic-core text may differ (:data:`_DIFFERS`) or that it cannot write is written by
    :func:`dump_json` (which raises what it raises for it).
    """
    try:
        out = pydantic_core.to_json(value, inf_nan_mode="constants")
    except Exception:  # dump_json decides (and raises its own error)
        return dump_json(value)
    # substring tests, no regex over the whole text (over a 170 KB document with "e-" in
    # its strings a regex scan cost more than the encoding saved)
    if b"0.0000" in out or b"NaN" in out or b"Infinity" in out or _small_exponent(out):
        return dump_json(value)
    return out


def _small_exponent(out: bytes) -> bool:
    """Whether ``out`` has a digit, ``e-`` and one digit not followed by another (``1e-7``)."""
    i = out.find(b"e-")
    n = len(out)
    while i != -1:
        if (
            i > 0
            and i + 2 < n
            and out[i - 1] in _DIGITS
            and out[i + 2] in _DIGITS
            and (i + 3 >= n or out[i + 3] not in _DIGITS)
        ):
            return True
        i = out.find(b"e-", i + 2)
    return False


_DIGITS = frozenset(b"0123456789")
