"""Exit statuses: bad input exits 2, storage or a memory database that does not answer exits 1,
each with one line on stderr (cli/exits.py).

The storage cases run against a real S3-compatible server on loopback (moto, tests/s3_server.py)
with a bucket that does not exist; the memory database case against a PostgreSQL URL whose port
refuses connections.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from cli.exits import (
    ENVIRONMENT_CODES,
    EXIT_ENVIRONMENT,
    EXIT_USAGE,
    error_line,
    exit_status,
    typed_error,
)
from tests import s3_server

ROOT = Path(__file__).resolve().parents[2]


def _earthmem(*argv: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "cli.main", *argv],
        capture_output=True,
        text=True,
        timeout=180,
        cwd=ROOT,
        env={**os.environ, **env},
    )


def _one_line(proc: subprocess.CompletedProcess[str], code: str) -> None:
    assert proc.stdout == ""
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith(f"earthmem: error [{code}]: ")


def test_the_environment_codes_exit_1_and_the_rest_2() -> None:
    for code in ENVIRONMENT_CODES:
        assert exit_status(code) == EXIT_ENVIRONMENT
    for code in (
        "invalid_latitude",
        "cube_not_found",
        "catalog_unreachable",
        "token_invalid",
        "invalid_memory_url",
    ):
        assert exit_status(code) == EXIT_USAGE


def test_an_error_line_is_one_line() -> None:
    line = error_line("memory_backend_unavailable", "connection refused\n\tIs the server  up?")
    assert (
        line == "earthmem: error [memory_backend_unavailable]: connection refused Is the server up?"
    )


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[s3_server.S3Server]:
    srv = s3_server.start(tmp_path_factory.mktemp("moto") / "moto.log")
    try:
        yield srv
    finally:
        srv.stop()


@pytest.mark.slow
@pytest.mark.parametrize(
    "argv",
    [
        ["call", "read_cell", '{"cell": "defi.zb509.zd92f.hira", "bands": ["indices.ndvi"]}'],
        ["knn", "upgrade"],
    ],
    ids=["call-read_cell", "knn-upgrade"],
)
def test_storage_that_cannot_be_read_exits_1(
    server: s3_server.S3Server, tmp_path: Path, argv: list[str]
) -> None:
    env = {**server.env(), "EARTHMEM_OBJECT_STORE": "s3://no-such-bucket/earthmem"}
    proc = _earthmem(*argv, "--data", str(tmp_path), env=env)
    assert proc.returncode == EXIT_ENVIRONMENT, proc.stderr
    _one_line(proc, "storage_unavailable")
    assert "no-such-bucket" in proc.stderr


def test_a_memory_database_that_refuses_connections_exits_1(tmp_path: Path) -> None:
    with socket.socket() as s:  # a loopback port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    url = f"postgresql://earthmem:secret@127.0.0.1:{port}/earthmem"
    proc = _earthmem("token", "list", "--data", str(tmp_path), "--memory-url", url, env={})
    assert proc.returncode == EXIT_ENVIRONMENT, proc.stderr
    _one_line(proc, "memory_backend_unavailable")
    assert "secret" not in proc.stderr  # the password is never printed


def test_a_memory_url_no_backend_takes_is_bad_input(tmp_path: Path) -> None:
    proc = _earthmem(
        "token", "list", "--data", str(tmp_path), "--memory-url", "mysql://x/y", env={}
    )
    assert proc.returncode == EXIT_USAGE, proc.stderr
    _one_line(proc, "invalid_memory_url")


def test_foreseeable_failures_of_the_commands_are_one_line(tmp_path: Path) -> None:
    """What a user meets (an existing sample, an unwritable --out, a --data that is a file, a
    missing or broken area file, a compressed archive, a window past the calendar, a port in
    use): exit 2 and one ``[code]`` line, nothing created, never a traceback."""
    existing = tmp_path / "sample"
    existing.mkdir()
    (existing / "catalog.json").write_text("{}")
    a_file = tmp_path / "file"
    a_file.write_text("")
    bad_area = tmp_path / "area.json"
    bad_area.write_text("{not json")
    archive = tmp_path / "p.jsonl.gz"
    archive.write_bytes(b"\x1f\x8b\x08\x00\xff\xfe")
    data = tmp_path / "data"
    data.mkdir()
    typo = tmp_path / "dta"
    fresh = tmp_path / "fresh"
    fresh.mkdir()
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen(1)
        port = str(busy.getsockname()[1])
        cases = [
            (["sample", "build", "--size", "tiny", "--out", str(existing)], "sample_exists"),
            (
                ["sample", "build", "--size", "tiny", "--out", str(a_file / "s")],
                "unwritable_output",
            ),
            (["ingest", "--data", str(a_file)], "no_data_dir"),
            (["ingest", "--data", str(tmp_path / "new")], "invalid_area"),
            (["ingest", "--data", str(data), "--area", str(bad_area)], "invalid_area"),
            (["memory", "import", str(archive), "--data", str(data)], "invalid_archive"),
            (["gc", "--data", str(data), "--keep-days", "999999"], "invalid_argument"),
            (["serve", "--data", str(data), "--port", port, "--workers", "1"], "address_in_use"),
            (["serve", "--data", str(data), "--port", "70000"], "invalid_argument"),
            (["serve", "--data", str(data), "--port", "0", "--workers", "2"], "invalid_argument"),
            (["serve", "--data", str(data), "--host", "no.such.host.invalid"], "invalid_host"),
            (
                [
                    *("memory", "export", "--project", "p"),
                    *("--out", str(a_file / "p.jsonl"), "--data", str(data)),
                ],
                "unwritable_output",
            ),
            # a --data typo is refused, not created with an empty memory database in it
            (["token", "list", "--data", str(typo)], "no_data_dir"),
            (["memory", "get", '{"id": "mem_x"}', "--data", str(typo)], "no_data_dir"),
            (["recall", "--data", str(typo), '{"query": "flood"}'], "no_data_dir"),
            # a database of its own, but the signing key is still the directory's
            (
                [
                    *("memory", "audit", "--data", str(typo)),
                    *("--memory-url", f"sqlite:///{tmp_path / 'own.sqlite'}"),
                ],
                "no_data_dir",
            ),
            (
                [
                    *("export", "indices.ndvi", "--bbox", "1,2,3,4"),
                    *("--out", "x.tif", "--data", str(typo)),
                ],
                "no_data_dir",
            ),
            # bad input refused before the memory database is opened (and created)
            (
                ["token", "create", "--project", "p", "--expires", "soon", "--data", str(fresh)],
                "invalid_argument",
            ),
        ]
        for argv, code in cases:
            proc = _earthmem(*argv, env={"EARTHMEM_MEMORY_URL": ""})
            assert proc.returncode == EXIT_USAGE, (argv, proc.stderr)
            _one_line(proc, code)
    assert not (tmp_path / "new").exists()  # refused before the Dagster home was created
    assert not typo.exists()
    assert not list(fresh.iterdir())  # no memory database created for a refused token
    assert (existing / "catalog.json").read_text() == "{}"


def test_only_earthmems_typed_errors_are_one_line() -> None:
    """An error of another package stays a traceback (a bug), even with a string ``code``
    (SQLAlchemy's errors have one); earthmem's typed errors of every layer are one line."""
    from pipelines.sample.errors import SampleExists
    from store.errors import StorageTimeout

    class Foreign(Exception):
        code = "e3q8"

    assert typed_error(Foreign("x")) is None
    assert typed_error(ValueError("x")) is None
    assert typed_error(SampleExists("there already")) == ("sample_exists", "there already")
    assert typed_error(StorageTimeout("slow")) == ("storage_timeout", "slow")


def test_a_dispatch_error_over_a_full_disk_says_disk_full(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """print_answer (call, intent, memory, recall): a memory write that failed on a full disk
    arrives as the backend's error; it is said as the disk's."""
    import errno

    from cli.commands import print_answer
    from store.errors import MemoryBackendUnavailable

    def write() -> None:
        try:
            raise OSError(errno.ENOSPC, "No space left on device")
        except OSError as exc:
            raise MemoryBackendUnavailable("the write failed") from exc

    assert print_answer(write) == EXIT_ENVIRONMENT
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1
    assert err[0].startswith("earthmem: error [disk_full]:")


def test_standard_input_that_is_not_text_is_one_line(tmp_path: Path) -> None:
    """An argument read from standard input (``-``) that is not UTF-8: a typed line, not
    Python's UnicodeDecodeError."""
    data = tmp_path / "data"
    data.mkdir()
    for argv in (
        ["call", "read_cell", "-", "--data", str(data)],
        ["intent", "-", "--data", str(data)],
        ["memory", "get", "-", "--data", str(data)],
    ):
        proc = subprocess.run(
            [sys.executable, "-m", "cli.main", *argv],
            input=b"\xff\xfe{not text",
            capture_output=True,
            timeout=180,
            cwd=ROOT,
            env={**os.environ, "LC_ALL": "C.UTF-8", "PYTHONIOENCODING": "utf-8"},
        )
        err = proc.stderr.decode().strip().splitlines()
        assert proc.returncode == EXIT_USAGE, (argv, proc.stderr)
        assert len(err) == 1, err
        assert err[0].startswith("earthmem: error [invalid_input]: "), err
