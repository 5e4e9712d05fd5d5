"""Deterministic Tessera-like vectors for the benches and tests.

Land cover is clustered and imbalanced, and Tessera embeddings of one cover
type vary along a few directions (phenology, moisture, density) rather than
isotropically. The generator mimics that:

* a raster of cells (``width`` columns) on the cell64 lattice, cells in raster order;
* a class map made of coarse 64 x 64-cell patches, broken by 8 x 8-cell
  inclusions of another class (Zipf-like class frequencies);
* per class: a prototype, ``n_sub`` sub-prototypes (varieties of the class),
  a rank-``rank`` basis of within-class variation; plus a global mean shared
  by all classes (so cosines between classes are mostly positive, as for real
  embeddings) and isotropic noise;
* per-cell Tessera quantisation: ``scale = max|v| / 127``, ``int8 = round(v / scale)``.

Rows are generated in fixed chunks of :data:`CHUNK` with a generator seeded by
``(seed, chunk index)``, so the output depends only on the arguments, and float
temporaries never exceed one chunk (10^7 rows fit comfortably: 1.28 GB of int8).
:func:`cached_table` writes the result as a k-NN table under ``bench/.cache``.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import numpy.typing as npt

__all__ = ["CACHE_DIR", "CHUNK", "GEN_VERSION", "cached_table", "tessera_like"]

GEN_VERSION = 1
"""Bump when the generator changes (invalidates cached tables)."""

CHUNK = 1 << 18
"""Rows per generation chunk (part of the deterministic definition)."""

CACHE_DIR = Path(__file__).resolve().parent / ".cache"
"""Where :func:`cached_table` keeps generated tables."""

_COARSE = 64
_FINE = 8
_BASE_LAT_Q = 1_305_000  # ~22 N
_BASE_LNG_Q = 2_260_000  # ~14 E


def _class_params(
    d: int, n_classes: int, n_sub: int, rank: int, seed: int
) -> dict[str, np.ndarray]:
    rng = np.random.default_rng([seed, 0xC1A55])
    weights = 1.0 / np.arange(1, n_classes + 1) ** 1.1
    weights /= weights.sum()
    global_mean = rng.standard_normal(d) * 0.8
    protos = rng.standard_normal((n_classes, d))
    subs = protos[:, None, :] + 0.45 * rng.standard_normal((n_classes, n_sub, d))
    basis = rng.standard_normal((n_classes, rank, d)) * (0.35 / np.sqrt(rank) * np.sqrt(d) / 8)
    return {"weights": weights, "mean": global_mean, "subs": subs, "basis": basis}


def _maps(n: int, width: int, n_classes: int, n_sub: int, seed: int, weights: np.ndarray):  # type: ignore[no-untyped-def]
    rng = np.random.default_rng([seed, 0x3A95])
    rows = -(-n // width)
    cr, cc = -(-rows // _COARSE), -(-width // _COARSE)
    fr, fc = -(-rows // _FINE), -(-width // _FINE)
    coarse = rng.choice(n_classes, size=(cr, cc), p=weights)
    inclusion = rng.random((fr, fc)) < 0.25
    other = rng.choice(n_classes, size=(fr, fc), p=weights)
    sub = rng.integers(0, n_sub, size=(fr, fc))
    return coarse, inclusion, other, sub


def tessera_like(
    n: int,
    d: int = 128,
    n_classes: int = 24,
    seed: int = 0,
    *,
    width: int = 4096,
    n_sub: int = 6,
    rank: int = 8,
    noise: float = 0.12,
) -> tuple[npt.NDArray[np.uint64], npt.NDArray[np.int8], npt.NDArray[np.float32]]:
    """Generate ``n`` clustered Tessera-like cells.

    Args:
        n: Number of cells.
        d: Dimension (128 like Tessera).
        n_classes: Land-cover classes.
        seed: Seed of everything.
        width: Raster width in cells (cells are laid out row by row).
        n_sub: Varieties per class.
        rank: Within-class variation rank.
        noise: Isotropic noise standard deviation (per dimension).

    Returns:
        ``(cells uint64 ascending, vectors int8 (n, d), scales float32 (n,))``.
    """
    from store.address import q_to_raw_array  # local: bench helper, store imported lazily

    p = _class_params(d, n_classes, n_sub, rank, seed)
    coarse, inclusion, other, sub = _maps(n, width, n_classes, n_sub, seed, p["weights"])
    cells = np.empty(n, np.uint64)
    vectors = np.empty((n, d), np.int8)
    scales = np.empty(n, np.float32)
    for ci, a in enumerate(range(0, n, CHUNK)):
        b = min(a + CHUNK, n)
        rng = np.random.default_rng([seed, 0xDA7A, ci])
        idx = np.arange(a, b, dtype=np.int64)
        r, c = idx // width, idx % width
        fr, fc = r // _FINE, c // _FINE
        cls = np.where(inclusion[fr, fc], other[fr, fc], coarse[r // _COARSE, c // _COARSE])
        sb = sub[fr, fc]
        z = rng.standard_normal((b - a, p["basis"].shape[1]))
        v = p["mean"] + p["subs"][cls, sb]
        for k in np.unique(cls):
            sel = cls == k
            v[sel] += z[sel] @ p["basis"][k]
        v += noise * rng.standard_normal((b - a, d))
        v *= rng.lognormal(0.0, 0.25, size=(b - a, 1))  # magnitude varies; cosine does not see it
        s = np.max(np.abs(v), axis=1) / 127.0
        vectors[a:b] = np.rint(v / s[:, None]).astype(np.int8)
        scales[a:b] = s.astype(np.float32)
        cells[a:b] = q_to_raw_array(_BASE_LAT_Q + r, _BASE_LNG_Q + c)
    return cells, vectors, scales


def cached_table(
    n: int,
    d: int = 128,
    n_classes: int = 24,
    seed: int = 0,
    cache_dir: str | os.PathLike[str] | None = None,
) -> Path:
    """Path of a k-NN table of :func:`tessera_like` data, generating it on first use."""
    from store.knn import upgrade_table, write_table

    root = Path(cache_dir) if cache_dir is not None else CACHE_DIR
    path = root / f"tessera_v{GEN_VERSION}_n{n}_d{d}_c{n_classes}_s{seed}"
    if (path / "meta.json").exists():
        upgrade_table(path)  # a table cached by an older version: add what it lacks
        return path
    cells, vectors, scales = tessera_like(n, d, n_classes, seed)
    write_table(
        path,
        cells,
        vectors,
        scales,
        {"band": "geotessera", "tslot": 2024 - 1970, "vintage": 2024, "created_by": "bench.data"},
        replace=True,
    )
    return path
