"""A full disk is said in one line with status 1, whatever layer it surfaced in."""

from __future__ import annotations

import errno
import sqlite3

import numpy as np
import pytest

from cli import main as cli_main
from cli.exits import EXIT_ENVIRONMENT, disk_full


def _numpy_on_a_full_disk() -> BaseException:
    try:
        with open("/dev/full", "wb") as f:
            np.save(f, np.zeros(1 << 16))
            f.flush()
    except OSError as exc:
        return exc
    raise AssertionError("/dev/full accepted the write")


def test_the_shapes_of_disk_full_are_recognised() -> None:
    exc = _numpy_on_a_full_disk()
    assert disk_full(exc) is exc
    wrapped = RuntimeError("step failed")
    wrapped.__cause__ = sqlite3.OperationalError("database or disk is full")
    assert disk_full(wrapped) is wrapped.__cause__
    assert disk_full(OSError("224128 requested and 159616 written")) is not None
    assert disk_full(OSError(errno.ENOENT, "missing")) is None


def test_the_cli_says_it_in_one_line(monkeypatch, capsys) -> None:
    def full(args):
        raise RuntimeError("commit failed") from _numpy_on_a_full_disk()

    monkeypatch.setattr(cli_main, "_tslot", full)
    assert cli_main.main(["tslot", "2024-01-01"]) == EXIT_ENVIRONMENT
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1
    assert err[0].startswith("earthmem: error [disk_full]:")


def test_a_typed_error_over_a_full_disk_says_disk_full(monkeypatch, capsys) -> None:
    """A storage error raised over a full local disk (a k-NN table copied into the cache) is
    the disk's failure: ``disk_full``, not ``storage_unavailable``."""
    from store.errors import StorageUnavailable

    def full(args):
        raise StorageUnavailable("copying a table failed") from _numpy_on_a_full_disk()

    monkeypatch.setattr(cli_main, "_tslot", full)
    assert cli_main.main(["tslot", "2024-01-01"]) == EXIT_ENVIRONMENT
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1
    assert err[0].startswith("earthmem: error [disk_full]:")


def test_other_failures_still_raise(monkeypatch) -> None:
    def broken(args):
        raise RuntimeError("a bug")

    monkeypatch.setattr(cli_main, "_tslot", broken)
    with pytest.raises(RuntimeError):
        cli_main.main(["tslot", "2024-01-01"])
