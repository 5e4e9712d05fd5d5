"""numpy's pairwise summation in numba: the same bits as numpy for every length and term."""

from __future__ import annotations

import numpy as np
import pytest

from store._pairwise import STACK_ROWS, pairwise, pairwise_terms, pairwise_terms_into

SIZES = [1, 2, 3, 7, 8, 9, 15, 16, 17, 127, 128, 129, 255, 256, 257, 1000, 8191, 8193, 12_345]


@pytest.mark.parametrize("n", [*SIZES, 0, 100_003])
def test_pairwise_sum_has_numpys_bits(n: int) -> None:
    rng = np.random.default_rng(n)
    a = rng.standard_normal(n) * 10 ** rng.uniform(-4, 4, n)
    assert pairwise(a, n) == a.sum()


@pytest.mark.parametrize("n", [*SIZES, 100_003])
def test_terms_have_the_bits_of_numpys_sum_of_their_array(n: int) -> None:
    """Each kind equals numpy's sum of the array of its terms, with and without given scratch."""
    rng = np.random.default_rng(n + 1)
    x = rng.standard_normal(n) * 10 ** rng.uniform(-3, 3, n)
    w = rng.uniform(0.0, 1.0, n)
    w[rng.random(n) < 0.2] = 0.0  # unselected cells, as the kernels pass them
    w[0] = 0.5  # a positive total (the mean is defined)
    mean = (x * w).sum() / w.sum()
    want = [w.sum(), (x * w).sum(), (w * (x - mean) ** 2).sum()]
    stack = np.empty((STACK_ROWS, 3), np.int64)
    vals = np.empty(STACK_ROWS, np.float64)
    for kind, expected in enumerate(want):
        m = mean if kind == 2 else 0.0
        assert pairwise_terms(kind, x, w, m, n) == expected
        assert pairwise_terms_into(kind, x, w, m, n, stack, vals) == expected
