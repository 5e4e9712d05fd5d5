"""The read-bandwidth passes read exactly the scan's files, through the same access paths."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from bench import stream


def test_passes_read_mapped_arrays_and_file_ranges_and_report_time(tmp_path: Path) -> None:
    a = np.arange(1 << 16, dtype=np.int64).astype(np.int8).reshape(-1, 64)
    np.save(tmp_path / "head.npy", a)
    m = np.load(tmp_path / "head.npy", mmap_mode="r")
    assert stream.words_of(m).nbytes == m.nbytes
    assert stream.mapped_pass([m], 4) > 0
    assert np.array_equal(np.asarray(m), a)  # released, not discarded: re-read from the file
    assert stream.pread_pass([(tmp_path / "head.npy", int(m.offset), int(m.nbytes))], 4) > 0
    with pytest.raises(OSError, match="short read"):
        stream.pread_pass([(tmp_path / "head.npy", int(m.offset), int(m.nbytes) + 4096)], 4)


def test_mapped_pass_reads_at_most_the_three_arrays_of_a_pruned_scan(tmp_path: Path) -> None:
    np.save(tmp_path / "a.npy", np.zeros(64, np.int64))
    m = np.load(tmp_path / "a.npy", mmap_mode="r")
    assert stream.mapped_pass([m, m, m], 2) > 0
    with pytest.raises(ValueError, match="1 to 3 arrays"):
        stream.mapped_pass([m, m, m, m], 2)
