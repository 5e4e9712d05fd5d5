"""Kills mid k-NN table write leave temporaries and STARTED runs; the next ingest removes the
temporaries and marks the killed runs failed. (The scene inventory is written inside the cube
transaction now: a kill there leaves only uncommitted chunk objects, which icechunk's garbage
collection removes; the legacy Parquet inventory's temporaries are swept by the same rule.)"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
from datetime import date
from pathlib import Path

from dagster import DagsterRunStatus, instance_for_test

from pipelines.instance import OWNER_TAG
from pipelines.run import ingest_area

ROOT = Path(__file__).resolve().parents[2]

# The child ingests through the real pipeline and stops itself (SIGSTOP) right after the
# first temporary file of the chosen writer is written; the test then kills it (SIGKILL).
CHILD = textwrap.dedent(
    """
    import os, signal, sys
    from datetime import date
    import numpy as np
    import pyarrow.parquet as pq
    from dagster import DagsterInstance
    from pipelines.run import ingest_area

    where, data, catalog, area = sys.argv[1:5]

    def stop():
        print("stopped", flush=True)
        os.kill(os.getpid(), signal.SIGSTOP)

    if where == "inventory":
        write_table = pq.write_table

        def pausing_write(table, path, *args, **kwargs):
            write_table(table, path, *args, **kwargs)
            if "inventory" in str(path) and ".tmp-" in str(path):
                stop()

        pq.write_table = pausing_write
        window = dict(end=date(2023, 1, 31), years=[])
    else:
        save = np.save

        def pausing_save(file, arr, *args, **kwargs):
            save(file, arr, *args, **kwargs)
            if ".tmp-" in str(getattr(file, "name", file)):
                stop()

        np.save = pausing_save
        window = dict(start=date(2030, 1, 1), end=date(2030, 1, 2), years=[2023, 2024])
    with DagsterInstance.get() as inst:
        ingest_area(data, catalog, area, instance=inst, **window)
    print("finished", flush=True)
    """
)


def _kill_when_stopped(where: str, data: Path, sample: Path) -> None:
    proc = subprocess.Popen(
        [
            sys.executable,
            "-c",
            CHILD,
            where,
            str(data),
            str(sample / "catalog.json"),
            str(sample / "manifest.json"),
        ],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    watchdog = threading.Timer(300, proc.kill)  # a hung child is killed, which ends the loop
    watchdog.start()
    try:
        line = proc.stdout.readline().strip()
    finally:
        watchdog.cancel()
    assert line == "stopped", line
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)


def _temporaries(data: Path) -> list[str]:
    knn = [p for p in (data / "knn").rglob(".*") if ".tmp-" in p.name or ".link-" in p.name]
    inv = list((data / "inventory").glob(".tmp-*"))
    return sorted(str(p.relative_to(data)) for p in [*knn, *inv])


def _unpointed_versions(data: Path) -> list[str]:
    out = []
    for parent in {p.parent for p in (data / "knn").rglob(".*@*")}:
        pointed = {os.readlink(p) for p in parent.iterdir() if p.is_symlink()}
        out += [p.name for p in parent.iterdir() if "@" in p.name and p.name not in pointed]
    return out


def test_a_rerun_cleans_what_killed_writers_left_and_fails_their_runs(
    tiny_sample_dir, tmp_path
) -> None:
    data = tmp_path / "data"
    with instance_for_test() as inst:  # a persistent instance (DAGSTER_HOME), as the CLI uses
        _kill_when_stopped("knn", data, tiny_sample_dir)
        left = _temporaries(data)
        assert any(p.startswith("knn/geotessera/.2023.tmp-") for p in left), left
        [first] = inst.get_runs()
        assert first.status == DagsterRunStatus.STARTED
        assert OWNER_TAG in first.tags
        # the second ingest marks the first's run failed and sweeps the first's temporaries
        _kill_when_stopped("knn", data, tiny_sample_dir)
        left = _temporaries(data)
        assert left, left
        assert all(p.startswith("knn/geotessera/.2023.tmp-") for p in left), left
        second, first = inst.get_runs()  # newest first
        assert first.status == DagsterRunStatus.FAILURE
        assert second.status == DagsterRunStatus.STARTED
        killed = [first, second]

        report = ingest_area(
            data,
            tiny_sample_dir / "catalog.json",
            tiny_sample_dir / "manifest.json",
            instance=inst,
            end=date(2023, 1, 31),
        )
        assert report.failed == []
        assert _temporaries(data) == []
        assert _unpointed_versions(data) == []
        for run in killed:
            after = inst.get_run_by_id(run.run_id)
            assert after is not None
            assert after.status == DagsterRunStatus.FAILURE
        new = [r for r in inst.get_runs() if r.run_id not in {k.run_id for k in killed}]
        assert new
        assert {r.status for r in new} == {DagsterRunStatus.SUCCESS}
        assert (data / "knn" / "geotessera.multi_year").is_symlink()
