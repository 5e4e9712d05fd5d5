"""The subcommands over the other layers: sample, serve, mcp, intent, call, verify (ingest: cli/ingest.py).

Handlers import the heavy layers (the sample generator, the service context, the
REST and MCP adapters, uvicorn) when they run, so ``earthmem cell ...`` stays fast.
Bad input raises a typed error (``ApiError`` / ``StoreError``) which
:func:`cli.main.main` prints as one line on stderr with exit status 2 (1 for storage or a
memory database that does not answer: :mod:`cli.exits`).
"""

from __future__ import annotations

import argparse
import errno
import json
import multiprocessing
import os
import signal
import socket
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio

from api.errors import InvalidArgument
from cli.exits import report, unwritable

__all__ = [
    "DATA_ENV",
    "default_data_dir",
    "existing_data_dir",
    "print_answer",
    "read_stdin",
    "register",
]

DATA_ENV = "EARTHMEM_DATA"
"""Environment variable naming the default data directory."""


def default_data_dir() -> str:
    """The data directory used when ``--data`` is omitted: ``$EARTHMEM_DATA`` or ``data``."""
    return os.environ.get(DATA_ENV) or "data"


def read_stdin() -> str:
    """Standard input as text (an argument given as ``-``).

    Raises:
        InvalidArgument: ``invalid_input``: it is not text in the locale's encoding (UTF-8).
    """
    try:
        return sys.stdin.read()
    except UnicodeDecodeError as exc:
        raise InvalidArgument(
            f"standard input is not UTF-8 text: {exc.reason} at byte {exc.start}",
            code="invalid_input",
        ) from None


def existing_data_dir(data: str | None, hint: str = "ingest first, or pass --data") -> Path:
    """``--data`` (or :func:`default_data_dir`), which must be a directory: a typo would
    otherwise be created (a new memory database in it) or read as an empty store.

    Raises:
        InvalidArgument: ``no_data_dir``.
    """
    data_dir = Path(data if data is not None else default_data_dir())
    if not data_dir.is_dir():
        raise InvalidArgument(
            f"data directory {str(data_dir)!r} does not exist or is not a directory ({hint})",
            code="no_data_dir",
        )
    return data_dir


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
    build.add_argument("--overwrite", action="store_true", help="replace a sample already in --out")
    build.set_defaults(handler=_sample_build)

    serve = sub.add_parser("serve", help="serve the query API: REST at /v1, MCP at /mcp")
    _add_data(serve)
    serve.add_argument("--host", default="127.0.0.1", help="bind address (default: 127.0.0.1)")
    serve.add_argument("--port", type=int, default=8000, help="port (default: 8000)")
    serve.add_argument(
        "--workers",
        type=int,
        default=None,
        help="worker processes (default: the number of CPU cores); with more than one, "
        "MCP at /mcp is served stateless (no sessions)",
    )
    serve.add_argument(
        "--access-log",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="log every request (default: on)",
    )
    serve.add_argument(
        "--refresh-seconds",
        default=None,
        help="move to a newer cube snapshot (and reopen changed k-NN tables and inventory) at "
        "most once per this many seconds; 0 checks on every request "
        "(default: $EARTHMEM_REFRESH_SECONDS or 1)",
    )
    serve.add_argument(
        "--read-timeout",
        type=float,
        default=None,
        help="seconds a client has to send a whole request (head and body) before the "
        "connection is closed (default: 10)",
    )
    serve.set_defaults(handler=_serve)

    mcp = sub.add_parser("mcp", help="serve MCP over stdio (for agent hosts)")
    _add_data(mcp)
    mcp.add_argument(
        "--token", default=None, help="bearer token for the memory tools (default: $EARTHMEM_TOKEN)"
    )
    mcp.set_defaults(handler=_mcp)

    intent = sub.add_parser(
        "intent",
        help='run one intent and print the JSON answer, e.g. \'{"type": "did_change", ...}\'',
    )
    intent.add_argument("payload", help="the intent as a JSON object ('-' reads it from stdin)")
    _add_data(intent)
    intent.set_defaults(handler=_intent)

    call = sub.add_parser(
        "call",
        help="call one primitive by name and print its JSON answer (earthmem_tools lists them)",
    )
    call.add_argument("primitive", help="primitive name, e.g. read_cell, locate, fact")
    call.add_argument("arguments", nargs="?", default="{}", help="JSON object ('-' reads stdin)")
    _add_data(call)
    call.add_argument("--token", default=None, help="bearer token (default: $EARTHMEM_TOKEN)")
    call.set_defaults(handler=_call)

    verify = sub.add_parser("verify", help="check the receipt of a saved answer offline")
    verify.add_argument("file", help="a saved answer (JSON); '-' reads stdin")
    verify.add_argument(
        "--key", default=None, help="trusted ed25519 public key (64 hex); default: the embedded key"
    )
    verify.set_defaults(handler=_verify)


