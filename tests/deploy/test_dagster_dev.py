"""``make dagster`` (deploy/dagster-dev.sh): the instance config is refreshed from the repo on every
start, and SIGTERM or Ctrl-C stops every process it started, also one that ignores SIGINT.

``dagster`` is replaced by a stand-in executable (the script's contract with it is "run
``dagster dev`` and stop its process group"): it starts a child that ignores SIGINT and SIGTERM,
as a stuck webserver would, and records both pids.
"""

from __future__ import annotations

import os
import signal
import subprocess
import textwrap
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "deploy" / "dagster-dev.sh"

FAKE_DAGSTER = textwrap.dedent(
    """\
    #!/usr/bin/env bash
    # stand-in for `dagster dev`: a child that ignores INT/TERM, then wait (exit on INT);
    # the trap is set before anything is recorded, and "args" is recorded last
    trap 'exit 0' INT
    bash -c 'trap "" INT TERM; echo $$ > "$OUT/child"; while :; do sleep 0.1; done' &
    echo $$ > "$OUT/dev"
    echo "$EARTHMEM_DATA $EARTHMEM_AREA" > "$OUT/env"
    echo "$@" > "$OUT/args"
    while :; do sleep 0.1; done
    """
)


def _default_signals() -> None:
    """The script as a user's terminal starts it: SIGINT and SIGTERM at their defaults.

    A signal ignored when bash starts cannot be trapped, and an ignored disposition is
    inherited across exec: a test earlier in the same pytest worker that left SIGINT or
    SIGTERM ignored would otherwise make the script deaf to them (the test timed out so).
    """
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT, signal.SIGTERM})


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie is gone for our purpose
    stat = Path(f"/proc/{pid}/stat")
    return stat.exists() and stat.read_text().split()[2] != "Z"


def _wait_for(path: Path) -> None:
    for _ in range(400):  # hang guard only (20 s)
        if path.exists() and path.read_text().strip():
            return
        time.sleep(0.05)
    raise AssertionError(f"{path} never written")


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_start_refreshes_config_and_a_signal_stops_everything(tmp_path: Path, sig) -> None:
    fake_bin, out, home = tmp_path / "bin", tmp_path / "out", tmp_path / "home"
    fake_bin.mkdir()
    out.mkdir()
    home.mkdir()
    (fake_bin / "dagster").write_text(FAKE_DAGSTER)
    (fake_bin / "dagster").chmod(0o755)
    (home / "dagster.yaml").write_text("stale: true\n")  # an older copy from the repo
    env = {**os.environ, "DAGSTER_HOME": str(home), "OUT": str(out), "STOP_SECONDS": "1"}
    proc = subprocess.Popen(
        [str(SCRIPT), str(fake_bin), str(tmp_path / "data")],
        cwd=REPO,
        env=env,
        preexec_fn=_default_signals,
    )
    try:
        _wait_for(out / "child")
        _wait_for(out / "args")  # written last: "dev" and "env" are complete by then
        assert (home / "dagster.yaml").read_bytes() == (REPO / "deploy/dagster.yaml").read_bytes()
        assert (out / "args").read_text().split()[:3] == ["dev", "-w", "workspace.yaml"]
        data = tmp_path / "data"
        assert (out / "env").read_text().split() == [str(data), str(data / "sample/manifest.json")]
        child, dev = int((out / "child").read_text()), int((out / "dev").read_text())
        assert _alive(child)
        assert _alive(dev)
        proc.send_signal(sig)
        assert proc.wait(timeout=30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
    assert not _alive(dev)
    assert not _alive(child)  # it ignored SIGINT and SIGTERM: killed after STOP_SECONDS
