"""Binary codes: the sign bits of the seeded rotation."""

from __future__ import annotations

import numpy as np

from store import knn as V


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
