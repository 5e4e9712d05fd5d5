"""Helpers shared by the query modules: argument checks, facts, signing."""

from __future__ import annotations

import functools
import os
import threading
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any, TypeVar

from pydantic import BaseModel

from api.context import ServiceContext
from api.errors import InvalidArgument, store_errors
from api.jsonbody import dump_json
from api.models.common import Receipt
from api.receipts import sign_answer
from store import address
from store.cube.bands import FLAG_BANDS, INDEX_NAMES, SCALAR_BANDS, clear_flag, registered
from store.errors import StoreError
from store.facts import fact_record
from store.tslot import MAX_DAY_SLOT, MAX_YEAR_SLOT, slot_to_date

if TYPE_CHECKING:
    from store.cube.read import CubeReader

__all__ = [
    "ENV_CHECK_ANSWERS",
    "AnswerShapeError",
    "CellRef",
    "canonical_scalar_band",
    "check_window",
    "clear_info",
    "finish",
    "finish_exact",
    "make_fact",
    "parse_cell_arg",
    "signed_dump",
    "slot_date",
    "store_errors",
]

M = TypeVar("M", bound=BaseModel)


class CellRef:
    """A parsed cell argument."""

    __slots__ = ("cell", "lat", "lat_q", "lng", "lng_q", "raw")

    def __init__(self, raw: int) -> None:
        geo = address.decode(raw)
        self.raw = raw
        self.cell = geo.cell
        self.lat_q = geo.lat_q
        self.lng_q = geo.lng_q
        self.lat = geo.lat
        self.lng = geo.lng


def parse_cell_arg(value: Any, name: str = "cell") -> CellRef:
    """Parse a cell64 argument.

    Raises:
        InvalidArgument: ``invalid_cell`` (malformed, non-geo, wrong type).
    """
    if not isinstance(value, str) or not value.strip():
        raise InvalidArgument(
            f"{name} must be a cell64 string, got {value!r}"[:200], code="invalid_cell"
        )
    try:
        return _cell_ref(value.strip())
    except StoreError as exc:
        raise InvalidArgument(f"{name}: {exc}", code="invalid_cell") from exc


@functools.lru_cache(maxsize=4096)
def _cell_ref(text: str) -> CellRef:
    # Parsed cells are cached (errors are not); CellRef is never mutated.
    return CellRef(address.parse_cell(text))


def canonical_scalar_band(band: Any, *, allow_flags: bool = False) -> str:
    """Canonical scalar band name; short index names (``ndvi``, ``vh``) accepted.

    Raises:
        InvalidArgument: ``unknown_band``.
    """
    if isinstance(band, str):
        name = band.strip()
        if name in INDEX_NAMES:
            return INDEX_NAMES[name]
        if name in SCALAR_BANDS or (allow_flags and name in FLAG_BANDS):
            return name
    valid = list(SCALAR_BANDS) + (list(FLAG_BANDS) if allow_flags else [])
    raise InvalidArgument(
        f"unknown band {band!r}"[:200] + f"; valid: {', '.join(valid)}", code="unknown_band"
    )


def check_window(window: Any, *, tempo: str = "day") -> tuple[int, int]:
    """Validate ``[t0, t1]``: two increasing non-negative integers inside the tempo's range.

    Raises:
        InvalidArgument: ``invalid_window``.
    """
    limit = MAX_DAY_SLOT if tempo == "day" else MAX_YEAR_SLOT
    ok = (
        isinstance(window, list | tuple)
        and len(window) == 2
        and all(isinstance(w, int) and not isinstance(w, bool) for w in window)
    )
    if not ok:
        raise InvalidArgument(
            f"window must be exactly two integer tslots [t0, t1], got {window!r}"[:200],
            code="invalid_window",
        )
    t0, t1 = int(window[0]), int(window[1])
    if not 0 <= t0 < t1 <= limit:
        raise InvalidArgument(
            f"window [{t0}, {t1}] must be increasing tslots within 0..{limit}",
            code="invalid_window",
        )
    return t0, t1


def slot_date(tslot: int, tempo: str = "day") -> str:
    """ISO date of a slot."""
    return _slot_date(int(tslot), tempo)


@functools.lru_cache(maxsize=65536)
def _slot_date(tslot: int, tempo: str) -> str:
    return slot_to_date(tslot, tempo).isoformat()


def clear_info(band: str) -> tuple[str, int]:
    """(flag band, clear value) of a band's family (scene bands only).

    Raises:
        KeyError: a band whose family has no observation flag (Tessera).
    """
    flag = clear_flag(band)
    if flag is None:
        raise KeyError(band)
    return flag


def make_fact(
    ctx: ServiceContext,
    reader: CubeReader | None,
    cell: str,
    band: str,
    tslot: int,
    value: Any,
    *,
    lat_q: int | None = None,
    lng_q: int | None = None,
    sources: Iterable[str] | None = None,
    derivation: str | None = None,
    tempo: str = "day",
) -> dict[str, Any]:
    """A fact dict (with its id); sources from the reader's snapshot's inventory unless given.

    ``reader`` None (a k-NN table served without a cube): no inventory, no sources.
    """
    if sources is None:
        if reader is None:
            srcs = []
        elif lat_q is None or lng_q is None:
            srcs = ctx.sources_any(reader, band, tslot)
        else:
            srcs = ctx.sources(reader, band, tslot, lat_q, lng_q)
    else:
        srcs = sorted(set(sources))
    deriv = derivation or registered(band).derivation
    return fact_record(cell, band, tslot, value, srcs, deriv, slot_date(tslot, tempo))


