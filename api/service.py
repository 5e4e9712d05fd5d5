"""The service layer: every read-only query as a plain function returning a pydantic model.

Importing this module registers the primitives in :data:`api.registry.PRIMITIVES`:
``did_change``, ``trajectory``, ``confirm`` (:mod:`api.queries.cell`),
``area_over_time`` (:mod:`api.queries.area`), ``find_similar`` and ``is_like``
(:mod:`api.queries.similar`), ``where_is``, ``what_is_here`` and ``ask``
(:mod:`api.queries.places`, :mod:`api.queries.describe`, :mod:`api.queries.ask`). Adapters call ``PRIMITIVES[name].fn(ctx, args)``
with a :class:`~api.context.ServiceContext` and an instance of the primitive's
input model, and serialise the answer with ``model_dump(mode="json")``: that
dump is exactly the signed document (its receipt verifies).

:func:`run` does the same from a raw JSON-like mapping, mapping pydantic
validation errors to :class:`~api.errors.InvalidArgument`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ValidationError

from api.context import ServiceContext
from api.errors import InvalidArgument, NotFound
from api.queries.area import area_over_time
from api.queries.cell import confirm, did_change, trajectory
from api.queries.places import ask, what_is_here, where_is
from api.queries.similar import find_similar, is_like
from api.registry import PRIMITIVES

__all__ = [
    "ALIASES",
    "PRIMITIVES",
    "ServiceContext",
    "area_over_time",
    "ask",
    "confirm",
    "did_change",
    "find_similar",
    "is_like",
    "parse_args",
    "run",
    "trajectory",
    "what_is_here",
    "where_is",
]

ALIASES: dict[str, str] = {"find_like": "find_similar"}
"""Intent names that run another primitive."""


def parse_args(name: str, args: Mapping[str, Any]) -> BaseModel:
    """Validate raw arguments into a primitive's input model.

    Raises:
        NotFound: unknown primitive (``unknown_primitive``).
        InvalidArgument: the arguments do not fit the model (``invalid_argument``,
            with pydantic's error list in ``details.errors``).
    """
    prim = PRIMITIVES.get(ALIASES.get(name, name))
    if prim is None:
        raise NotFound(
            f"unknown primitive {name!r}",
            code="unknown_primitive",
            details={"valid": sorted([*PRIMITIVES, *ALIASES])},
        )
    try:
        return prim.input_model.model_validate(dict(args))
    except ValidationError as exc:
        errors = [
            {
                "loc": [str(p) for p in e.get("loc", ())],
                "msg": str(e.get("msg", "")),
                "type": str(e.get("type", "")),
            }
            for e in exc.errors()
        ]
        first = errors[0] if errors else {"loc": [], "msg": "invalid"}
        raise InvalidArgument(
            f"invalid arguments for {prim.name}: {'.'.join(first['loc'])}: {first['msg']}",
            details={"errors": errors},
        ) from None


def run(ctx: ServiceContext, name: str, args: Mapping[str, Any]) -> BaseModel:
    """Validate ``args`` and run primitive ``name`` (aliases such as ``find_like`` accepted)."""
    model = parse_args(name, args)
    return PRIMITIVES[ALIASES.get(name, name)].fn(ctx, model)
