"""``earthmem recall '<query>' [--near ...]``: memory recall from the command line.

``--near`` takes a place name, a cell64 or ``lat,lng`` (with ``--radius-m``, default
:data:`DEFAULT_RADIUS_M`); ``--args '<json>'`` passes any other recall field (the
flags win). The token comes from ``--token`` or ``EARTHMEM_TOKEN``, as for
``earthmem memory``; the answer is printed as JSON (bad input: status 2, one line).
"""

from __future__ import annotations

import argparse
import json
import os
import re
from typing import Any

from api.errors import InvalidArgument
from cli.commands import print_answer
from cli.memory import TOKEN_ENV, context_dir
from store.address import CELL64_PATTERN

__all__ = ["DEFAULT_RADIUS_M", "near_arg", "register"]

DEFAULT_RADIUS_M = 2000.0
"""``--radius-m`` when omitted."""

_LATLNG = re.compile(r"\s*(-?\d+(?:\.\d+)?)\s*,\s*(-?\d+(?:\.\d+)?)\s*")


def near_arg(text: str, radius_m: float) -> dict[str, Any]:
    """``--near`` as recall's ``near`` object: ``lat,lng``, a cell64, else a place name."""
    m = _LATLNG.fullmatch(text)
    if m:
        return {"lat": float(m.group(1)), "lng": float(m.group(2)), "radius_m": radius_m}
    if re.fullmatch(CELL64_PATTERN, text.strip()):
        return {"cell": text.strip(), "radius_m": radius_m}
    return {"place": text, "radius_m": radius_m}


def register(sub: Any) -> None:
    """Add ``recall`` to the ``earthmem`` parser."""
    p = sub.add_parser("recall", help="search the project's memories (needs a read token)")
    p.add_argument("query", help="natural-language question or keywords")
    p.add_argument("--near", default=None, help="place name, cell64 or lat,lng")
    p.add_argument("--radius-m", type=float, default=DEFAULT_RADIUS_M)
    p.add_argument("--at", default=None, help="valid-time anchor (RFC 3339 or YYYY-MM-DD)")
    p.add_argument("--as-of", default=None, help="transaction-time anchor ('what did we know')")
    p.add_argument("--kinds", default=None, help="comma-separated memory types")
    p.add_argument("--limit", type=int, default=None)
    p.add_argument("--compact", action="store_true")
    p.add_argument("--explain", action="store_true")
    p.add_argument("--args", default=None, help="other recall fields as a JSON object")
    p.add_argument("--token", default=None, help=f"bearer token (default: ${TOKEN_ENV})")
    p.add_argument("--data", default=None, help="data directory (default: $EARTHMEM_DATA)")
    p.add_argument("--memory-url", default=None, help="memory database URL")
    p.set_defaults(handler=_recall)


def _payload(args: argparse.Namespace) -> dict[str, Any]:
    extra: Any = {}
    if args.args is not None:
        try:
            extra = json.loads(args.args)
        except json.JSONDecodeError as exc:
            raise InvalidArgument(f"--args is not valid JSON: {exc}", code="invalid_json") from None
        if not isinstance(extra, dict):
            raise InvalidArgument("--args must be a JSON object")
    payload: dict[str, Any] = {**extra, "query": args.query}
    if args.near is not None:
        payload["near"] = near_arg(args.near, args.radius_m)
    for key, value in (("at", args.at), ("asOf", args.as_of), ("limit", args.limit)):
        if value is not None:
            payload[key] = value
    if args.kinds:
        payload["kinds"] = [k.strip() for k in args.kinds.split(",") if k.strip()]
    if args.compact:
        payload["compact"] = True
    if args.explain:
        payload["explain"] = True
    return payload


def _recall(args: argparse.Namespace) -> int:
    # Deferred: the dispatch loads pydantic and every query module (start-up time).
    from api.context import ServiceContext
    from api.dispatch import call_primitive

    payload = _payload(args)
    ctx = ServiceContext(context_dir(args), memory_url=args.memory_url)
    token = args.token or os.environ.get(TOKEN_ENV)
    return print_answer(lambda: call_primitive(ctx, "recall", payload, token=token))
