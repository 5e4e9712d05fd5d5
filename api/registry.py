"""What a primitive is: a plain function with a pydantic input and output model.

Each primitive is ``fn(ctx, args) -> answer`` with a pydantic input model and a
pydantic output model (field descriptions become the REST OpenAPI schema and
the MCP tool input/output schemas). :func:`primitive` attaches that description
to the function and changes nothing else: it registers nothing. The ordered
list of primitives served lives in one place, :data:`api.dispatch.PRIMITIVES`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel

__all__ = ["Primitive", "primitive", "spec_of"]

_ATTR = "__earthmem_primitive__"


@dataclass(frozen=True)
class Primitive:
    """One query primitive."""

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


def primitive(
    name: str,
    input_model: type[BaseModel],
    output_model: type[BaseModel],
    summary: str,
    description: str = "",
) -> Callable[[Callable[[Any, Any], BaseModel]], Callable[[Any, Any], BaseModel]]:
    """Decorator describing a service function as a primitive (the function is unchanged)."""

    def wrap(fn: Callable[[Any, Any], BaseModel]) -> Callable[[Any, Any], BaseModel]:
        spec = Primitive(
            name, input_model, output_model, fn, summary, description or (fn.__doc__ or "")
        )
        setattr(fn, _ATTR, spec)
        return fn

    return wrap


def spec_of(fn: Callable[..., Any]) -> Primitive:
    """The :class:`Primitive` a function was described as.

    Raises:
        TypeError: ``fn`` was not decorated with :func:`primitive`.
    """
    spec = getattr(fn, _ATTR, None)
    if not isinstance(spec, Primitive):
        raise TypeError(f"{getattr(fn, '__qualname__', fn)!r} is not a primitive")
    return spec