def _sample_build(args: argparse.Namespace) -> int:
    # Deferred: the sample generator imports rasterio, numpy and pystac (slow start-up).
    from pipelines.sample import build_sample
    from pipelines.sample.errors import SampleError

    def progress(stage: str, done: int, total: int) -> None:
        print(
            f"\r  {stage}: {done}/{total}",
            end="" if done < total else "\n",
            file=sys.stderr,
            flush=True,
        )

    out = Path(args.out)
    if (out / "catalog.json").exists() and not args.overwrite:
        raise InvalidArgument(
            f"{out} already holds a sample (catalog.json): pass --overwrite to replace it",
            code="sample_exists",
        )
    try:
        info = build_sample(
            out, size=args.size, seed=args.seed, progress=progress, overwrite=args.overwrite
        )
    except SampleError:
        raise  # typed (sample_exists if another build got there first): cli.main says it
    except OSError as exc:
        raise unwritable(out, exc) from exc
    print(f"sample area ({args.size}) written to {info.root}")
    return 0


def _context(data: str | None) -> Any:
    """The service context of a data directory that must exist."""
    # Deferred: the dispatch loads pydantic and every query module (start-up time).
    from api.dispatch import ContextProvider

    return ContextProvider(existing_data_dir(data)).get()


def _serve(args: argparse.Namespace) -> int:
    # Deferred: uvicorn and the REST app (FastAPI, the service layer) are slow to import.
    import uvicorn

    from api.refresh import ENV_REFRESH_SECONDS, refresh_seconds
    from api.rest import ENV_DATA, ENV_HOST, ENV_MCP_STATELESS, create_app
    from cli.serving import READ_TIMEOUT_SECONDS, logged_app, uvicorn_options

    if args.refresh_seconds is not None:  # every worker's context reads it from the environment
        os.environ[ENV_REFRESH_SECONDS] = repr(refresh_seconds(args.refresh_seconds))
    refresh = refresh_seconds()
    workers = args.workers if args.workers is not None else (os.cpu_count() or 1)
    if workers < 1:
        raise InvalidArgument(
            f"--workers must be at least 1, got {workers}", code="invalid_argument"
        )
    if args.read_timeout is not None and not args.read_timeout > 0:
        raise InvalidArgument(
            f"--read-timeout must be above 0, got {args.read_timeout}", code="invalid_argument"
        )
    if not 0 <= args.port <= 65535:
        raise InvalidArgument(f"--port must be in [0, 65535], got {args.port}")
    if args.port == 0 and workers > 1:
        raise InvalidArgument(
            "--port 0 (any free port) would give each worker its own port: name a port for"
            " --workers above 1"
        )
    ctx = _context(args.data)
    data_dir = getattr(ctx, "data_dir", "")
    _check_bind(args.host, args.port, all_addresses=workers == 1)  # a refused port: one line
    print(
        f"earthmem serving {data_dir} on http://{args.host}:{args.port} "
        f"(REST /v1, MCP /mcp{' stateless' if workers > 1 else ''}, docs /docs; "
        f"{workers} worker{'s' if workers > 1 else ''}; new snapshots picked up within "
        f"{refresh:g} s)",
        file=sys.stderr,
    )
    options = uvicorn_options(
        args.host,
        args.port,
        access_log=args.access_log,
        read_timeout=args.read_timeout or READ_TIMEOUT_SECONDS,
    )
    if workers == 1:
        uvicorn.run(logged_app(create_app(ctx, host=args.host, warm=True)), **options)
        return 0
    # Several processes, each with its own socket on the port (SO_REUSEPORT): the kernel
    # spreads connections over them. (uvicorn's own --workers shares one socket, and one
    # worker may accept a whole burst of keep-alive connections while the others idle.)
    # Each worker builds its app (and context) from the environment.
    os.environ[ENV_DATA] = str(Path(data_dir).resolve())
    os.environ[ENV_HOST] = args.host
    os.environ[ENV_MCP_STATELESS] = "1"
    return _serve_workers(args.host, args.port, workers, options)