def finish(
    ctx: ServiceContext,
    primitive: str,
    args: BaseModel,
    body_model: type[BaseModel],
    answer_model: type[M],
    answer: Mapping[str, Any],
    cells: Iterable[str],
    snapshot_id: str,
    fact_ids: Iterable[str] | None = None,
) -> M:
    """Validate the body, sign its JSON dump and return the answer model.

    ``answer_model.model_dump(mode="json")`` of the result equals the signed dict.
    Fact ids are ``fact_ids``, or when None taken from ``answer["facts"]``.
    """
    checked = body_model.model_validate(dict(answer))
    body = checked.model_dump(mode="json")
    if fact_ids is None:
        fact_ids = [f["fact_id"] for f in body.get("facts", [])]
    query = args.model_dump(mode="json", exclude_none=True)
    signed = sign_answer(ctx.signer, primitive, query, body, cells, fact_ids, snapshot_id)
    model = _signed_model(answer_model, checked, signed)
    _last_signed.value = (model, signed)
    return model


ENV_CHECK_ANSWERS = "EARTHMEM_CHECK_ANSWERS"
"""``"1"``: :func:`finish_exact` checks every answer against its model (the test suite sets it)."""


class AnswerShapeError(AssertionError):
    """An answer :func:`finish_exact` signed is not its model's JSON dump (a bug: the
    adapters report it as an internal error)."""


def finish_exact(
    ctx: ServiceContext,
    primitive: str,
    args: BaseModel,
    answer_model: type[BaseModel],
    answer: Mapping[str, Any],
    cells: Iterable[str],
    snapshot_id: str,
    fact_ids: Iterable[str] | None = None,
) -> dict[str, Any]:
    """The signed dict :func:`finish` makes (``finish(...).model_dump(mode="json")``), for a
    body that already is its model's JSON dump: signed as it is, no model built.

    For a body built by our own typed code with the field order of the body model and the
    exact JSON types its dump gives (``float`` for a float field, a real ``bool``, plain
    ``int``, ``str``, ``None``, lists and dicts of those): validating it, dumping it and
    building the answer model would give back the same document, and that is ~10 % of a
    light query's CPU. A primitive opts in (:attr:`api.registry.Primitive.signed`) only for
    bodies of that kind, and its tests hold it to the document :func:`finish` signs. With
    :data:`ENV_CHECK_ANSWERS` set (as in the test suite) the signed answer is validated into
    ``answer_model`` and must dump to itself, byte for byte.

    Raises:
        AnswerShapeError: with :data:`ENV_CHECK_ANSWERS` set, the answer breaks its model.
    """
    if fact_ids is None:
        fact_ids = [f["fact_id"] for f in answer.get("facts", [])]
    query = args.model_dump(mode="json", exclude_none=True)
    signed = sign_answer(ctx.signer, primitive, query, answer, cells, fact_ids, snapshot_id)
    if os.environ.get(ENV_CHECK_ANSWERS) == "1":
        check_exact(answer_model, signed)
    return signed


def check_exact(answer_model: type[BaseModel], signed: Mapping[str, Any]) -> None:
    """That ``signed`` is a valid ``answer_model`` whose JSON dump is ``signed`` itself, byte
    for byte (types and key order included).

    Raises:
        AnswerShapeError: it is not.
    """
    try:
        dumped = answer_model.model_validate(signed).model_dump(mode="json")
    except ValueError as exc:  # pydantic's ValidationError
        raise AnswerShapeError(f"{answer_model.__name__}: {exc}") from exc
    if dump_json(dumped) != dump_json(signed):
        raise AnswerShapeError(f"{answer_model.__name__}: the answer is not its model's dump")


def _signed_model(answer_model: type[M], checked: BaseModel, signed: dict[str, Any]) -> M:
    """The answer model of a signed body: the validated body's fields and the validated
    receipt, not validated a second time when the answer is exactly the body and a receipt."""
    fields = answer_model.model_fields
    if set(fields) != {*type(checked).model_fields, "receipt"}:
        return answer_model.model_validate(signed)
    values = {name: getattr(checked, name) for name in type(checked).model_fields}
    values["receipt"] = Receipt.model_validate(signed["receipt"])
    return answer_model.model_construct(**values)


_last_signed = threading.local()


def signed_dump(answer: BaseModel) -> dict[str, Any] | None:
    """The signed dict :func:`finish` made ``answer`` from, if it was this thread's last one.

    Equal to ``answer.model_dump(mode="json")`` (that is what was signed), so an
    adapter can send it without dumping the model again. Taken once: a second
    call returns None.
    """
    last = getattr(_last_signed, "value", None)
    if last is None or last[0] is not answer:
        return None
    _last_signed.value = None
    return dict(last[1])
