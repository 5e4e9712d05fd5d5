"""``earthmem serve``'s HTTP protocol: slow clients are cut off, normal ones are not."""

from __future__ import annotations

import asyncio
import selectors
import socket
import time
from collections.abc import Iterator

import httpx
import pytest

from api.rest import create_app
from cli.serving import (
    COALESCE_BYTES,
    ENV_READ_TIMEOUT,
    CoalescedWrites,
    ReadDeadlineHttpTools,
    uvicorn_options,
)
from tests.api.adapter_helpers import FakeContext, UvicornThread, registered_test_primitives

# A bound for a silent failure (sockets never closed), not a speed goal.
GIVE_UP_SECONDS = 60.0


@pytest.fixture
def base(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    monkeypatch.setenv(ENV_READ_TIMEOUT, "0.5")
    with registered_test_primitives():
        app = create_app(FakeContext(), mount_mcp=False)
        with UvicornThread(app, http=ReadDeadlineHttpTools) as url:
            yield url


def _open_sockets(base: str, n: int) -> list[socket.socket]:
    port = int(base.rsplit(":", 1)[1])
    return [socket.create_connection(("127.0.0.1", port)) for _ in range(n)]


def _all_closed(socks: list[socket.socket], drip: bytes | None) -> bool:
    """Drip one byte at a time on every socket until the server has closed them all."""
    selector = selectors.DefaultSelector()
    for s in socks:
        selector.register(s, selectors.EVENT_READ)
    open_ = set(socks)
    deadline = time.monotonic() + GIVE_UP_SECONDS
    i = 0
    while open_ and time.monotonic() < deadline:
        for s in list(open_):
            if drip is not None:
                try:
                    s.send(drip[i % len(drip) : i % len(drip) + 1])
                except OSError:
                    open_.discard(s)
        for key, _ in selector.select(timeout=0.1):
            sock = key.fileobj
            assert isinstance(sock, socket.socket)
            try:
                data = sock.recv(4096)
            except OSError:
                data = b""
            if not data or b" 400 " in data or b" 408 " in data:
                open_.discard(sock)
                selector.unregister(sock)
        i += 1
    for s in socks:
        s.close()
    return not open_


def test_sockets_dripping_a_request_are_closed(base: str) -> None:
    head = b"POST /v1/intent HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 100000\r\n\r\n"
    assert _all_closed(_open_sockets(base, 50), head + b"x" * 100_000)


def test_silent_sockets_are_closed(base: str) -> None:
    assert _all_closed(_open_sockets(base, 20), None)


def test_a_normal_client_is_not_cut_off(base: str) -> None:
    with httpx.Client(base_url=base, timeout=10) as http:
        for _ in range(3):  # keep-alive: several requests on one connection
            assert http.get("/healthz").status_code == 200
        resp = http.post("/v1/intent", json={"type": "nope"})
        assert resp.status_code == 200


def test_serve_options_use_the_deadline_protocol() -> None:
    options = uvicorn_options("127.0.0.1", 8000, access_log=False, read_timeout=3)
    assert options["http"] is ReadDeadlineHttpTools
    assert options["timeout_keep_alive"] > 0


class _Transport:
    """A transport that records what is sent, as calls."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, bytes]] = []
        self.closed = False

    def write(self, data: bytes) -> None:
        self.calls.append(("write", data))

    def writelines(self, parts: list[bytes]) -> None:
        self.calls.append(("writelines", b"".join(parts)))

    def is_closing(self) -> bool:
        return self.closed

    def close(self) -> None:
        self.calls.append(("close", b""))
        self.closed = True

    def get_extra_info(self, name: str) -> str:
        return f"info:{name}"


def test_writes_of_one_loop_step_leave_as_one_send_in_order() -> None:
    async def go() -> _Transport:
        raw = _Transport()
        out = CoalescedWrites(raw, asyncio.get_running_loop())  # type: ignore[arg-type]
        out.write(b"HTTP/1.1 200 OK\r\n\r\n")
        out.write(b"body")
        assert raw.calls == []  # held until the end of this step
        await asyncio.sleep(0)
        out.write(b"next")
        out.close()  # sends what waits first
        assert out.get_extra_info("peername") == "info:peername"
        return raw

    raw = asyncio.run(go())
    assert raw.calls == [
        ("writelines", b"HTTP/1.1 200 OK\r\n\r\nbody"),
        ("write", b"next"),
        ("close", b""),
    ]


def test_a_large_write_is_not_held() -> None:
    async def go() -> _Transport:
        raw = _Transport()
        out = CoalescedWrites(raw, asyncio.get_running_loop())  # type: ignore[arg-type]
        out.write(b"head")
        out.write(b"x" * COALESCE_BYTES)
        return raw

    assert asyncio.run(go()).calls == [("writelines", b"head" + b"x" * COALESCE_BYTES)]


def test_many_requests_on_one_connection_get_whole_answers(base: str) -> None:
    with httpx.Client(base_url=base, timeout=10) as http:
        for i in range(50):
            resp = http.post("/v1/intent", json={"type": f"nope{i}"})
            assert resp.status_code == 200
            assert resp.json()


def test_a_client_that_half_closes_gets_its_answer(base: str) -> None:
    """A request followed by ``shutdown(SHUT_WR)`` (``nc -N``, some proxies): the answer the
    app writes in that loop step is sent before the transport closes on the EOF (the held
    write was dropped: 0 of 20 answered before the fix)."""
    port = int(base.rsplit(":", 1)[1])
    answered = 0
    for _ in range(20):
        with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
            s.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
            s.shutdown(socket.SHUT_WR)
            out = b""
            while chunk := s.recv(65536):
                out += chunk
        answered += out.startswith(b"HTTP/1.1 200")
    assert answered == 20
