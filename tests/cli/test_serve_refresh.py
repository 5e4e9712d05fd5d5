"""`earthmem serve --refresh-seconds` is validated before the server starts."""

from __future__ import annotations

from cli.main import main


def test_a_bad_refresh_interval_exits_2_with_one_line(tmp_path, capsys) -> None:
    assert main(["serve", "--data", str(tmp_path), "--refresh-seconds", "-3"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1
    assert "invalid_refresh_seconds" in err[0]
