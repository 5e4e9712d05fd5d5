"""Subcommands of the API layer: sample, serve, mcp, intent, verify (ingest: pipelines/cli.py).

Each handler imports its layer lazily, so ``earthmem cell ...`` stays fast.
Bad input raises a typed error (``ApiError`` / ``StoreError``) which
:func:`api.cli.main` prints as one line on stderr with exit status 2.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

__all__ = ["DATA_ENV", "default_data_dir", "register"]

DATA_ENV = "EARTHMEM_DATA"
"""Environment variable naming the default data directory."""


def default_data_dir() -> str:
    """The data directory used when ``--data`` is omitted: ``$EARTHMEM_DATA`` or ``data``."""
    return os.environ.get(DATA_ENV) or "data"


def _add_data(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--data",
        default=None,
        help=f"data directory (default: ${DATA_ENV} or ./data)",
    )


def register(sub: Any) -> None:
    """Add the layer subcommands to the ``earthmem`` parser."""
    sample = sub.add_parser("sample", help="the bundled sample area")
    sample_sub = sample.add_subparsers(
        dest="sample_command", required=True, parser_class=sample.__class__
    )
    build = sample_sub.add_parser("build", help="generate the sample area and its STAC catalog")
    build.add_argument("--size", choices=("tiny", "demo"), default="demo")
    build.add_argument(
        "--out", default="data/sample", help="output directory (default: data/sample)"
    )
    build.add_argument("--seed", type=int, default=0)
    build.set_defaults(handler=_sample_build)

    # The pipeline layer's commands (`earthmem ingest`, ...) live in pipelines/cli.py and are
    # registered next to these by api.cli._add_extensions; the API layer never imports pipelines.

    serve = sub.add_parser("serve", help="serve the query API: REST at /v1, MCP at /mcp")
    _add_data(serve)
    serve.add_argument("--host", default="127.0.0.1", help="bind address (default: 127.0.0.1)")
    serve.add_argument("--port", type=int, default=8000, help="port (default: 8000)")
    serve.set_defaults(handler=_serve)

    mcp = sub.add_parser("mcp", help="serve MCP over stdio (for agent hosts)")
    _add_data(mcp)
    mcp.set_defaults(handler=_mcp)

    intent = sub.add_parser(
        "intent",
        help='run one intent and print the JSON answer, e.g. \'{"type": "did_change", ...}\'',
    )
    intent.add_argument("payload", help="the intent as a JSON object ('-' reads it from stdin)")
    _add_data(intent)
    intent.set_defaults(handler=_intent)

    verify = sub.add_parser("verify", help="check the receipt of a saved answer offline")
    verify.add_argument("file", help="a saved answer (JSON); '-' reads stdin")
    verify.add_argument(
        "--key", default=None, help="trusted ed25519 public key (64 hex); default: the embedded key"
    )
    verify.set_defaults(handler=_verify)


def _sample_build(args: argparse.Namespace) -> int:
    from pipelines.sample import build_sample

    def progress(stage: str, done: int, total: int) -> None:
        print(
            f"\r  {stage}: {done}/{total}",
            end="" if done < total else "\n",
            file=sys.stderr,
            flush=True,
        )

    info = build_sample(Path(args.out), size=args.size, seed=args.seed, progress=progress)
    print(f"sample area ({args.size}) written to {info.root}")
    return 0


def _context(data: str | None) -> Any:
    """The service context of a data directory that must exist."""
    from api.errors import InvalidArgument
    from api.intent import ContextProvider

    data_dir = Path(data if data is not None else default_data_dir())
    if not data_dir.is_dir():
        raise InvalidArgument(
            f"data directory {str(data_dir)!r} does not exist (ingest first, or pass --data)",
            code="no_data_dir",
        )
    return ContextProvider(data_dir).get()


def _serve(args: argparse.Namespace) -> int:
    import uvicorn

    from api.rest import create_app

    ctx = _context(args.data)
    app = create_app(ctx, host=args.host)
    print(
        f"earthmem serving {ctx.data_dir if hasattr(ctx, 'data_dir') else ''} on "
        f"http://{args.host}:{args.port} (REST /v1, MCP /mcp, docs /docs)",
        file=sys.stderr,
    )
    uvicorn.run(app, host=args.host, port=args.port, log_level="info")
    return 0


def _mcp(args: argparse.Namespace) -> int:
    import anyio

    from api.mcp_server import build_server, run_stdio

    server = build_server(_context(args.data))
    anyio.run(run_stdio, server)
    return 0


def _intent(args: argparse.Namespace) -> int:
    from api.errors import InvalidArgument
    from api.intent import describe_error, run_intent

    text = sys.stdin.read() if args.payload == "-" else args.payload
    try:
        payload = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InvalidArgument(f"the intent is not valid JSON: {exc}", code="invalid_json") from None
    if not isinstance(payload, dict):
        raise InvalidArgument("the intent must be a JSON object with a `type`")
    ctx = _context(args.data)
    try:
        answer = run_intent(ctx, payload)
    except Exception as exc:
        described = describe_error(exc)
        if described is None:
            raise
        err = described[1]["error"]
        print(f"earthmem: error [{err['code']}]: {err['message']}", file=sys.stderr)
        return 2
    print(json.dumps(answer, indent=2))
    return 0


def _verify(args: argparse.Namespace) -> int:
    from api.errors import InvalidArgument
    from api.receipts import key_id_of, verify_answer

    try:
        text = sys.stdin.read() if args.file == "-" else Path(args.file).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise InvalidArgument(f"cannot read {args.file}: {exc}", code="unreadable_file") from None
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InvalidArgument(f"{args.file} is not JSON: {exc}", code="invalid_json") from None
    keys = None
    if args.key is not None:
        try:
            raw = bytes.fromhex(args.key)
        except ValueError:
            raw = b""
        if len(raw) != 32:
            raise InvalidArgument("--key must be 64 hex characters (a raw ed25519 public key)")
        keys = {key_id_of(raw): raw}
    # An intent answer carries the primitive's signed answer under "result".
    if isinstance(doc, dict) and "receipt" not in doc and isinstance(doc.get("result"), dict):
        doc = doc["result"]
    result = verify_answer(doc, keys)
    if result.ok:
        trust = "trusted key" if result.key_trusted else "embedded key (integrity, not provenance)"
        print(f"ok: receipt verifies (key {result.key_id}, {trust})")
        return 0
    print(f"FAILED: {result.reason}")
    return 1
