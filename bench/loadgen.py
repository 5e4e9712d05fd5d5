"""A small closed-loop HTTP/1.1 load generator (wrk-like), run as its own process.

``connections`` keep-alive connections each send one request, read the whole
response, record its latency and send the next, until ``seconds`` have passed.
Requests are pre-encoded bytes and responses are parsed only as far as the
status line and ``Content-Length``, so the generator spends far less CPU per
request than an HTTP client library would (on a 2-core machine the generator
and the server share the CPU; a heavy client would be measured instead of the
server). Non-200 answers and transport errors are counted, not timed.
With ``--bodies FILE`` (a JSON list of bodies) the requests rotate through the
list: connection ``i`` sends bodies ``i, i + connections, ...`` (so a server's
per-argument caches are not hit by one argument repeated); with ``--once`` each
body is sent at most once and a connection stops when its share is sent (writes
that must each differ, e.g. by ``operation_id``). ``--header`` adds a header line
to every request (``Authorization: Bearer ...``). The connections are opened
before the clock starts.

    python -m bench.loadgen --url http://127.0.0.1:8000/v1/did_change --body '{...}' \
        --connections 16 --seconds 10 --json out.json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from typing import Any
from urllib.parse import urlsplit

__all__ = ["main", "run_load"]


def _request(
    method: str, host: str, port: int, path: str, body: bytes, headers: tuple[str, ...] = ()
) -> bytes:
    head = [
        f"{method} {path} HTTP/1.1",
        f"Host: {host}:{port}",
        "Connection: keep-alive",
        "Accept: application/json",
        *headers,
    ]
    if method == "POST":
        head += ["Content-Type: application/json", f"Content-Length: {len(body)}"]
    return ("\r\n".join(head) + "\r\n\r\n").encode() + (body if method == "POST" else b"")


async def _read_response(reader: asyncio.StreamReader) -> tuple[int, bytes]:
    head = await reader.readuntil(b"\r\n\r\n")
    lines = head.split(b"\r\n")
    status = int(lines[0].split(b" ", 2)[1])
    length = None
    chunked = False
    for line in lines[1:]:
        name, _, value = line.partition(b":")
        lname = name.strip().lower()
        if lname == b"content-length":
            length = int(value.strip())
        elif lname == b"transfer-encoding" and b"chunked" in value.lower():
            chunked = True
    if length is not None:
        return status, await reader.readexactly(length)
    if chunked:
        parts: list[bytes] = []
        while True:
            size = int((await reader.readuntil(b"\r\n")).strip(), 16)
            if size == 0:
                await reader.readuntil(b"\r\n")
                return status, b"".join(parts)
            parts.append(await reader.readexactly(size))
            await reader.readexactly(2)
    raise ValueError("response without Content-Length or chunked encoding")


async def _worker(
    host: str,
    port: int,
    reqs: list[bytes],
    start: int,
    step: int,
    deadline: float,
    lat: list[float],
    counts: dict[str, int],
    first_body: list[bytes],
    once: bool = False,
    conn: tuple[asyncio.StreamReader, asyncio.StreamWriter] | None = None,
) -> None:
    reader, writer = conn if conn is not None else (None, None)
    k = start
    while time.perf_counter() < deadline and not (once and k >= len(reqs)):
        try:
            if writer is None:
                reader, writer = await asyncio.open_connection(host, port)
            assert reader is not None
            req = reqs[k % len(reqs)]
            k += step
            t0 = time.perf_counter()
            writer.write(req)
            status, body = await _read_response(reader)
            dt = time.perf_counter() - t0
            if status == 200:
                lat.append(dt)
                if not first_body:
                    first_body.append(body)
            else:
                counts["non_200"] += 1
        except (OSError, asyncio.IncompleteReadError, ValueError):
            counts["errors"] += 1
            if writer is not None:
                writer.close()
            reader = writer = None
    if writer is not None:
        writer.close()


async def _run(
    url: str,
    bodies: list[bytes],
    connections: int,
    seconds: float,
    headers: tuple[str, ...] = (),
    once: bool = False,
    raw: bool = False,
) -> dict[str, Any]:
    parts = urlsplit(url)
    host, port = parts.hostname or "127.0.0.1", parts.port or 80
    method = "POST" if bodies[0] else "GET"
    reqs = [_request(method, host, port, parts.path or "/", b, headers) for b in bodies]
    lat: list[float] = []
    counts = {"non_200": 0, "errors": 0}
    first: list[bytes] = []
    # connected before the clock starts (a reconnect after an error is inside it)
    conns = [await asyncio.open_connection(host, port) for _ in range(connections)]
    t0 = time.perf_counter()
    deadline = t0 + seconds
    await asyncio.gather(
        *(
            _worker(host, port, reqs, i, connections, deadline, lat, counts, first, once, c)
            for i, c in enumerate(conns)
        )
    )
    wall = time.perf_counter() - t0
    lat.sort()

    def q(p: float) -> float:
        return lat[min(len(lat) - 1, int(p * len(lat)))] if lat else float("nan")

    return {
        "url": url,
        "connections": connections,
        "distinct_bodies": len(bodies),
        "each_body_once": once,
        "seconds": wall,
        "requests_ok": len(lat),
        "non_200": counts["non_200"],
        "errors": counts["errors"],
        "rps": len(lat) / wall,
        "latency_ms": {
            "p50": q(0.50) * 1e3,
            "p90": q(0.90) * 1e3,
            "p99": q(0.99) * 1e3,
            "max": (lat[-1] * 1e3) if lat else float("nan"),
        },
        **({"latencies_s": lat} if raw else {}),
        "first_body_bytes": len(first[0]) if first else 0,
        "first_body_head": first[0][:200].decode("utf-8", "replace") if first else "",
    }


def run_load(
    url: str,
    body: bytes | list[bytes],
    connections: int,
    seconds: float,
    headers: tuple[str, ...] = (),
    once: bool = False,
    raw: bool = False,
) -> dict[str, Any]:
    """Run the closed loop (uvloop when installed) and return counts, rps and latency quantiles.

    ``body``: one body, or a list the requests rotate through (empty bytes: GET).
    ``headers``: extra ``Name: value`` lines on every request. ``once``: send each body at
    most once (a connection stops when its share is sent: writes whose bodies must differ).
    ``raw``: also return every latency (``latencies_s``, sorted).
    """
    bodies = body if isinstance(body, list) else [body]
    if not bodies:
        raise ValueError("no request body given")
    try:
        import uvloop

        return uvloop.run(_run(url, bodies, connections, seconds, headers, once, raw))
    except ImportError:
        return asyncio.run(_run(url, bodies, connections, seconds, headers, once, raw))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--url", required=True)
    ap.add_argument("--body", default="", help="JSON body (POST); empty = GET")
    ap.add_argument("--bodies", help="a JSON file holding a list of bodies to rotate through")
    ap.add_argument("--connections", type=int, default=16)
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument(
        "--header", action="append", default=[], help="an extra 'Name: value' header (repeat)"
    )
    ap.add_argument("--once", action="store_true", help="send each body at most once")
    ap.add_argument("--raw", action="store_true", help="also write every latency (seconds)")
    ap.add_argument("--json", help="write the result here (else stdout)")
    args = ap.parse_args(argv)
    if args.bodies:
        with open(args.bodies) as f:
            body: bytes | list[bytes] = [json.dumps(b).encode() for b in json.load(f)]
    else:
        body = args.body.encode()
    res = run_load(
        args.url, body, args.connections, args.seconds, tuple(args.header), args.once, args.raw
    )
    text = json.dumps(res, indent=2)
    if args.json:
        with open(args.json, "w") as f:
            f.write(text)
    else:
        print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
