"""Shared helpers of the entity, neighbour and name-lane tests: a context over the tiny
sample's manifest and an embedded memory database, tokens, and calls through the dispatch."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from api.context import ServiceContext
from api.dispatch import call_primitive, describe_error
from api.errors import ApiError
from api.memory.auth import issue_token
from api.recall.entities import get_entity
from api.receipts import Signer
from store.errors import StoreError


def centre(ctx: ServiceContext, entity_id: str) -> tuple[float, float]:
    """A feature's manifest centre (inside its outline for the sample's features)."""
    entity = get_entity(ctx, entity_id)
    assert entity is not None, entity_id
    return entity.lat, entity.lng


def make_ctx(sample: Path, data: Path, memory: Path) -> ServiceContext:
    return ServiceContext(
        data,
        signer=Signer.generate(),
        manifest_path=sample / "manifest.json",
        memory_url=f"sqlite:///{memory}",
    )


def token_for(ctx: ServiceContext, project: str) -> str:
    return issue_token(ctx.memory(), project, ("read", "write"), actor=f"agent:{project}")[0]


def call(ctx: ServiceContext, name: str, args: dict[str, Any], token: str | None) -> Any:
    return call_primitive(ctx, name, args, token=token)


def code_of(
    ctx: ServiceContext, name: str, args: dict[str, Any], token: str | None
) -> tuple[int, str]:
    with pytest.raises((ApiError, StoreError, ValidationError)) as info:
        call(ctx, name, args, token)
    described = describe_error(info.value)
    assert described is not None, info.value
    return described[0], described[1]["error"]["code"]


def observe(
    ctx: ServiceContext,
    token: str,
    title: str,
    where: dict[str, Any],
    *,
    statement: str | None = None,
    **extra: Any,
) -> str:
    """Write one observation and return its id."""
    args = {
        "type": "observation",
        "title": title,
        "statement": statement or title,
        "tags": ["test"],
        "where": where,
        **extra,
    }
    return str(call(ctx, "memory_create", args, token)["result"]["item"]["id"])
