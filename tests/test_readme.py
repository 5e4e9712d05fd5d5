"""The README, run as a new user would: every command of its ```bash blocks, in order.

Each command runs in a fresh ``bash -c`` process, with a bounded timeout, in a
scratch directory (so ``data`` / ``--data data`` is created there, as ``make run``
creates ``./data`` in a clone). A command fails the test when it exits non-zero,
or when it prints a JSON answer that is an error (``{"error": ...}``) or an intent
envelope asking for the intent type (``needs_intent_type``).

The environment is what ``make run`` leaves a user with:

* ``earthmem`` on ``PATH`` is the console script of the running interpreter:
  a two-line shim running ``python -m cli.main`` with this interpreter (what the
  ``[project.scripts]`` entry runs), so the test does not depend on an installed
  script being current; ``python`` is this interpreter. ``PYTHONPATH`` is the
  repository, ``DAGSTER_HOME`` is ``./data/dagster_home`` (the Makefile exports it).
* Everything stays on loopback: the only servers are the ones this test starts.

Some README lines cannot run inside the test suite as written; each is listed in
:data:`SUBSTITUTIONS` with what runs instead and why (the test checks that every
entry still matches a README line, so the table cannot go stale silently). All
other lines run exactly as written.

The README's example cells (``defi.zb509.zd92f.hira``, ``defi.zb509.zd32f.hiru``),
tslots and bbox are cells of the demo sample area, so the test builds and ingests
the demo area itself (the ``make run`` substitution), as a user would.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"

TIMEOUT = 300
"""Seconds any one command may take (the demo build + ingest has its own bound)."""

DEMO_TIMEOUT = 1800
"""Seconds for ``make run``'s job: build the demo area, ingest it through Dagster, run the examples."""

SERVER_START_TIMEOUT = 180
"""Seconds a background server may take to answer (``earthmem serve`` warms its context first)."""

_API_LINE = re.compile(r"^API=\S+$")


@dataclass(frozen=True)
class Run:
    """Run these commands instead of the README line (each in its own process)."""

    commands: tuple[str, ...]
    why: str
    cwd: str = "work"  # "work": the user's scratch directory; "repo": the repository


@dataclass(frozen=True)
class Skip:
    """Do not run the README line."""

    why: str


@dataclass(frozen=True)
class Background:
    """Start a server in the background, wait until it answers, keep it (or stop it)."""

    command: str
    why: str
    keep: bool  # True: the API server the following curl lines talk to


SUBSTITUTIONS: dict[str, Run | Skip | Background] = {
    # ------------------------------------------------------------- "Two commands"
    "make run": Run(
        ("python -m cli.demo --data data",),
        "`make run` is `setup` (create .venv from PyPI: the running interpreter already is "
        "that environment, and the test is offline) followed by this recipe line of the "
        "Makefile: build the demo sample, ingest it through Dagster, answer the examples "
        "(saved in data/answers/)",
    ),
    "make test": Skip("this test runs inside `make test` (recursion)"),
    # ------------------------------------------------------------- "CLI at a glance"
    "earthmem serve --data data --port 8000": Background(
        "earthmem serve --data data --port {port}",
        "a server runs until stopped: started in the background on a free loopback port "
        "(8000 may be taken) and waited for on /healthz; it is the API the curl lines below "
        "use (the README's `make serve` is `earthmem serve --data data`)",
        keep=True,
    ),
    "earthmem mcp --data data": Run(
        ("earthmem mcp --data data < /dev/null",),
        "an MCP host would talk on stdin: with an empty stdin the server starts, reads EOF "
        "and exits 0",
    ),
    # ------------------------------------------------------------- "Development"
    "make lint typecheck": Skip(
        "`make test` runs these targets' commands before the suite and CI runs the targets "
        "beside the suite (checked by "
        "test_lint_and_types_run_beside_the_suite); running them again inside the suite "
        "doubled their cost"
    ),
    "make bench": Skip("benchmarks run for many minutes (and `make bench-quick` still minutes)"),
    "make bench-prepare": Skip(
        "builds the demo area and ingests the ingest bench's 1,000-scene store (many minutes)"
    ),
    "make bench-large": Skip("builds a 10^6-item memory store once, then times recall on it"),
    "make lock": Skip("re-resolves requirements.lock from PyPI and rewrites it"),
    "python -m pipelines.sources.serve data/sample/catalog.json": Background(
        "python -m pipelines.sources.serve data/sample/catalog.json --port 0",
        "a server runs until stopped: started in the background with `--port 0` (a free "
        "loopback port instead of the fixed 7822), waited for until its root answers, stopped",
        keep=False,
    ),
}
"""README command (comment stripped) -> what the test does instead, and why."""


