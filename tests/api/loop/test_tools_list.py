"""The lean MCP tools/list: the documented core set listed, every other primitive callable by name."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client

from api.context import ServiceContext
from api.dispatch import CORE_PRIMITIVES, PRIMITIVES, core_primitives, run
from api.errors import ApiError
from api.mcp_server import INTENT_TOOL, build_server
from api.receipts import Signer, verify_answer

TOOLS_LIST_BUDGET_BYTES = 96_000
"""The documented ceiling of the lean tools/list result (README states the measured size)."""


@pytest.fixture
def tctx(tmp_path: Path) -> ServiceContext:
    return ServiceContext(tmp_path, signer=Signer.generate())


def _session(ctx: ServiceContext, body: Any, *, list_all: bool = False) -> None:
    async def main() -> None:
        with anyio.fail_after(30):
            async with Client(build_server(ctx, list_all=list_all)) as client:
                await body(client)

    anyio.run(main)


def test_tools_list_is_the_core_set_and_others_are_callable(tctx: ServiceContext) -> None:
    sizes: dict[str, int] = {}

    async def body(client: Client) -> None:
        listed = await client.list_tools()
        names = [t.name for t in listed.tools]
        assert set(names) == {f"earthmem_{n}" for n in core_primitives()} | {INTENT_TOOL}
        for must in ("find_similar", "memory_create", "read_cell", "locate", "fact", "tools"):
            assert f"earthmem_{must}" in names
        assert "earthmem_cells_in" not in names
        assert "earthmem_read_cells" not in names
        sizes["lean"] = len(listed.model_dump_json(by_alias=True, exclude_none=True))
        # a primitive left out of the list is called by name all the same
        got = await client.call_tool("earthmem_cells_in", {"bbox": [23.36, 85.33, 23.361, 85.331]})
        assert not got.is_error, got
        assert got.structured_content["n_cells"] > 0
        assert verify_answer(json.loads(json.dumps(got.structured_content))).ok
        unknown = await client.call_tool("earthmem_no_such_tool", {})
        assert unknown.is_error
        err = json.loads(unknown.content[0].text)["error"]
        assert err["code"] == "unknown_tool"
        assert "earthmem_cells_in" in err["details"]["tools"]

    _session(tctx, body)

    async def everything(client: Client) -> None:
        listed = await client.list_tools()
        assert len(listed.tools) == len(PRIMITIVES) + 1
        sizes["all"] = len(listed.model_dump_json(by_alias=True, exclude_none=True))

    _session(tctx, everything, list_all=True)
    assert sizes["lean"] < TOOLS_LIST_BUDGET_BYTES
    assert sizes["lean"] < sizes["all"]


def test_tools_primitive_lists_every_primitive(tctx: ServiceContext) -> None:
    ans = run(tctx, "tools", {})
    assert [t.name for t in ans.tools] == list(PRIMITIVES)
    assert ans.core == [n for n in CORE_PRIMITIVES if n in PRIMITIVES]
    assert {t.name for t in ans.tools if t.core} == set(ans.core)
    assert ans.input_schema is None
    one = run(tctx, "tools", {"name": "earthmem_read_cells"})
    assert "cells" in (one.input_schema or {})["properties"]
    assert "receipt" in (one.output_schema or {})["properties"]
    with pytest.raises(ApiError) as info:
        run(tctx, "tools", {"name": "nope"})
    assert info.value.code == "unknown_primitive"
