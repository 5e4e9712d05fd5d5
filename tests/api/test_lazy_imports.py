"""Start-up stays light: the MCP server, the dispatch and the CLI load the cube's storage
libraries (zarr, icechunk, pyarrow, pandas), numba and the memory database's SQLAlchemy only
when a call needs them.

Every stdio MCP server (one per Inspector CLI run) and every ``earthmem`` command pays its
imports; a tools/list, a bad argument or a receipt check must not pay for the cube. Checked
in a fresh interpreter (this process has long imported everything).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

HEAVY = ("zarr", "icechunk", "pyarrow", "pandas", "numba", "fastapi", "sqlalchemy")
"""Imported on first use only (seconds of CPU at every process start)."""


def _loaded_after(code: str) -> list[str]:
    probe = (
        f"{code}\nimport json, sys\nprint(json.dumps([m for m in {HEAVY!r} if m in sys.modules]))"
    )
    proc = subprocess.run(
        [sys.executable, "-c", probe],
        cwd=ROOT,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    loaded = json.loads(proc.stdout.strip().splitlines()[-1])
    assert isinstance(loaded, list)
    return loaded


@pytest.mark.parametrize(
    "code",
    [
        "import api.mcp_server",
        "import api.dispatch",
        # describing every tool (tools/list, OpenAPI) and validating arguments
        "from api.mcp_server import build_server; build_server(None, list_all=True)",
        "from api.dispatch import PRIMITIVES\n"
        "for p in PRIMITIVES.values():\n"
        "    p.input_model.model_json_schema(); p.output_model.model_json_schema()",
        "import api.dispatch as d\n"
        "try:\n    d.parse_args('read_cell', {'cell': 'zz.top'})\nexcept Exception:\n    pass",
    ],
    ids=["mcp_server", "dispatch", "build_server", "schemas", "bad_argument"],
)
def test_describing_and_validating_load_no_storage_library(code: str) -> None:
    assert _loaded_after(code) == []


def test_the_reader_still_loads_them_when_used() -> None:
    """The lazy names resolve to the real objects (the reader, the k-NN table, the kernels)."""
    code = (
        "import store.cube, store.knn\n"
        "from store.cube.read import CubeReader\n"
        "from store.knn.table import KnnTable\n"
        "assert store.cube.CubeReader is CubeReader\n"
        "assert store.knn.KnnTable is KnnTable\n"
        "from api.queries.area_stats import weighted_stats\n"
        "import numpy as np\n"
        "assert weighted_stats(np.array([1.0, 2.0, 3.0]), np.ones(3))['median'] == 2.0"
    )
    assert set(_loaded_after(code)) >= {"zarr", "icechunk", "numba"}
