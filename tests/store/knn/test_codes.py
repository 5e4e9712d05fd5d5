"""Binary codes: the sign bits of the seeded rotation."""

from __future__ import annotations

import numpy as np

from store import knn as V
from store.knn import codes


def test_binarize_is_sign_of_rotation_and_scale_free(small):
    _, vec, scales, _, codes = small
    r = V.rotation(128, V.ROTATION_SEED)
    np.testing.assert_allclose(r @ r.T, np.eye(128), atol=1e-12)
    assert np.all(
        np.diag(np.linalg.qr(np.random.default_rng(V.ROTATION_SEED).standard_normal((128, 128)))[1])
        != 0
    )
    deq = vec[:100].astype(np.float64) * scales[:100, None]
    np.testing.assert_array_equal(np.packbits(deq @ r.T > 0, axis=1), codes[:100])


def test_head_layout_blocks_every_write_chunk_in_place(monkeypatch) -> None:
    """Heads are blocked chunk by chunk as they are derived (no row-major copy of the whole
    table); chunks of a few blocks and a part-filled last block read back as the rows'
    values at the head dimensions, and the padding rows are zeros (bytes 128)."""
    monkeypatch.setattr(codes, "_WRITE_CHUNK", 32)
    rng = np.random.default_rng(4)
    vecs = rng.integers(-128, 128, (1003, 128), dtype=np.int64).astype(np.int8)
    head_index, blocks, tailnorm = V.head_layout(vecs)
    assert blocks.shape == V.head_blocks_shape(1003, 64) == (63, 1024)
    rows = np.arange(1003)
    np.testing.assert_array_equal(V.head_values(blocks, rows, 64), vecs[:, head_index])
    assert np.all(blocks[-1].reshape(16, 16, 4)[:, 1003 % 16 :, :] == 128)
    tail = np.setdiff1d(np.arange(128), head_index)
    assert np.all(tailnorm >= np.linalg.norm(vecs[:, tail].astype(np.float64), axis=1))
