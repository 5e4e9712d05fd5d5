"""The earthmem command: answers and one-line errors with exit status 2."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from cli.main import main


def test_cell_encode_decode_neighbours(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["cell", "encode", "35.3606", "138.7274"]) == 0
    assert capsys.readouterr().out.strip() == "defi.zb592.nemu.zEvE"
    assert main(["cell", "decode", "defi.zb592.nemu.zEvE"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert abs(doc["center"]["lat"] - 35.3606) < 1e-4
    assert doc["bounds"]["min_lat"] < doc["center"]["lat"]
    assert main(["cell", "neighbours", "defi.zb592.nemu.zEvE"]) == 0
    ring = json.loads(capsys.readouterr().out)
    assert list(ring) == ["NW", "N", "NE", "W", "C", "E", "SW", "S", "SE"]
    assert ring["C"] == "defi.zb592.nemu.zEvE"


def test_negative_coordinates_and_tslot(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["cell", "encode", "-33.5", "-70.1"]) == 0
    assert capsys.readouterr().out.count(".") == 3
    assert main(["tslot", "2024-03-15"]) == 0
    assert json.loads(capsys.readouterr().out)["tslot"] == 19797
    assert main(["tslot", "2024-03-15", "--tempo", "year"]) == 0
    assert json.loads(capsys.readouterr().out)["tslot"] == 54


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["cell", "encode", "95", "1"], "latitude"),
        (["cell", "encode", "abc", "1"], "latitude"),
        (["cell", "decode", "foo.bar"], "4 lanes"),
        (["cell", "neighbours", "baba.baba.baba.baba"], "geo cell64"),
        (["tslot", "2024-02-30"], "invalid date"),
        (["tslot", "2024-02-01", "--tempo", "week"], "invalid choice"),
    ],
)
def test_bad_input_exits_2_with_one_line(argv: list[str], needle: str) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "cli.main", *argv], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 2
    assert proc.stdout == ""
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1
    assert needle in lines[0]
