"""Several ingests started at once on a fresh data directory share one usable Dagster instance.

Each process runs what ``earthmem ingest`` runs before its first partition: open (create and
migrate) the persistent instance under ``<data>/dagster_home`` and register the area's blocks.
Without the setup lock this failed one process (``UNIQUE constraint failed:
dynamic_partitions``, ``table secondary_indexes already exists``) and could leave ``runs.db``
with two alembic heads, after which every ingest failed.
"""

from __future__ import annotations

import sqlite3
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from pipelines.instance import open_instance
from pipelines.partitions import BLOCKS, area_blocks

ROOT = Path(__file__).resolve().parents[2]
BBOX = (23.355, 85.329, 23.366, 85.341)

SCRIPT = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    go, home, ready = Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3])
    from pipelines.instance import open_instance
    from pipelines.partitions import register_area_blocks
    ready.touch()  # imported: waiting for the others
    while not go.exists():  # every process imported Dagster: start together
        time.sleep(0.005)
    with open_instance(home, Path("deploy/dagster.yaml")) as inst:
        print(len(register_area_blocks(inst, {bbox})))
    """
).format(bbox=BBOX)


def _race(tmp: Path, n: int) -> tuple[Path, list[tuple[int, str]]]:
    home = tmp / "data" / "dagster_home"
    tmp.mkdir(parents=True)
    go = tmp / "go"
    ready = [tmp / f"ready-{i}" for i in range(n)]
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", SCRIPT, str(go), str(home), str(flag)],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for flag in ready
    ]
    deadline = time.monotonic() + 300  # a hang guard, not a speed goal
    # start them together once every process has imported (or one has already ended)
    while not all(f.exists() for f in ready) and all(p.poll() is None for p in procs):
        assert time.monotonic() < deadline, "the processes never finished importing"
        time.sleep(0.05)
    go.touch()
    out = []
    for p in procs:
        stdout, stderr = p.communicate(timeout=300)
        out.append((p.returncode, stderr if p.returncode else stdout))
    return home, out


def test_ingests_started_together_on_a_fresh_directory_share_one_instance(tmp_path) -> None:
    for trial in range(2):
        home, results = _race(tmp_path / str(trial), 4)
        assert [rc for rc, _ in results] == [0] * 4, results
        with sqlite3.connect(home / "history" / "runs.db") as db:
            assert db.execute("select count(*) from alembic_version").fetchone()[0] == 1
        with open_instance(home) as inst:  # the instance is usable afterwards
            assert sorted(inst.get_dynamic_partitions(BLOCKS.name or "blocks")) == sorted(
                area_blocks(BBOX)
            )
            assert inst.get_runs() == []


def test_the_repo_config_reaches_an_existing_home(tmp_path) -> None:
    """An instance opened with the repo's config gets that config, also over an older copy."""
    home = tmp_path / "home"
    home.mkdir()
    (home / "dagster.yaml").write_text("telemetry:\n  enabled: true\n")  # an older copy
    config = Path("deploy/dagster.yaml")
    with open_instance(home, config) as inst:
        assert inst.root_directory == str(home.resolve())
    assert (home / "dagster.yaml").read_bytes() == config.read_bytes()
