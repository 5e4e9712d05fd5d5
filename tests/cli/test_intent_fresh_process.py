"""`earthmem intent '<json>'` answers every intent type in a fresh process (as the README runs it)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from api.context import ServiceContext
from api.intent import INTENT_TYPES
from cli.examples import example_intents

REPO = Path(__file__).resolve().parents[2]


def _user_data_dir(tiny_store: Any, root: Path) -> Path:
    """A data directory laid out as `make run` leaves it: the store plus ``sample/``.

    Links to the session's tiny store (read only) and its sample, so the gazetteer
    finds the sample's named features as it does for a user.
    """
    data = root / "data"
    data.mkdir()
    for name in ("cube.icechunk", "inventory", "knn"):
        (data / name).symlink_to(tiny_store.data / name, target_is_directory=True)
    (data / "sample").symlink_to(tiny_store.sample, target_is_directory=True)
    return data


def test_every_intent_type_answers_in_a_fresh_process(tiny_store: Any, tmp_path: Path) -> None:
    payloads = example_intents(ServiceContext(tiny_store.data), tiny_store.manifest)
    # recall reads memories with a token (tests/api/recall/test_surfaces.py runs its intent);
    # the agent's-loop rows are run by tests/api/loop/test_intent_rows.py (in process)
    loop_rows = {"read_cell", "read_area", "locate", "coverage", "compare_same_doy", "fact"}
    elsewhere = {"recall", "verify_receipt", *loop_rows}
    assert sorted({p["type"] for p in payloads}) == sorted(set(INTENT_TYPES) - elsewhere)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    data = str(_user_data_dir(tiny_store, tmp_path))
    for payload in payloads:
        proc = subprocess.run(
            [sys.executable, "-m", "cli.main", "intent", json.dumps(payload), "--data", data],
            capture_output=True,
            text=True,
            env=env,
            cwd=REPO,
            timeout=300,
        )
        assert proc.returncode == 0, (payload["type"], proc.stderr[-2000:])
        answer = json.loads(proc.stdout)
        assert answer["status"] == "answered", (payload["type"], answer)
        assert answer["type"] == payload["type"]
        assert answer["result"]["receipt"]["signature"]
