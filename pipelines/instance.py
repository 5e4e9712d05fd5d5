"""The persistent Dagster instance of a data directory: safe setup, and runs nobody is running.

Two concerns of ``<data>/dagster_home`` that Dagster leaves to its daemon or to
the deployer, and that ``earthmem ingest`` (no daemon, possibly several at once)
must handle itself:

* **Setup is serialised.** Creating the SQLite storages (schema creation and
  the alembic stamp) and registering dynamic partitions are not safe from two
  processes at once: two ingests started together on a fresh directory broke
  the instance for good (two ``alembic_version`` rows). :func:`setup_lock` is an
  inter-process ``flock`` on ``<home>/.earthmem-setup.lock``; :func:`open_instance`
  and :func:`pipelines.partitions.register_area_blocks` hold it. The kernel
  releases it when its holder dies, so a killed setup never blocks the next one.
* **Runs whose process is gone are marked failed.** A run executed in process
  (``materialize``) by a process that is then killed stays STARTED for ever
  (Dagster's run monitoring needs the daemon). Every run an ingest process
  starts carries the tag :data:`OWNER_TAG`, naming a lock file under
  ``<home>/earthmem-live/`` that the process holds (``flock``) for its whole life.
  :func:`fail_dead_runs` marks an unfinished run failed only when that lock can
  be taken, i.e. when its owner provably no longer exists (another host's runs,
  and runs without the tag, are left alone).
"""

from __future__ import annotations

import fcntl
import os
import shutil
import socket
import uuid
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import IO, Any

from dagster import DagsterInstance, DagsterRunStatus, RunsFilter

from pipelines import dagster_sqlite

dagster_sqlite.install()  # the home's SQLite files without an fsync per event (see there)

__all__ = [
    "LIVE_DIRNAME",
    "OWNER_TAG",
    "SETUP_LOCK_FILENAME",
    "fail_dead_runs",
    "instance_setup",
    "open_instance",
    "run_tags",
    "setup_lock",
]

SETUP_LOCK_FILENAME = ".earthmem-setup.lock"
"""File under the Dagster home locked around instance creation and partition registration."""
LIVE_DIRNAME = "earthmem-live"
"""Directory under the Dagster home with one locked file per live ingest process."""
OWNER_TAG = "earthmem/owner"
"""Run tag: the token of the process executing the run (``<host>-<pid>-<random>``)."""

UNFINISHED = [
    DagsterRunStatus.NOT_STARTED,
    DagsterRunStatus.STARTING,
    DagsterRunStatus.STARTED,
    DagsterRunStatus.CANCELING,
]


@contextmanager
def setup_lock(home: str | os.PathLike[str]) -> Iterator[None]:
    """Hold the exclusive inter-process setup lock of a Dagster home (created if missing)."""
    path = Path(home)
    path.mkdir(parents=True, exist_ok=True)
    with open(path / SETUP_LOCK_FILENAME, "a+b") as handle:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle.fileno(), fcntl.LOCK_UN)


def instance_setup(instance: DagsterInstance) -> Any:
    """:func:`setup_lock` of a persistent instance's home; nothing for an ephemeral one."""
    if instance.is_ephemeral:
        return nullcontext()
    return setup_lock(instance.root_directory)


def open_instance(home: str | os.PathLike[str], config: Path | None = None) -> DagsterInstance:
    """Open (creating on first use) the persistent instance at ``home``, serialised.

    Sets ``DAGSTER_HOME`` (worker processes open the same instance from it) and writes
    ``config`` to ``<home>/dagster.yaml`` when the home has none or another one (the repo's
    config is the instance's: a later change to it reaches an existing home). The caller
    closes the instance (``with open_instance(...) as instance:``).
    """
    root = Path(home).resolve()
    with setup_lock(root):
        target = root / "dagster.yaml"
        if (
            config is not None
            and config.exists()
            and (not target.exists() or target.read_bytes() != config.read_bytes())
        ):
            tmp = root / f".dagster.yaml.tmp-{uuid.uuid4().hex[:8]}"
            shutil.copy(config, tmp)
            os.replace(tmp, target)
        os.environ["DAGSTER_HOME"] = str(root)
        return DagsterInstance.get()  # creates and migrates the SQLite storages


# ------------------------------------------------------------------ run owners

_OWNER: dict[str, tuple[int, str, IO[bytes]]] = {}
"""Live directory -> (pid, token, the held lock file) of this process."""


def _live_dir(instance: DagsterInstance) -> Path:
    return Path(instance.root_directory) / LIVE_DIRNAME


def _owner_token(live: Path) -> str:
    """This process's token, creating and locking its file under ``live`` once."""
    held = _OWNER.get(str(live))
    if held is not None and held[0] == os.getpid():
        return held[1]
    live.mkdir(parents=True, exist_ok=True)
    token = f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    # locked under a hidden name, then renamed: a sweeper never sees it unlocked
    tmp = live / f".{token}.tmp"
    handle = open(tmp, "a+b")  # noqa: SIM115 - held open (and locked) until the process exits
    fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
    os.rename(tmp, live / f"{token}.lock")
    _OWNER[str(live)] = (os.getpid(), token, handle)
    return token


def run_tags(instance: DagsterInstance) -> dict[str, str]:
    """Tags naming this process as the owner of a run it executes (none for ephemeral)."""
    if instance.is_ephemeral:
        return {}
    return {OWNER_TAG: _owner_token(_live_dir(instance))}


def _owner_gone(live: Path, token: str) -> bool:
    """True only when the owner provably no longer runs (its lock can be taken here)."""
    if not token.startswith(f"{socket.gethostname()}-"):
        return False  # another host's process: cannot tell
    return _unlock_stale(live / f"{token}.lock")


def _unlock_stale(path: Path) -> bool:
    """Remove a lock file nobody holds; True when it is gone (or was never there)."""
    try:
        handle = open(path, "r+b")  # noqa: SIM115 - closed below
    except FileNotFoundError:
        return True  # swept after its owner died
    with handle:
        try:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        path.unlink(missing_ok=True)
        return True


def fail_dead_runs(instance: DagsterInstance) -> list[str]:
    """Mark failed every unfinished run whose owning process is gone; returns their ids."""
    if instance.is_ephemeral:
        return []
    live = _live_dir(instance)
    failed = []
    verdict: dict[str, bool] = {}
    for run in instance.get_runs(filters=RunsFilter(statuses=UNFINISHED)):
        token = run.tags.get(OWNER_TAG)
        if token is None:
            continue
        if token not in verdict:
            verdict[token] = _owner_gone(live, token)
        if verdict[token]:
            instance.report_run_failed(
                run,
                message=f"the process that ran this run ({token}) no longer exists "
                "(killed or crashed); marked failed by a later earthmem ingest",
            )
            failed.append(run.run_id)
    if live.is_dir():  # owners that died without leaving a run behind (or before the rename)
        for path in live.glob("*.lock"):
            token = path.name.removesuffix(".lock")
            if token not in verdict:
                _owner_gone(live, token)
        for path in live.glob(".*.tmp"):
            _unlock_stale(path)
    return failed
