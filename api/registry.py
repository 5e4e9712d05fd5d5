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
from typing import Any, Literal

from pydantic import BaseModel

__all__ = ["COST_CLASSES", "Access", "Cost", "Primitive", "primitive", "spec_of"]

Access = Literal["public", "read", "write"]
"""Who may call a primitive: anyone (the cube), or a token that may read / write memories."""
Cost = Literal["light", "heavy"]
COST_CLASSES: tuple[Cost, ...] = ("light", "heavy")
"""``light``: bounded by its arguments' caps (a cell, a place); ``heavy``: work that
grows with the request (areas, k-NN scans, ``ask``), run through a bounded gate
(:mod:`api.limiter`) by :mod:`api.dispatch`."""

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
    fn: Callable[..., BaseModel]
    """``fn(ctx: ServiceContext, args: input_model[, caller]) -> output_model``."""
    summary: str
    """One line for tool lists and OpenAPI."""
    description: str
    """When to use it, limits, and what the answer means."""
    cost: Cost = "light"
    """Cost class (:data:`COST_CLASSES`): which gate of :mod:`api.limiter` it waits at."""
    access: Access = "public"
    """``public``: ``fn(ctx, args)``. ``read`` / ``write``: ``fn(ctx, args, caller)`` with the
    :class:`api.memory.auth.Caller` its bearer token stands for (checked by the dispatch)."""
    consults_memory: bool = False
    """A public primitive that also reads the caller's memory when a token is presented:
    ``fn(ctx, args, caller)`` with the caller, or None without a token (a token that is
    presented must be valid)."""
    signed: Callable[..., dict[str, Any]] | None = None
    """Optional: the same call (same arguments) returning the signed answer dict itself, the
    document ``fn``'s answer dumps to (``model_dump(mode="json")``), without building the
    answer model (:func:`api.queries._common.finish_exact`). Adapters, which send that dict,
    call it through :func:`api.dispatch.call_primitive`; direct callers keep ``fn``."""

    @property
    def read_only(self) -> bool:
        """Whether calling it changes nothing (MCP read-only annotation)."""
        return self.access != "write"


def primitive(
    name: str,
    input_model: type[BaseModel],
    output_model: type[BaseModel],
    summary: str,
    description: str = "",
    *,
    cost: Cost = "light",
    access: Access = "public",
    consults_memory: bool = False,
    signed: Callable[..., dict[str, Any]] | None = None,
) -> Callable[[Callable[..., BaseModel]], Callable[..., BaseModel]]:
    """Decorator describing a service function as a primitive (the function is unchanged)."""
    if cost not in COST_CLASSES:
        raise ValueError(f"cost must be one of {COST_CLASSES}, got {cost!r}")

    def wrap(fn: Callable[..., BaseModel]) -> Callable[..., BaseModel]:
        spec = Primitive(
            name,
            input_model,
            output_model,
            fn,
            summary,
            description or (fn.__doc__ or ""),
            cost,
            access,
            consults_memory,
            signed,
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
