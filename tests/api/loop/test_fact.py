"""fact: ids from answers resolve in a fresh process and after the cube moves on; bad ids typed."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from api.context import ServiceContext
from api.dispatch import run
from api.errors import ApiError
from api.receipts import Signer, verify_answer
from store import address

REPO = Path(__file__).resolve().parents[3]


def _code(ctx: ServiceContext, fact_id: Any) -> str:
    with pytest.raises(ApiError) as info:
        run(ctx, "fact", {"fact_id": fact_id})
    return info.value.code


def test_a_cited_fact_resolves_in_a_fresh_process(
    ctx: ServiceContext, tiny_store: Any, clearing_cell: str
) -> None:
    cited = run(ctx, "read_cell", {"cell": clearing_cell, "bands": ["ndvi", "s2.clear"]}).facts
    for f in cited:
        ans = run(ctx, "fact", {"fact_id": f.fact_id})
        assert ans.fact == f
        assert ans.current_holds
        assert ans.current_fact is None
        assert ans.found_in_snapshot == ans.current_snapshot
        assert verify_answer(json.loads(json.dumps(ans.model_dump(mode="json")))).ok
    code = (
        "import json, sys; from api.context import ServiceContext; from api.dispatch import "
        "call_primitive; ctx = ServiceContext(sys.argv[1]); "
        "print(json.dumps(call_primitive(ctx, 'fact', {'fact_id': sys.argv[2]})['fact']))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, str(tiny_store.data), cited[0].fact_id],
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO), "PYTHONHASHSEED": "7"},
        capture_output=True,
        text=True,
        check=True,
        timeout=300,
    )
    assert json.loads(out.stdout.strip().splitlines()[-1]) == cited[0].model_dump(mode="json")


def test_a_changed_value_names_the_old_snapshot(
    tiny_store: Any, tmp_path: Path, clearing_cell: str
) -> None:
    from store.cube import CubeWriter

    data = tmp_path / "data"
    shutil.copytree(tiny_store.data, data, symlinks=True)
    live = ServiceContext(data, signer=Signer.generate(), tip_check_seconds=0.0)
    tr = run(live, "trajectory", {"cell": clearing_cell, "band": "ndvi"})
    old_fact = tr.facts[0]
    g = address.decode(clearing_cell)
    CubeWriter(data).write_region(
        "indices.ndvi",
        [old_fact.tslot],
        g.lat_q,
        g.lng_q,
        np.full((1, 1, 1), 0.123, np.float32),
        partition_key="test",
    )
    ans = run(live, "fact", {"fact_id": old_fact.fact_id})
    assert ans.fact == old_fact
    assert not ans.current_holds
    assert ans.found_in_snapshot == tr.snapshot_id
    assert ans.current_snapshot != tr.snapshot_id
    assert ans.current_fact is not None
    assert ans.current_fact.value == pytest.approx(0.123)
    assert ans.snapshots_searched == 2
    # the new value's fact resolves at the tip
    assert run(live, "fact", {"fact_id": ans.current_fact.fact_id}).current_holds


def test_unknown_and_malformed_ids_are_typed(ctx: ServiceContext, clearing_cell: str) -> None:
    real = run(ctx, "read_cell", {"cell": clearing_cell, "bands": ["ndvi"]}).facts[0].fact_id
    forged = "f2:" + "0" * 64 + real[67:]  # a real address, a digest no snapshot holds
    assert _code(ctx, forged) == "fact_not_found"
    assert _code(ctx, "f1:" + real[3:67]) == "fact_not_found"
    assert _code(ctx, "f2:" + "0" * 64 + ":geom:" + "a" * 32 + ":indices.ndvi:5") == (
        "fact_not_found"
    )
    assert _code(ctx, "f2:" + "0" * 64 + f":{clearing_cell}:geotessera:54") == "fact_not_found"
    assert _code(ctx, "f2:" + "0" * 64 + ":notacell:indices.ndvi:5") == "invalid_cell"
    assert _code(ctx, "nonsense") == "invalid_fact_id"
    assert _code(ctx, "f2:" + "0" * 64) == "invalid_fact_id"
    assert _code(ctx, 5) == "invalid_argument"
