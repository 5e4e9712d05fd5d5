"""Shared fixtures of the k-NN tests."""

from __future__ import annotations

import numpy as np
import pytest

from store.knn import binarize, int8_norms


@pytest.fixture(scope="module")
def small():
    rng = np.random.default_rng(7)
    n, d = 3000, 128
    vec = rng.integers(-127, 128, (n, d), dtype=np.int8)
    vec[:, :4] = 60  # a shared component so scores spread
    scales = rng.uniform(0.001, 0.1, n).astype(np.float32)
    cells = np.sort(rng.choice(2**40, n, replace=False)).astype(np.uint64) + np.uint64(2**50)
    return cells, vec, scales, int8_norms(vec), binarize(vec)