def readme_commands(text: str) -> list[str]:
    """The shell commands of the ```bash blocks of ``text``, in order, comments stripped."""
    commands: list[str] = []
    in_bash = False
    pending = ""
    for raw in text.splitlines():
        line = raw.strip()
        if line.startswith("```"):
            in_bash = line == "```bash" and not in_bash
            continue
        if not in_bash:
            continue
        line = re.sub(r"(^|\s+)#\s.*$", "", line).strip()
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        line, pending = pending + line, ""
        if line:
            commands.append(line)
    return commands


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _get(url: str) -> int:
    with urllib.request.urlopen(url, timeout=10) as resp:
        return int(resp.status)


def json_problem(stdout: str) -> str | None:
    """Why a JSON answer on stdout counts as a failure, or None (not JSON, or a good answer)."""
    try:
        doc = json.loads(stdout)
    except ValueError:
        return None
    if not isinstance(doc, dict):
        return None
    if "error" in doc:
        return f"error body: {json.dumps(doc['error'])[:400]}"
    if doc.get("status") == "needs_intent_type":
        return f"intent envelope needs_intent_type: {stdout[:400]}"
    return None


@dataclass
class Session:
    """The user's shell: scratch directory, environment, background servers."""

    work: Path
    logs: Path
    env: dict[str, str]
    servers: list[subprocess.Popen[bytes]] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    timings: list[tuple[str, float]] = field(default_factory=list)

    def run(self, command: str, *, cwd: Path, timeout: float, readme_line: str) -> None:
        """Run one command in a fresh ``bash -c``; record a failure if it fails."""
        t0 = time.monotonic()
        # Its own process group: on a timeout the whole group goes (the ingest's worker
        # processes too), not only bash.
        proc = subprocess.Popen(
            ["bash", "-c", command],
            cwd=cwd,
            env=self.env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        try:
            stdout, stderr = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
            self.failures.append(f"{readme_line!r}: `{command}` timed out after {timeout} s")
            return
        finally:
            self.timings.append((command, time.monotonic() - t0))
        if proc.returncode != 0:
            self.failures.append(
                f"{readme_line!r}: `{command}` exited {proc.returncode}: "
                f"{(stderr.strip() or stdout.strip())[-600:]}"
            )
            return
        problem = json_problem(stdout)
        if problem:
            self.failures.append(f"{readme_line!r}: `{command}`: {problem}")

    def start(self, command: str, *, readme_line: str, keep: bool) -> str | None:
        """Start a server, wait until it answers; return its URL (None: it failed).

        ``keep``: the API server (``earthmem serve``), probed on ``/healthz`` and left
        running for the curl lines; otherwise a server that prints its base URL on
        stdout (``pipelines.sources.serve``), probed there and stopped.
        """
        port = _free_port()
        command = command.format(port=port)
        n = len(self.servers)
        out_path, err_path = self.logs / f"server-{n}.out", self.logs / f"server-{n}.err"
        with out_path.open("wb") as out, err_path.open("wb") as err:
            proc = subprocess.Popen(
                ["bash", "-c", f"exec {command}"],
                cwd=self.work,
                env=self.env,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=err,
                start_new_session=True,
            )
        self.servers.append(proc)
        t0 = time.monotonic()
        while time.monotonic() - t0 < SERVER_START_TIMEOUT and proc.poll() is None:
            if keep:
                url: str | None = f"http://127.0.0.1:{port}"
                probe = f"{url}/healthz"
            else:
                first = out_path.read_text().strip().splitlines()[:1]
                url = first[0] if first and first[0].startswith("http://127.0.0.1:") else None
                probe = url or ""
            try:
                if url is not None and _get(probe) == 200:
                    self.timings.append((command, time.monotonic() - t0))
                    if not keep:
                        self.stop(proc)
                    return url
            except OSError:  # not listening yet (URLError), or not 200 yet (HTTPError)
                pass
            time.sleep(0.5)
        self.failures.append(
            f"{readme_line!r}: `{command}` did not answer within {SERVER_START_TIMEOUT} s "
            f"(exit {proc.poll()}): {err_path.read_text()[-600:]}"
        )
        self.stop(proc)
        return None

    @staticmethod
    def stop(proc: subprocess.Popen[bytes]) -> None:
        """SIGTERM the server (it forwards to its workers), then SIGKILL its process group."""
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=20)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=20)


