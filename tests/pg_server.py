"""A throwaway PostgreSQL server for the tests (Debian's ``postgresql`` package).

:func:`start` runs ``initdb`` and ``pg_ctl start`` from the newest
``/usr/lib/postgresql/<version>/bin`` (``EARTHMEM_PG_BIN`` overrides) into a
temporary directory, listening on a free loopback port (trust authentication,
user ``postgres``). PostgreSQL refuses to run as root, so under root the
server runs as the ``postgres`` user (``runuser``). Durability is switched off
unless asked for (``fsync=off``): a test server lives for one session. The fixtures in
``tests/conftest.py`` start one per session and give each test a fresh
database (:meth:`PgServer.create_database`).
"""

from __future__ import annotations

import contextlib
import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import uuid
from dataclasses import dataclass
from pathlib import Path

__all__ = ["PgServer", "PgUnavailable", "find_bin", "start"]

BIN_ENV = "EARTHMEM_PG_BIN"


class PgUnavailable(RuntimeError):
    """No PostgreSQL server could be started here (the reason is the message)."""


def find_bin() -> Path | None:
    """The directory with ``initdb`` and ``pg_ctl`` (newest Debian version), or None."""
    if os.environ.get(BIN_ENV):
        return Path(os.environ[BIN_ENV])
    found = sorted(
        glob.glob("/usr/lib/postgresql/*/bin/initdb"),
        key=lambda p: (
            int(Path(p).parent.parent.name) if Path(p).parent.parent.name.isdigit() else 0
        ),
    )
    if found:
        return Path(found[-1]).parent
    on_path = shutil.which("initdb")
    return Path(on_path).parent if on_path else None


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class PgServer:
    """A running throwaway server."""

    root: Path
    port: int
    bin: Path
    prefix: tuple[str, ...]
    """``("runuser", "-u", "postgres", "--")`` under root, else empty."""
    version: str

    def url(self, database: str = "postgres") -> str:
        """``postgresql://postgres@127.0.0.1:<port>/<database>``."""
        return f"postgresql://postgres@127.0.0.1:{self.port}/{database}"

    def create_database(self, prefix: str = "t") -> str:
        """A new empty database; returns its URL."""
        import psycopg

        name = f"{prefix}_{uuid.uuid4().hex[:12]}"
        with psycopg.connect(self.url(), autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return self.url(name)

    def stop(self) -> None:
        """Stop the server (immediate) and remove its directory."""
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            subprocess.run(
                [
                    *self.prefix,
                    str(self.bin / "pg_ctl"),
                    "-D",
                    str(self.root / "data"),
                    "-m",
                    "immediate",
                    "stop",
                ],
                capture_output=True,
                timeout=60,
                check=False,
            )
        shutil.rmtree(self.root, ignore_errors=True)


def _run(cmd: list[str], what: str) -> None:
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False)
    except (OSError, subprocess.SubprocessError) as exc:
        raise PgUnavailable(f"{what} failed: {exc}") from exc
    if done.returncode != 0:
        raise PgUnavailable(f"{what} failed ({done.returncode}): {done.stderr.strip()[-800:]}")


def start(*, durable: bool = False) -> PgServer:
    """initdb + start a server; raises :class:`PgUnavailable` with the reason when it cannot.

    Args:
        durable: Keep PostgreSQL's default durability (``fsync``, synchronous commit:
            what the bench compares); the tests switch it off.
    """
    bindir = find_bin()
    if bindir is None or not (bindir / "initdb").exists():
        raise PgUnavailable(
            "no PostgreSQL server binaries (apt-get install -y postgresql, or set EARTHMEM_PG_BIN)"
        )
    prefix: tuple[str, ...] = ()
    root = Path(tempfile.mkdtemp(prefix="earthmem-pg-"))
    if os.geteuid() == 0:
        try:
            pw = pwd.getpwnam("postgres")
        except KeyError as exc:
            raise PgUnavailable("running as root and there is no 'postgres' user") from exc
        runuser = shutil.which("runuser")
        if runuser is None:
            raise PgUnavailable("running as root and runuser is missing")
        os.chown(root, pw.pw_uid, pw.pw_gid)
        prefix = (runuser, "-u", "postgres", "--")
    os.chmod(root, 0o700)
    data = root / "data"
    try:
        _run(
            [*prefix, str(bindir / "initdb"), "-D", str(data), "-A", "trust", "-U", "postgres",
             "-E", "UTF8", "--no-sync"],
            "initdb",
        )  # fmt: skip
        for attempt in range(3):
            # The free port is free when asked; another process (a parallel test worker
            # starting its own server) may bind it first: then start again on another.
            port = _free_port()
            opts = f"-p {port} -k {root} -c listen_addresses=127.0.0.1 -c max_connections=200"
            if not durable:
                opts += " -c fsync=off -c synchronous_commit=off -c full_page_writes=off"
            try:
                _run(
                    [*prefix, str(bindir / "pg_ctl"), "-D", str(data), "-l",
                     str(root / "server.log"), "-w", "-t", "60", "-o", opts, "start"],
                    "pg_ctl start",
                )  # fmt: skip
                break
            except PgUnavailable:
                log = root / "server.log"
                in_use = log.exists() and "could not bind" in log.read_text(errors="replace")
                if attempt == 2 or not in_use:
                    raise
                log.unlink()
    except PgUnavailable as exc:
        log = root / "server.log"
        tail = log.read_text(errors="replace")[-800:] if log.exists() else ""
        shutil.rmtree(root, ignore_errors=True)
        if tail:
            raise PgUnavailable(f"{exc}; server log: {tail}") from None
        raise
    version = bindir.parent.name
    return PgServer(root=root, port=port, bin=bindir, prefix=prefix, version=version)
