"""Test-local primitives and context for the REST / MCP / intent adapter tests.

The adapters are exercised on trivial primitives registered here (so they are
tested independently of the service layer) and, where the service layer is
present, on the real primitives over the tiny sample (``tiny_store``).
"""

from __future__ import annotations

import base64
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import uvicorn
from pydantic import BaseModel, ConfigDict, Field, field_validator

from api import dispatch
from api.charts import ChartStore
from api.dispatch import PRIMITIVES, Primitive
from api.errors import NotFound
from api.receipts import Signer, sign_answer
from store import address

CELL_TOOL = "test_decode_cell"
CHART_TOOL = "test_chart"
PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="
)


class DecodeIn(BaseModel):
    """Arguments of the test primitive."""

    model_config = ConfigDict(extra="forbid")

    cell: str = Field(description="cell64 to decode.")
    missing: bool = Field(False, description="Pretend the cell holds nothing (NotFound).")

    @field_validator("cell")
    @classmethod
    def _parse(cls, value: str) -> str:
        address.parse_cell(value)
        return value


class DecodeOut(BaseModel):
    """Answer of the test primitive."""

    cell: str = Field(description="The cell.")
    lat: float = Field(description="Centre latitude.")
    lng: float = Field(description="Centre longitude.")
    receipt: dict[str, Any] = Field(description="Signed receipt.")


class ChartIn(BaseModel):
    """Arguments of the chart test primitive."""

    label: str = Field("x", description="Any label.")


class ChartOut(BaseModel):
    """Answer with a chart."""

    label: str
    chart_id: str | None
    chart_png_base64: str | None
    receipt: dict[str, Any]


class FakeContext:
    """Just what the adapters and the test primitives touch."""

    def __init__(self) -> None:
        self.signer = Signer.generate()
        self.charts = ChartStore()


def _decode(ctx: FakeContext, args: DecodeIn) -> DecodeOut:
    if args.missing:
        raise NotFound("nothing stored there", code="no_observation", details={"nearest_before": 5})
    geo = address.decode(args.cell)
    body = {"cell": args.cell, "lat": geo.lat, "lng": geo.lng}
    signed = sign_answer(
        ctx.signer, CELL_TOOL, args.model_dump(mode="json"), body, [args.cell], [], "snap-test"
    )
    return DecodeOut.model_validate(signed)


def _chart(ctx: FakeContext, args: ChartIn) -> ChartOut:
    cid = ctx.charts.put(PNG)
    body = {
        "label": args.label,
        "chart_id": cid,
        "chart_png_base64": base64.b64encode(PNG).decode(),
    }
    signed = sign_answer(
        ctx.signer, CHART_TOOL, args.model_dump(mode="json"), body, [], [], "snap-test"
    )
    return ChartOut.model_validate(signed)


@contextmanager
def registered_test_primitives() -> Iterator[None]:
    """Register the test primitives for the duration of the block."""
    added = {
        CELL_TOOL: Primitive(
            CELL_TOOL, DecodeIn, DecodeOut, _decode, "Decode a cell (test)", "Test."
        ),
        CHART_TOOL: Primitive(CHART_TOOL, ChartIn, ChartOut, _chart, "A chart (test)", "Test."),
    }
    PRIMITIVES.update(added)
    core = dispatch.CORE_PRIMITIVES
    dispatch.CORE_PRIMITIVES = (*core, *added)  # listed by MCP tools/list like the core set
    try:
        yield
    finally:
        dispatch.CORE_PRIMITIVES = core
        for name in added:
            PRIMITIVES.pop(name, None)


def clearing_cell(manifest: dict[str, Any]) -> str:
    """cell64 of the centre of the sample's cleared forest patch."""
    event = next(e for e in manifest["events"] if e["kind"] == "forest_clearing")
    return address.encode(event["centre"]["lat"], event["centre"]["lng"])


def bracket(valid_tslots: list[int], day: str) -> list[int]:
    """The last valid tslot before ``day`` and the first at or after it."""
    from store import tslot

    t = tslot.to_slot(day, "day")
    before = [s for s in valid_tslots if s < t]
    after = [s for s in valid_tslots if s >= t]
    return [before[-1], after[0]]


class UvicornThread:
    """uvicorn on 127.0.0.1 (ephemeral port) in a thread, stopped on exit."""

    def __init__(self, app: Any, **config: Any) -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.bind(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.server = uvicorn.Server(
            uvicorn.Config(app, log_level="warning", lifespan="on", **config)
        )
        self.thread = threading.Thread(
            target=self.server.run, kwargs={"sockets": [self.sock]}, daemon=True
        )

    def __enter__(self) -> str:
        self.thread.start()
        deadline = time.monotonic() + 15
        while not self.server.started:
            assert time.monotonic() < deadline, "uvicorn did not start"
            assert self.thread.is_alive(), "uvicorn exited"
            time.sleep(0.02)
        return f"http://127.0.0.1:{self.port}"

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=10)
        self.sock.close()
