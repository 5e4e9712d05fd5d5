"""The access log of ``earthmem serve``: a line per request, written in batches, none lost."""

from __future__ import annotations

import asyncio
import io
import re
from typing import Any

import httpx
import pytest

from api.access_log import AccessLog
from api.rest import create_app
from cli.serving import ENV_ACCESS_LOG, ENV_READ_TIMEOUT, logged_app, uvicorn_options
from tests.api.adapter_helpers import FakeContext, UvicornThread, registered_test_primitives

LINE = re.compile(r'^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ (\S+) "(\S+) (\S+)" (\d{3}|-) (\d+\.\d)ms$')


def _lines(stream: io.StringIO) -> list[re.Match[str]]:
    out = []
    for text in stream.getvalue().splitlines():
        match = LINE.match(text)
        assert match is not None, text
        out.append(match)
    return out


async def _ok(scope: Any, receive: Any, send: Any) -> None:
    await send({"type": "http.response.start", "status": 201, "headers": []})
    await send({"type": "http.response.body", "body": b"x"})


async def _fails(scope: Any, receive: Any, send: Any) -> None:
    raise RuntimeError("boom")


def _scope(path: str = "/v1/x", query: bytes = b"") -> dict[str, Any]:
    return {
        "type": "http",
        "method": "POST",
        "path": path,
        "raw_path": path.encode(),
        "query_string": query,
        "client": ("10.0.0.7", 4242),
        "headers": [],
    }


async def _noop_receive() -> dict[str, Any]:
    return {"type": "http.request", "body": b"", "more_body": False}


async def _drop(message: Any) -> None:
    return None


def test_a_request_is_one_line_with_method_path_status_and_time() -> None:
    stream = io.StringIO()
    log = AccessLog(_ok, stream)

    async def go() -> None:
        await log(_scope("/v1/did_change", b"a=1"), _noop_receive, _drop)
        log.flush()

    asyncio.run(go())
    (line,) = _lines(stream)
    assert line.group(1) == "10.0.0.7:4242"
    assert line.group(2) == "POST"
    assert line.group(3) == "/v1/did_change?a=1"
    assert line.group(4) == "201"


def test_lines_wait_for_the_batch_then_are_written_together() -> None:
    stream = io.StringIO()
    log = AccessLog(_ok, stream, flush_seconds=0.05, flush_lines=1000)

    async def go() -> tuple[str, str]:
        for _ in range(5):
            await log(_scope(), _noop_receive, _drop)
        before = stream.getvalue()
        await asyncio.sleep(0.2)  # the batch's timer
        return before, stream.getvalue()

    before, after = asyncio.run(go())
    assert before == ""
    assert len(_lines(stream)) == 5
    assert after.count("\n") == 5


def test_a_full_batch_is_written_at_once() -> None:
    stream = io.StringIO()
    log = AccessLog(_ok, stream, flush_seconds=3600, flush_lines=3)

    async def go() -> None:
        for _ in range(4):
            await log(_scope(), _noop_receive, _drop)

    asyncio.run(go())
    assert len(_lines(stream)) == 3  # the fourth waits for its batch
    log.flush()
    assert len(_lines(stream)) == 4


def test_a_failing_request_is_logged_without_a_status() -> None:
    stream = io.StringIO()
    log = AccessLog(_fails, stream)

    async def go() -> None:
        with pytest.raises(RuntimeError):
            await log(_scope(), _noop_receive, _drop)
        log.flush()

    asyncio.run(go())
    (line,) = _lines(stream)
    assert line.group(4) == "-"


def test_lines_of_a_served_app_are_written_by_the_end_of_the_lifespan() -> None:
    stream = io.StringIO()
    with registered_test_primitives():
        app = AccessLog(create_app(FakeContext(), mount_mcp=False), stream, flush_seconds=3600)
        with UvicornThread(app) as url, httpx.Client(base_url=url, timeout=10) as http:
            assert http.get("/healthz").status_code == 200
            assert http.post("/v1/intent", json={"type": "nope"}).status_code == 200
            assert http.get("/nowhere").status_code == 404
    got = [(m.group(2), m.group(3), m.group(4)) for m in _lines(stream)]
    assert got == [
        ("GET", "/healthz", "200"),
        ("POST", "/v1/intent", "200"),
        ("GET", "/nowhere", "404"),
    ]


def test_serve_options_turn_uvicorn_access_log_off_and_ours_on(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(ENV_ACCESS_LOG, "0")  # restored after the test
    monkeypatch.setenv(ENV_READ_TIMEOUT, "10")
    assert uvicorn_options("127.0.0.1", 8000, access_log=True)["access_log"] is False
    assert isinstance(logged_app(_ok), AccessLog)
    uvicorn_options("127.0.0.1", 8000, access_log=False)
    assert logged_app(_ok) is _ok


def test_a_path_with_quotes_control_and_non_ascii_bytes_is_escaped_on_its_line() -> None:
    stream = io.StringIO()
    log = AccessLog(_ok, stream)
    scope = {**_scope(), "raw_path": b'/v1/x"\x1b\xe9\\y', "query_string": b"q=\n"}

    async def go() -> None:
        await log(scope, _noop_receive, _drop)
        log.flush()

    asyncio.run(go())
    text = stream.getvalue()
    assert text.isascii()
    assert text.count("\n") == 1
    (line,) = _lines(stream)
    assert line.group(3) == '/v1/x\\"\\x1b\\xe9\\\\y?q=\\n'


def test_lines_logged_under_a_later_event_loop_are_still_written_in_time() -> None:
    """The flush timer belongs to the loop that armed it: a later loop arms its own."""
    stream = io.StringIO()
    log = AccessLog(_ok, stream, flush_seconds=0.01)

    async def one(wait: float) -> None:
        await log(_scope(), _noop_receive, _drop)
        await asyncio.sleep(wait)

    asyncio.run(one(0.0))  # its loop ends before the timer fires
    asyncio.run(one(0.2))
    assert len(_lines(stream)) == 2
