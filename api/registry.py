"""The registry of query primitives: one service layer, two thin adapters.

Each primitive is a plain function ``fn(ctx, args) -> answer`` with a pydantic
input model and a pydantic output model (field descriptions become the REST
OpenAPI schema and the MCP tool input/output schemas). REST (:mod:`api.rest`)
and MCP (:mod:`api.mcp_server`) iterate this registry; neither holds logic.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel

__all__ = ["PRIMITIVES", "Primitive", "primitive"]


@dataclass(frozen=True)
class Primitive:
    """One read-only query."""

    name: str
    """Stable name: REST route ``/v1/<name>``, operation id, MCP tool ``earthmem_<name>``."""
    input_model: type[BaseModel]
    """Arguments (validated at the edge)."""
    output_model: type[BaseModel]
    """Answer shape (carries ``receipt``)."""
    fn: Callable[[Any, Any], BaseModel]
    """``fn(ctx: ServiceContext, args: input_model) -> output_model``."""
    summary: str
    """One line for tool lists and OpenAPI."""
    description: str
    """When to use it, limits, and what the answer means."""


PRIMITIVES: dict[str, Primitive] = {}
"""Registered primitives by name (filled when :mod:`api.service` is imported)."""


def primitive(
    name: str,
    input_model: type[BaseModel],
    output_model: type[BaseModel],
    summary: str,
    description: str = "",
) -> Callable[[Callable[[Any, Any], BaseModel]], Callable[[Any, Any], BaseModel]]:
    """Decorator registering a service function as a primitive."""

    def wrap(fn: Callable[[Any, Any], BaseModel]) -> Callable[[Any, Any], BaseModel]:
        if name in PRIMITIVES:
            raise ValueError(f"primitive {name!r} registered twice")
        PRIMITIVES[name] = Primitive(
            name, input_model, output_model, fn, summary, description or (fn.__doc__ or "")
        )
        return fn

    return wrap
