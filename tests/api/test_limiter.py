"""The heavy primitives' gate: bounded concurrency, a bounded queue, typed 503 with retry_after."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from fastapi.testclient import TestClient

from api import dispatch, limiter
from api.context import ServiceContext
from api.dispatch import PRIMITIVES, describe_error, run
from api.errors import ApiError, Busy
from api.limiter import (
    DEFAULT_WRITE_BURST,
    DEFAULT_WRITE_RATE,
    TRIM_GROWTH_BYTES,
    Limiter,
    RateLimiter,
    anon_rss_bytes,
    release_memory,
)
from api.receipts import Signer
from api.rest import create_app


@pytest.fixture
def ctx(tiny_store: Any) -> ServiceContext:
    return ServiceContext(tiny_store.data, signer=Signer.generate())


@pytest.fixture
def gate(monkeypatch: pytest.MonkeyPatch) -> Limiter:
    """One heavy call at a time, no queue: a second one is refused at once."""
    small = Limiter("heavy", 1, 0, 0.0)
    monkeypatch.setitem(dispatch.LIMITERS, "heavy", small)
    return small


def _area_args(tiny_store: Any) -> dict[str, Any]:
    b = tiny_store.manifest["bbox"]
    return {
        "bbox": [b[1], b[0], b[3], b[2]],
        "start_date": "2024-01-01",
        "end_date": "2024-12-31",
        "chart": False,
    }


def test_primitives_declare_their_cost_class() -> None:
    costs = {name: p.cost for name, p in PRIMITIVES.items()}
    assert {n for n, c in costs.items() if c == "heavy"} == {
        "area_over_time",
        "find_similar",
        "ask",
        "read_area",  # grows with the area
        "cells_in",  # the inside test grows with the area
        "fact",  # may read up to 32 older snapshots
        "coverage",  # reads the flags of every overpass over an area
        "compare_same_doy",  # an area's overpasses in every year's season
    }
    assert set(costs.values()) <= {"light", "heavy"}


def test_a_heavy_call_beyond_the_limit_gets_busy_with_retry_after(
    ctx: ServiceContext, gate: Limiter, tiny_store: Any
) -> None:
    args = _area_args(tiny_store)
    with gate.slot():  # another heavy call is running
        with pytest.raises(Busy) as err:
            run(ctx, "area_over_time", args)
        status, body = describe_error(err.value) or (0, {})
        assert status == 503
        assert body["error"]["code"] == "busy"
        details = body["error"]["details"]
        assert isinstance(details["retry_after"], int)
        assert details["retry_after"] >= 1
        assert (details["cost_class"], details["concurrency"], details["queue"]) == ("heavy", 1, 0)
        place = run(ctx, "where_is", {"description": "Ranchi"})  # light calls do not wait
        assert place.model_dump(mode="json")["place"]
    assert gate.info()["running"] == 0
    run(ctx, "area_over_time", args)  # the slot is free again


def test_rest_answers_503_with_a_retry_after_header(
    ctx: ServiceContext, gate: Limiter, tiny_store: Any
) -> None:
    client = TestClient(create_app(ctx), raise_server_exceptions=False)
    with gate.slot():
        resp = client.post("/v1/area_over_time", json=_area_args(tiny_store))
    assert resp.status_code == 503, resp.text
    body = resp.json()["error"]
    assert body["code"] == "busy"
    assert resp.headers["retry-after"] == str(body["details"]["retry_after"])
    assert client.post("/v1/area_over_time", json=_area_args(tiny_store)).status_code == 200


def test_a_queued_call_waits_for_the_slot_and_a_full_queue_is_refused() -> None:
    gate = Limiter("heavy", 1, 1, 30.0)
    entered = threading.Event()
    release = threading.Event()
    order: list[str] = []

    def holder() -> None:
        with gate.slot():
            entered.set()
            release.wait(10)
            order.append("first")

    def waiter() -> None:
        with gate.slot():
            order.append("second")

    t1 = threading.Thread(target=holder)
    t1.start()
    assert entered.wait(10)
    t2 = threading.Thread(target=waiter)
    t2.start()
    while gate.info()["waiting"] == 0:  # the waiter is queued
        threading.Event().wait(0.01)
    with pytest.raises(Busy, match="queue is full"), gate.slot():
        pass
    release.set()
    t1.join(10)
    t2.join(10)
    assert order == ["first", "second"]
    assert gate.info() | {"running": 0, "waiting": 0} == gate.info()


def test_a_wait_longer_than_the_bound_is_refused() -> None:
    gate = Limiter("heavy", 1, 4, 0.05)
    with gate.slot(), pytest.raises(Busy, match="no slot freed"), gate.slot():
        pass
    assert gate.info()["waiting"] == 0


def test_limits_are_checked_and_memory_release_is_harmless() -> None:
    with pytest.raises(ValueError, match="concurrency"):
        Limiter("heavy", 0, 1, 1.0)
    assert release_memory() in (True, False)


def test_the_write_limit_comes_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EARTHMEM_WRITE_RATE", "2")
    monkeypatch.setenv("EARTHMEM_WRITE_BURST", "3")
    limiter = RateLimiter.from_env()
    for _ in range(3):
        limiter.take("t")  # the burst
    with pytest.raises(ApiError) as err:
        limiter.take("t")
    assert err.value.code == "rate_limited"
    for bad in ("fast", "-1", "0", "nan"):  # a malformed value falls back to the default
        monkeypatch.setenv("EARTHMEM_WRITE_RATE", bad)
        monkeypatch.setenv("EARTHMEM_WRITE_BURST", bad)
        fallback = RateLimiter.from_env()
        assert (fallback.rate, fallback.burst) == (DEFAULT_WRITE_RATE, DEFAULT_WRITE_BURST)


def test_memory_is_given_back_only_after_it_grew(monkeypatch: pytest.MonkeyPatch) -> None:
    rss = [100 << 20]
    trims: list[int] = []

    def trim() -> bool:
        trims.append(rss[0])
        rss[0] = 90 << 20  # what the trim gave back
        return True

    monkeypatch.setattr(limiter, "anon_rss_bytes", lambda: rss[0])
    monkeypatch.setattr(limiter, "release_memory", trim)
    monkeypatch.setattr(limiter, "TRIM_AFTER_S", 0.0)
    gate = Limiter("heavy", 1, 0, 1.0)
    with gate.slot():  # the first heavy call gives memory back
        pass
    assert trims == [100 << 20]
    rss[0] += TRIM_GROWTH_BYTES - 1  # an ordinary call: its pages stay for the next one
    with gate.slot():
        pass
    assert len(trims) == 1
    rss[0] += 1  # a large one: given back
    with gate.slot():
        pass
    assert len(trims) == 2
    assert limiter.TRIM_GROWTH_BYTES == TRIM_GROWTH_BYTES


def test_a_short_call_never_gives_memory_back(monkeypatch: pytest.MonkeyPatch) -> None:
    trims: list[bool] = []

    def trim() -> bool:
        trims.append(True)
        return True

    monkeypatch.setattr(limiter, "release_memory", trim)
    monkeypatch.setattr(limiter, "TRIM_AFTER_S", 3600.0)
    gate = Limiter("heavy", 1, 0, 1.0)
    with gate.slot():
        pass
    assert trims == []


def test_anonymous_resident_memory_is_read() -> None:
    held = anon_rss_bytes()
    assert held is None or held > 0
