"""Answers signed without their model (api.queries._common.finish_exact): the same documents.

did_change's adapters call :func:`api.queries.change.did_change_signed`, which signs the body
it builds as it is; :func:`api.queries.change.did_change` validates it, dumps it and builds
the answer model. With the receipts' request id and time pinned, both sign the same bytes.
"""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from api import receipts
from api.context import ServiceContext
from api.dispatch import PRIMITIVES, call_primitive, run
from api.errors import ApiError
from api.jsonbody import dump_json
from api.models import DidChangeAnswer, DidChangeIn
from api.queries import change
from api.queries._common import (
    ENV_CHECK_ANSWERS,
    AnswerShapeError,
    check_exact,
    finish_exact,
)
from api.queries.change import did_change, did_change_signed
from api.receipts import Signer, verify_answer
from store import address


@pytest.fixture
def pinned(monkeypatch: pytest.MonkeyPatch) -> None:
    """Receipts with a fixed time and request id (the same for both paths)."""
    monkeypatch.setattr(receipts, "_served_at_now", lambda: "2026-12-03T10:00:00.000Z")
    monkeypatch.setattr(receipts, "_request_id", lambda: "4f" * 16)


def _both(ctx: ServiceContext, args: dict[str, Any]) -> tuple[bytes, bytes, dict[str, Any]]:
    """(the model path's dump, the exact path's dict) as JSON bytes, and the exact dict."""
    model = DidChangeIn.model_validate(args)
    via_model = did_change(ctx, model).model_dump(mode="json")
    exact = did_change_signed(ctx, model)
    return dump_json(via_model), dump_json(exact), exact


def _cases(ctx: ServiceContext, cell: str) -> list[dict[str, Any]]:
    """did_change arguments around ``cell`` (the cells of a 7 x 7 patch, and those on its
    block's edges that hold data); several bands; windows between clear and unclear
    observations."""
    reader = ctx.reader()
    g = address.decode(cell)
    col = ctx.column(reader, "indices.ndvi", g.lat_q, g.lng_q)
    ys = [col.lat_q0 - 1, col.lat_q0, *range(g.lat_q - 3, g.lat_q + 4)]
    xs = [col.lng_q0 - 1, col.lng_q0, *range(g.lng_q - 3, g.lng_q + 4)]
    out = []
    for la, ln in itertools.product(ys, xs):
        c = address.format_cell(address.q_to_raw(la, ln))
        for band in ("ndvi", "indices.evi", "s1.vh", "s1.vv"):
            traj = run(ctx, "trajectory", {"cell": c, "band": band})
            slots = [p.tslot for p in traj.points if p.value is not None]
            unclear = [p.tslot for p in traj.points if p.value is not None and not p.clear]
            if len(slots) < 2:
                continue
            windows = {(slots[0], slots[-1]), (slots[0], slots[1]), (slots[-2], slots[-1])}
            if unclear and unclear[0] != slots[-1]:
                windows.add((unclear[0], slots[-1]))
            out += [{"cell": c, "band": band, "window": list(w)} for w in sorted(windows)]
    return out


def test_did_change_signs_the_same_document_both_ways(
    tiny_store: Any, clearing_cell: str, pinned: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(ENV_CHECK_ANSWERS, raising=False)  # the unchecked path itself
    ctx = ServiceContext(tiny_store.data, signer=Signer.generate())
    cases = _cases(ctx, clearing_cell)
    assert len(cases) > 40
    significant = set()
    for args in cases:
        via_model, exact_bytes, exact = _both(ctx, args)
        assert exact_bytes == via_model, args
        assert verify_answer(exact).ok
        check_exact(DidChangeAnswer, exact)
        significant.add(exact["significant"])
    assert significant == {True, False}


def test_did_change_without_neighbours_signs_the_same_document(
    tiny_store: Any, clearing_cell: str, pinned: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """neighbour_delta_median is null when no neighbour has both values."""
    monkeypatch.delenv(ENV_CHECK_ANSWERS, raising=False)
    monkeypatch.setattr(change, "neighbour_deltas_of", lambda *a: ([], []))
    ctx = ServiceContext(tiny_store.data, signer=Signer.generate())
    args = _cases(ctx, clearing_cell)[0]
    via_model, exact_bytes, exact = _both(ctx, args)
    assert exact_bytes == via_model
    assert exact["significance"]["neighbour_delta_median"] is None
    assert exact["receipt"]["cells"] == [exact["cell"]]


def test_adapters_get_the_signed_dict_without_the_model(
    tiny_store: Any, clearing_cell: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """call_primitive (REST, MCP, intents) takes did_change's signed function; errors are
    the same typed errors."""
    assert PRIMITIVES["did_change"].signed is did_change_signed

    def no_model(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("the answer model was built")

    monkeypatch.setattr(change, "finish", no_model)
    ctx = ServiceContext(tiny_store.data, signer=Signer.generate())
    args = _cases(ctx, clearing_cell)[0]
    answer = call_primitive(ctx, "did_change", args)
    assert verify_answer(answer).ok
    with pytest.raises(AssertionError, match="model was built"):
        run(ctx, "did_change", args)
    bad = {**args, "window": [args["window"][0], args["window"][0] + 1]}
    with pytest.raises(ApiError) as exc:
        call_primitive(ctx, "did_change", bad)
    assert exc.value.code == "no_observation"


def _signed(ctx: ServiceContext, clearing_cell: str) -> dict[str, Any]:
    return call_primitive(ctx, "did_change", _cases(ctx, clearing_cell)[0])


def test_check_exact_refuses_what_is_not_the_models_dump(tiny_store: Any, ctx: Any) -> None:
    c = tiny_store.event("forest_clearing")["centre"]
    good = _signed(ctx, address.encode(c["lat"], c["lng"]))
    check_exact(DidChangeAnswer, good)
    as_int = {**good, "significance": {**good["significance"], "sigma_floor": 1}}
    with pytest.raises(AnswerShapeError, match="not its model's dump"):
        check_exact(DidChangeAnswer, as_int)  # valid (an int for a float) but dumps 1.0
    reordered = {"lat": good["lat"], **{k: v for k, v in good.items() if k != "lat"}}
    with pytest.raises(AnswerShapeError, match="not its model's dump"):
        check_exact(DidChangeAnswer, reordered)
    with pytest.raises(AnswerShapeError, match="DidChangeAnswer"):
        check_exact(DidChangeAnswer, {**good, "extra": 1})
    with pytest.raises(AnswerShapeError):
        check_exact(DidChangeAnswer, {**good, "changed": "yes"})


def test_finish_exact_checks_only_when_asked(
    tiny_store: Any, ctx: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    c = tiny_store.event("forest_clearing")["centre"]
    good = _signed(ctx, address.encode(c["lat"], c["lng"]))
    body = {k: v for k, v in good.items() if k != "receipt"}
    body["lat"] = int(body["lat"])  # the model would dump a float
    args = DidChangeIn.model_validate(good["receipt"]["query"])
    sign = (ctx, "did_change", args, DidChangeAnswer, body, [body["cell"]], good["snapshot_id"])
    monkeypatch.setenv(ENV_CHECK_ANSWERS, "1")
    with pytest.raises(AnswerShapeError):
        finish_exact(*sign)
    monkeypatch.delenv(ENV_CHECK_ANSWERS)
    signed = finish_exact(*sign)  # unchecked: signed as given
    assert type(signed["lat"]) is int
    assert verify_answer(signed).ok