def _listen_socket(host: str, port: int, *, reuse_port: bool) -> socket.socket:
    family, kind, proto, _, addr = socket.getaddrinfo(
        host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
    )[0]
    sock = socket.socket(family, kind, proto)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if reuse_port:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    sock.bind(addr)
    return sock


def _check_bind(host: str, port: int, *, all_addresses: bool) -> None:
    """Refuse an address the server cannot listen on, before anything starts (with several
    workers, SO_REUSEPORT would otherwise share a port something already listens on).

    ``all_addresses``: bind every address the host resolves to, IPv6 ones v6-only, as
    uvicorn's single server does (``create_server`` of asyncio or uvloop, whichever loop it
    picks: ``""`` is every interface; a family the host lacks is skipped);
    else the first, as each of several workers does (:func:`_listen_socket`). The sockets
    never listen and are closed before the server binds.

    Raises:
        InvalidArgument: ``address_in_use``, ``port_not_permitted``, ``invalid_host`` or
            ``cannot_bind``.
    """
    opened: list[socket.socket] = []
    try:
        if not all_addresses:
            opened.append(_listen_socket(host, port, reuse_port=False))
            return
        infos = socket.getaddrinfo(
            host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )
        for family, kind, proto, _, addr in dict.fromkeys(infos):
            try:
                sock = socket.socket(family, kind, proto)
            except OSError:  # a family this host lacks (IPv6 off): the server skips it too
                continue
            opened.append(sock)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6:
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            sock.bind(addr)
        if not opened:
            raise InvalidArgument(
                f"cannot bind {host}:{port}: no address it resolves to can be used here",
                code="cannot_bind",
            )
    except socket.gaierror as exc:
        raise InvalidArgument(
            f"--host {host!r} does not resolve: {exc}", code="invalid_host"
        ) from exc
    except OSError as exc:
        code = {errno.EADDRINUSE: "address_in_use", errno.EACCES: "port_not_permitted"}.get(
            exc.errno or 0, "cannot_bind"
        )
        raise InvalidArgument(f"cannot bind {host}:{port}: {exc}", code=code) from exc
    finally:
        for sock in opened:
            sock.close()


def _worker_main(host: str, port: int, options: dict[str, Any]) -> None:
    """One ``earthmem serve`` worker process: its own listening socket, one uvicorn server."""
    import uvicorn  # deferred: slow to import (see _serve)

    sock = _listen_socket(host, port, reuse_port=True)
    sock.listen(2048)
    config = uvicorn.Config("cli.serving:app_from_env", factory=True, **options)
    uvicorn.Server(config).run(sockets=[sock])


