"""The answer model finish() returns is the signed document, field for field."""

from __future__ import annotations

from typing import Any

import pytest

from api.context import ServiceContext
from api.dispatch import PRIMITIVES, run
from api.queries._common import signed_dump
from api.receipts import verify_answer
from store import address


def _calls(cell: str) -> list[tuple[str, dict[str, Any]]]:
    geo = address.decode(cell)
    return [
        ("read_cell", {"cell": cell}),
        ("read_cells", {"cells": [cell, address.neighbours(cell)[0]], "bands": ["ndvi", "vh"]}),
        ("trajectory", {"cell": cell, "band": "ndvi"}),
        ("locate", {"lat": geo.lat, "lng": geo.lng}),
        ("coverage", {"cell": cell}),
    ]


@pytest.mark.parametrize("i", range(5))
def test_answer_model_dumps_to_the_signed_dict(
    ctx: ServiceContext, clearing_cell: str, i: int
) -> None:
    name, args = _calls(clearing_cell)[i]
    ans = run(ctx, name, args)
    dumped = ans.model_dump(mode="json")
    assert signed_dump(ans) == dumped
    assert verify_answer(dumped).ok
    # the same model a full validation of the signed document gives
    again = PRIMITIVES[name].output_model.model_validate(dumped)
    assert again == ans
    assert again.model_dump(mode="json") == dumped
    assert again.model_fields_set == ans.model_fields_set
