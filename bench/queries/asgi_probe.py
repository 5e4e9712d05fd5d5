"""CPU per did_change request through the whole ASGI app, in one process (a probe, not a row).

Drives ``AccessLog(create_app(data))`` with in-memory ASGI messages, exactly what
``earthmem serve`` runs above uvicorn's HTTP protocol, over the bench's rotating cells,
and reports process CPU per request (``time.process_time``). With ``--profile`` it
prints the cProfile of the calls (CPU timer). With ``--check FILE`` it writes one line per
response (status, sha256 of the bytes, length) with the receipts' request ids and times pinned
(:func:`pin_receipts`): two trees' files are equal when their answers are byte for byte,
signatures included.

    python -m bench.queries.asgi_probe --data DIR --bodies FILE --requests 4000 [--profile]
    python -m bench.queries.asgi_probe --data DIR --bodies FILE --check OUT
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import hashlib
import io
import itertools
import json
import pstats
import time
from pathlib import Path
from typing import Any

__all__ = ["check_answers", "drive", "main", "make_app", "pin_receipts"]


def make_app(data: Path) -> Any:
    """The app ``earthmem serve`` serves for ``data`` (access log to a discarded stream)."""
    from api.access_log import AccessLog
    from api.rest import create_app

    return AccessLog(create_app(str(data), mcp_stateless=True), stream=io.StringIO())


async def _one(app: Any, path: str, body: bytes) -> tuple[int, bytes]:
    scope = {
        "type": "http",
        "asgi": {"version": "3.0", "spec_version": "2.3"},
        "http_version": "1.1",
        "server": ("127.0.0.1", 8000),
        "client": ("127.0.0.1", 50000),
        "scheme": "http",
        "method": "POST",
        "root_path": "",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "headers": [
            (b"host", b"127.0.0.1:8000"),
            (b"connection", b"keep-alive"),
            (b"accept", b"application/json"),
            (b"content-type", b"application/json"),
            (b"content-length", str(len(body)).encode()),
        ],
        "state": {},
    }
    sent = False
    status = 0
    out: list[bytes] = []

    async def receive() -> dict[str, Any]:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        await asyncio.sleep(3600)
        return {"type": "http.disconnect"}

    async def send(msg: dict[str, Any]) -> None:
        nonlocal status
        if msg["type"] == "http.response.start":
            status = msg["status"]
        elif msg["type"] == "http.response.body":
            out.append(msg.get("body", b""))

    await app(scope, receive, send)
    return status, b"".join(out)


async def drive(
    app: Any, path: str, bodies: list[bytes], n: int, start: int = 0
) -> list[tuple[int, bytes]]:
    """``n`` requests one after another, rotating over ``bodies`` from index ``start``."""
    return [await _one(app, path, bodies[(start + i) % len(bodies)]) for i in range(n)]


def pin_receipts() -> None:
    """Every receipt signed from now on in this process gets a fixed time and counted request
    ids (0, 1, 2, ... as 32 hex digits), so two runs sign the same bytes."""
    import api.receipts as receipts

    counter = itertools.count()
    receipts._served_at_now = lambda: "2026-12-03T10:00:00.000Z"  # type: ignore[attr-defined]
    receipts._request_id = lambda: f"{next(counter):032x}"  # type: ignore[attr-defined]


def check_requests(bodies: list[bytes]) -> list[bytes]:
    """What ``--check`` sends: every body, the first cell with other bands (a flag band, a
    Sentinel-1 band, a window without observations: errors too), then 50 repeats."""
    cell = json.loads(bodies[0])["cell"]
    extra = [
        json.dumps({"cell": cell, "band": band, "window": [19774, 19814]}).encode()
        for band in ("ndvi", "indices.evi", "s1.vv", "s2.clear", "indices.ndwi")
    ]
    extra.append(json.dumps({"cell": cell, "band": "ndvi", "window": [19774, 19775]}).encode())
    return bodies + extra + bodies[:50]


async def check_answers(app: Any, path: str, bodies: list[bytes]) -> list[str]:
    """One line per response to :func:`check_requests`: status, sha256 of the bytes, length
    (call :func:`pin_receipts` first)."""
    lines = []
    for body in check_requests(bodies):
        status, out = (await drive(app, path, [body], 1))[0]
        lines.append(f"{status} {hashlib.sha256(out).hexdigest()} {len(out)}")
    return lines


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--data", required=True)
    ap.add_argument("--bodies", required=True, help="JSON list of did_change bodies")
    ap.add_argument("--requests", type=int, default=4000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--profile", action="store_true")
    ap.add_argument("--check", type=Path, help="write the hashes of the answers here (see above)")
    ap.add_argument("--sort", default="tottime")
    ap.add_argument("--lines", type=int, default=45)
    ap.add_argument(
        "--stdin",
        action="store_true",
        help="after the warm-up print 'ready', then per line N on stdin run N requests and "
        "print their CPU us per request (a paired driver alternates two such processes)",
    )
    args = ap.parse_args(argv)
    bodies = [json.dumps(b).encode() for b in json.loads(Path(args.bodies).read_text())]
    app = make_app(Path(args.data))
    path = "/v1/did_change"

    async def go() -> None:
        if args.check is not None:
            pin_receipts()
            lines = await check_answers(app, path, bodies)
            args.check.write_text("".join(line + "\n" for line in lines))
            return
        got = await drive(app, path, bodies, 400)  # warm: context, settled, memo of nothing
        assert all(s == 200 for s, _ in got), got[:2]
        if args.stdin:
            import sys

            print("ready", flush=True)
            k = 400
            for line in sys.stdin:
                n = int(line)
                c0 = time.process_time()
                await drive(app, path, bodies, n, k)
                k += n
                print(f"{1e6 * (time.process_time() - c0) / n:.1f}", flush=True)
            return
        if args.profile:
            prof = cProfile.Profile(time.process_time)
            prof.enable()
            await drive(app, path, bodies, args.requests, 400)
            prof.disable()
            st = pstats.Stats(prof)
            st.sort_stats(args.sort).print_stats(args.lines)
            return
        for r in range(args.rounds):
            c0 = time.process_time()
            await drive(app, path, bodies, args.requests, 400 + r * args.requests)
            c1 = time.process_time()
            print(f"round {r}: {1e6 * (c1 - c0) / args.requests:.1f} us CPU per request")

    asyncio.run(go())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