def _serve_workers(host: str, port: int, workers: int, options: dict[str, Any]) -> int:
    if not hasattr(socket, "SO_REUSEPORT"):
        raise InvalidArgument(
            "--workers above 1 needs SO_REUSEPORT (Linux, BSD, macOS)", code="invalid_argument"
        )
    spawn = multiprocessing.get_context("spawn")
    procs = [
        spawn.Process(target=_worker_main, args=(host, port, options), name=f"earthmem-worker-{i}")
        for i in range(workers)
    ]
    for proc in procs:
        proc.start()

    def forward(signum: int, frame: Any) -> None:
        for proc in procs:
            if proc.pid is not None and proc.is_alive():
                os.kill(proc.pid, signum)

    previous = {sig: signal.signal(sig, forward) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        for proc in procs:
            proc.join()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        for proc in procs:
            proc.join(timeout=10)
            if proc.is_alive():
                proc.kill()
    return 0 if all(proc.exitcode == 0 for proc in procs) else 1


def _mcp(args: argparse.Namespace) -> int:
    # Deferred: the MCP server imports the mcp SDK and the service layer (slow start-up).
    from api.mcp_server import build_server, run_stdio

    token = args.token or os.environ.get("EARTHMEM_TOKEN")
    server = build_server(_context(args.data), token=token)
    anyio.run(run_stdio, server)
    return 0


def _intent(args: argparse.Namespace) -> int:
    # Deferred: the dispatch loads pydantic and every query module (start-up time).
    from api.dispatch import run_intent

    text = read_stdin() if args.payload == "-" else args.payload
    try:
        payload = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InvalidArgument(f"the intent is not valid JSON: {exc}", code="invalid_json") from None
    if not isinstance(payload, dict):
        raise InvalidArgument("the intent must be a JSON object with a `type`")
    ctx = _context(args.data)
    token = os.environ.get("EARTHMEM_TOKEN")  # intents that read memories (recall) need one
    return print_answer(lambda: run_intent(ctx, payload, token=token))


def _call(args: argparse.Namespace) -> int:
    # Deferred: the dispatch loads pydantic and every query module (start-up time).
    from api.dispatch import call_primitive

    text = read_stdin() if args.arguments == "-" else args.arguments
    try:
        payload = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InvalidArgument(
            f"the arguments are not valid JSON: {exc}", code="invalid_json"
        ) from None
    if not isinstance(payload, dict):
        raise InvalidArgument("the arguments must be a JSON object")
    ctx = _context(args.data)
    token = args.token or os.environ.get("EARTHMEM_TOKEN")
    return print_answer(lambda: call_primitive(ctx, args.primitive, payload, token=token))


def print_answer(call: Callable[[], Any]) -> int:
    """Run a dispatch call; print its JSON answer (status 0) or its typed error in one line
    on stderr (status 2 for bad input, 1 for storage that does not answer:
    :func:`cli.exits.exit_status`). Errors that are not typed propagate (a bug, not bad input)."""
    # Deferred: the dispatch loads pydantic and every query module (start-up time).
    from api.dispatch import describe_error

    try:
        answer = call()
    except Exception as exc:
        described = describe_error(exc)
        err = described[1]["error"] if described is not None else None
        # a memory write on a full disk arrives as a backend error: report says the disk's
        status = report(exc, (str(err["code"]), str(err["message"])) if err else None)
        if status is None:
            raise
        return status
    print(json.dumps(answer, indent=2))
    return 0


def _verify(args: argparse.Namespace) -> int:
    # Deferred: the receipt code imports blake3, cbor2 and PyNaCl (a noticeable start-up cost).
    from api.receipts import verify_saved

    try:
        text = read_stdin() if args.file == "-" else Path(args.file).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise InvalidArgument(f"cannot read {args.file}: {exc}", code="unreadable_file") from None
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InvalidArgument(f"{args.file} is not JSON: {exc}", code="invalid_json") from None
    # the same check as the verify_receipt primitive (an intent answer's "result" unwrapped)
    result = verify_saved(doc, args.key)
    if result.ok:
        trust = "trusted key" if result.key_trusted else "embedded key (integrity, not provenance)"
        print(f"ok: receipt verifies (key {result.key_id}, {trust})")
        return 0
    print(f"FAILED: {result.reason}")
    return 1
