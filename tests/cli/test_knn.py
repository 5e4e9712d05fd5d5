"""`earthmem knn upgrade`: tables an older version wrote are rewritten in the current layout
(same rows and answers, the exact cosine scan pruned again); current ones are left alone."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

from bench.data import tessera_like
from cli.main import main
from store import knn as V
from store.knn import table as knn_table
from store.snapshots import OBJECT_STORE_ENV
from tests.store.knn.older import leave_as_older_code


def test_upgrade_rewrites_the_older_tables_of_a_data_directory(
    tmp_path, monkeypatch, capsys
) -> None:
    monkeypatch.delenv(OBJECT_STORE_ENV, raising=False)
    monkeypatch.setattr(knn_table, "FILE_SCAN_BYTES", 0)
    monkeypatch.setattr(knn_table, "PRUNE_MIN_ROWS", 0)
    knn = tmp_path / "data" / "knn"
    for i, name in enumerate(("geotessera/2023", "geotessera/2024", "geotessera.multi_year")):
        cells, vecs, scales = tessera_like(1500 + i, 128, 6, seed=i)
        V.write_table(knn / name, cells, vecs, scales, {"band": "geotessera", "tslot": 53 + i})
    want = V.KnnTable.open(knn / "geotessera/2024").search_row(4, k=10)
    leave_as_older_code(knn / "geotessera/2024")
    leave_as_older_code(knn / "geotessera.multi_year", both_keys=True)
    assert V.KnnTable.open(knn / "geotessera/2024").search_row(4, k=10).rows_read_whole is None

    assert main(["knn", "upgrade", "--data", str(tmp_path / "data")]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["tables"] == {
        "geotessera/2023": "current",
        "geotessera/2024": "rewritten",
        "geotessera.multi_year": "rewritten",
    }
    new = V.KnnTable.open(knn / "geotessera/2024")
    assert new.head_blocks is not None
    got = new.search_row(4, k=10)
    assert got.rows_read_whole is not None  # pruned again
    np.testing.assert_array_equal(got.rows, want.rows)
    np.testing.assert_array_equal(got.scores, want.scores)
    assert V.KnnTable.open(knn / "geotessera.multi_year").head_blocks is not None

    # a second run has nothing to do; through $EARTHMEM_DATA as well
    monkeypatch.setenv("EARTHMEM_DATA", str(tmp_path / "data"))
    assert main(["knn", "upgrade"]) == 0
    assert set(json.loads(capsys.readouterr().out)["tables"].values()) == {"current"}


def test_upgrade_of_a_missing_data_directory_is_a_typed_error(tmp_path, capsys) -> None:
    assert main(["knn", "upgrade", "--data", str(tmp_path / "nowhere")]) == 2
    assert "[no_data_dir]" in capsys.readouterr().err
    assert not os.path.exists(tmp_path / "nowhere")


def test_a_data_directory_without_tables_has_nothing_to_upgrade(tmp_path, capsys) -> None:
    (tmp_path / "data").mkdir()
    assert main(["knn", "upgrade", "--data", str(tmp_path / "data")]) == 0
    assert json.loads(capsys.readouterr().out) == {"tables": {}}


@pytest.mark.parametrize(
    ("argv", "said"),
    [(["knn"], "required: knn_command"), (["knn", "downgrade"], "invalid choice: 'downgrade'")],
)
def test_knn_needs_a_known_subcommand(argv, said, capsys) -> None:
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert said in err  # the knn parser refused it, not the top level (no such command)
    assert "invalid choice: 'knn'" not in err
