"""The HTTP ceiling: a minimal ASGI app, served by uvicorn as ``earthmem serve`` serves the API.

It answers every request with a constant small JSON body and does nothing
else, so its requests/s on this machine, under the same load generator, is the
most one uvicorn process can answer: the limit the did_change-over-HTTP share
is taken of. (``/healthz`` of the API is no such limit: it goes through the
full FastAPI stack, while ``POST /v1/<primitive>`` takes the API's fast ASGI
path ahead of it.)

Served with ``--workers N`` as ``earthmem serve`` serves: N processes, each
with its own listening socket on the port (``SO_REUSEPORT``) and one uvicorn
server, so the ceiling of N workers is compared with N workers. It runs the
HTTP protocol ``earthmem serve`` runs (:class:`cli.serving.ReadDeadlineHttpTools`:
the read deadline, head and body in one send) and logs as it logs
(:class:`api.access_log.AccessLog` around the app, uvicorn's own access log
off), unless ``--no-access-log``: the ceiling is the same server with a
constant answer.

    python -m bench.queries.ceiling --port P [--workers N] [--no-access-log]
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import signal
import socket
from typing import Any

from starlette.types import Receive, Scope, Send

__all__ = ["app", "main"]

_BODY = b'{"status":"ok"}'
_HEADERS = [(b"content-type", b"application/json"), (b"content-length", str(len(_BODY)).encode())]


async def app(scope: Scope, receive: Receive, send: Send) -> None:
    """Drain the request body, answer 200 with a constant JSON body."""
    if scope["type"] != "http":
        return
    more = True
    while more:
        msg = await receive()
        more = bool(msg.get("more_body"))
    await send({"type": "http.response.start", "status": 200, "headers": _HEADERS})
    await send({"type": "http.response.body", "body": _BODY})


def _worker(port: int, access_log: bool) -> None:
    import uvicorn

    from api.access_log import AccessLog
    from cli.serving import KEEP_ALIVE_SECONDS, ReadDeadlineHttpTools

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    sock.bind(("127.0.0.1", port))
    sock.listen(2048)
    config = uvicorn.Config(
        AccessLog(app) if access_log else app,
        log_level="info",
        access_log=False,
        lifespan="off",
        http=ReadDeadlineHttpTools,
        timeout_keep_alive=KEEP_ALIVE_SECONDS,
    )
    uvicorn.Server(config).run(sockets=[sock])


def main(argv: list[str] | None = None) -> int:
    """Serve :func:`app` on 127.0.0.1:PORT with ``--workers`` processes (SIGINT/SIGTERM stop all)."""
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--workers", type=int, default=1)
    ap.add_argument("--no-access-log", action="store_true")
    args = ap.parse_args(argv)
    spawn = multiprocessing.get_context("spawn")
    procs = [
        spawn.Process(target=_worker, args=(args.port, not args.no_access_log))
        for _ in range(max(1, args.workers))
    ]
    for proc in procs:
        proc.start()

    def forward(signum: int, frame: Any) -> None:
        for proc in procs:
            if proc.is_alive() and proc.pid is not None:
                os.kill(proc.pid, signum)

    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, forward)
    for proc in procs:
        proc.join()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