@pytest.fixture
def session(tmp_path: Path) -> Iterator[Session]:
    work = tmp_path / "work"
    logs = tmp_path / "logs"
    shims = tmp_path / "bin"
    for d in (work, logs, shims):
        d.mkdir()
    for name, target in (("earthmem", f"{sys.executable} -m cli.main"), ("python", sys.executable)):
        shim = shims / name
        shim.write_text(f'#!/bin/sh\nexec {target} "$@"\n')
        shim.chmod(0o755)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("EARTHMEM_", "DAGSTER_"))}
    env.update(
        PATH=f"{shims}{os.pathsep}{env.get('PATH', '/usr/bin:/bin')}",
        PYTHONPATH=str(ROOT),
        DAGSTER_HOME=str(work / "data" / "dagster_home"),
        README_TEST_VENV=sys.prefix,
        README_TEST_BIN=str(Path(sys.prefix) / "bin"),
    )
    s = Session(work, logs, env)
    try:
        yield s
    finally:
        for proc in s.servers:
            Session.stop(proc)


def test_substitutions_name_readme_lines() -> None:
    commands = readme_commands(README.read_text(encoding="utf-8"))
    stale = sorted(set(SUBSTITUTIONS) - set(commands))
    assert not stale, f"SUBSTITUTIONS entries no README line matches: {stale}"


@pytest.mark.slow  # builds and ingests the demo area through Dagster, then serves it
def test_readme_commands_run(session: Session) -> None:
    commands = readme_commands(README.read_text(encoding="utf-8"))
    assert commands, "no ```bash block in README.md"
    api_url: str | None = None
    for line in commands:
        sub = SUBSTITUTIONS.get(line)
        if isinstance(sub, Skip):
            continue
        if _API_LINE.match(line):
            # `API=http://127.0.0.1:8000`: the curl lines below read $API. The test's server
            # runs on a free port; $API points at it (started here if no line started it).
            if api_url is None:
                api_url = session.start(
                    "earthmem serve --data data --port {port}", readme_line=line, keep=True
                )
            if api_url is None:
                break
            session.env["API"] = api_url
            continue
        if isinstance(sub, Background):
            url = session.start(sub.command, readme_line=line, keep=sub.keep)
            if sub.keep:
                api_url = url
            continue
        if isinstance(sub, Run):
            cwd = ROOT if sub.cwd == "repo" else session.work
            for command in sub.commands:
                timeout = DEMO_TIMEOUT if line == "make run" else TIMEOUT
                before = len(session.failures)
                session.run(command, cwd=cwd, timeout=timeout, readme_line=line)
                if line == "make run" and len(session.failures) > before:
                    pytest.fail(f"the demo did not build: {session.failures[-1]}")
            continue
        session.run(line, cwd=session.work, timeout=TIMEOUT, readme_line=line)
    timing = "\n".join(f"  {seconds:7.1f} s  {command}" for command, seconds in session.timings)
    print(f"README commands ({sum(s for _, s in session.timings):.0f} s):\n{timing}")
    assert not session.failures, "README lines that fail:\n" + "\n".join(
        f"- {failure}" for failure in session.failures
    )


def test_lint_and_types_run_beside_the_suite() -> None:
    """The README's ``make lint typecheck`` is not re-run by the test above: ``make test``
    and ``.ci/run`` must each run lint and the type check themselves."""
    makefile = (ROOT / "Makefile").read_text()
    recipe = makefile.split("\ntest:", 1)[1].split("\n\n", 1)[0]
    for command in ("ruff check", "ruff format --check", "mypy"):
        assert command in recipe, command
    ci = (ROOT / ".ci" / "run").read_text()
    assert re.search(r"make .*\blint\b.*\btypecheck\b", ci)
