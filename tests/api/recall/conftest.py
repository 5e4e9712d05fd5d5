"""Recall's fixtures: the tiny cube (for the gazetteer and the memory write path), a fresh
embedded memory database per test, and a writer that goes through memory_create."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from api.context import ServiceContext
from api.dispatch import call_primitive, describe_error
from api.errors import ApiError
from api.memory.auth import issue_token
from api.receipts import Signer
from store.errors import StoreError


@pytest.fixture
def memory_url(request: pytest.FixtureRequest) -> str:
    """The memory database of a test: a fresh SQLite file, or (a test parametrised with
    :data:`tests.api.recall.backends.BOTH_BACKENDS`) a fresh PostgreSQL database too."""
    backend = getattr(request, "param", "sqlite")
    return str(request.getfixturevalue("postgres_url" if backend == "postgresql" else "sqlite_url"))


@pytest.fixture
def ctx(tiny_store: Any, memory_url: str) -> ServiceContext:
    return ServiceContext(
        tiny_store.data,
        signer=Signer.generate(),
        manifest_path=tiny_store.sample / "manifest.json",
        memory_url=memory_url,
    )


@pytest.fixture
def token(ctx: ServiceContext) -> str:
    return issue_token(ctx.memory(), "ranchi", ("read", "write"), actor="agent:test")[0]


@pytest.fixture
def centre(tiny_store: Any) -> tuple[float, float]:
    ev = tiny_store.event("flood")["centre"]
    return float(ev["lat"]), float(ev["lng"])


class Memory:
    """Writes through memory_create and recalls through the dispatch (the real paths)."""

    def __init__(self, ctx: ServiceContext, token: str, centre: tuple[float, float]) -> None:
        self.ctx, self.token, self.centre = ctx, token, centre

    def write(self, title: str, statement: str, **kw: Any) -> dict[str, Any]:
        lat, lng = self.centre
        dlat, dlng = kw.pop("offset", (0.0, 0.0))
        args: dict[str, Any] = {
            "type": "observation",
            "title": title,
            "statement": statement,
            "tags": kw.pop("tags", ["note"]),
            "where": kw.pop("where", {"lat": lat + dlat, "lng": lng + dlng}),
            **kw,
        }
        token = args.pop("token", self.token)
        return call_primitive(self.ctx, "memory_create", args, token=token)["result"]["item"]

    def recall(self, query: str, token: str | None = "", **kw: Any) -> dict[str, Any]:
        return call_primitive(
            self.ctx, "recall", {"query": query, **kw}, token=self.token if token == "" else token
        )

    def ids(self, query: str, **kw: Any) -> list[str]:
        return [h["id"] for h in self.recall(query, **kw)["hits"]]

    def error(self, args: dict[str, Any], token: str | None = "") -> tuple[int, str]:
        with pytest.raises((ApiError, StoreError, ValidationError)) as info:
            call_primitive(self.ctx, "recall", args, token=self.token if token == "" else token)
        described = describe_error(info.value)
        assert described is not None, info.value
        return described[0], described[1]["error"]["code"]


@pytest.fixture
def mem(ctx: ServiceContext, token: str, centre: tuple[float, float]) -> Memory:
    return Memory(ctx, token, centre)
