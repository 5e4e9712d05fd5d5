"""k-NN vector tables (one directory per band vintage, memory-mapped) and their scans.

Modules, in import order (each imports only the ones before it):

* :mod:`store.knn._kernels`: the numba scan loops (int8 cosine, popcount, pread).
* :mod:`store.knn.mapped`: read-only file descriptors, mapping checks, page release.
* :mod:`store.knn.codes`: sign codes of the rotated rows, int8 norms, row heads.
* :mod:`store.knn.scan`: top-k scans over arrays (``cosine``, ``hamming``,
  ``hamming_then_rerank``), the merge of chunk results, the launch guard for
  parallel kernels, and the rerank calibration.
* :mod:`store.knn.table`: :class:`KnnTable`, one memory-mapped table and its
  scans that never hold the table resident (the directory layout is there).
* :mod:`store.knn.write`: :func:`write_table` (atomic symlink swap) and
  :func:`upgrade_table`.
* :mod:`store.knn.remote`: the tables on an object-storage data root (published
  after writing) and a server's local cache of them.

:mod:`store.knn.codes` and :mod:`store.knn.limits` (``K_MAX``, ``MODES``) load with the
package; the names of the scan, table and write modules (numba) load on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from store.knn.codes import (
    BIN_BYTES,
    HEAD_BLOCKS_KEY,
    HEAD_MIN_D,
    ROTATION_SEED,
    binarize,
    head_blocks,
    head_blocks_shape,
    head_dims,
    head_layout,
    head_values,
    int8_norms,
    rotation,
)
from store.knn.limits import K_MAX, MODES, Mode
from store.lazy import lazy_attributes

if TYPE_CHECKING:
    from store.knn.scan import (
        CALIBRATION_MULTIPLES,
        DEFAULT_RERANK_MULTIPLE,
        KnnResult,
        calibrate_rerank_multiple,
        cosine_topk,
        hamming_then_rerank,
        hamming_topk,
    )
    from store.knn.table import KnnTable
    from store.knn.write import FORMAT, upgrade_table, write_table

_LAZY: dict[str, str] = {
    "CALIBRATION_MULTIPLES": "store.knn.scan",
    "DEFAULT_RERANK_MULTIPLE": "store.knn.scan",
    "KnnResult": "store.knn.scan",
    "calibrate_rerank_multiple": "store.knn.scan",
    "cosine_topk": "store.knn.scan",
    "hamming_then_rerank": "store.knn.scan",
    "hamming_topk": "store.knn.scan",
    "KnnTable": "store.knn.table",
    "FORMAT": "store.knn.write",
    "upgrade_table": "store.knn.write",
    "write_table": "store.knn.write",
}
"""Names whose modules compile or load the numba kernels (a second of start-up): imported on
first use, so a process that never scans a table never loads numba."""


__getattr__ = lazy_attributes(__name__, _LAZY)


__all__ = [
    "BIN_BYTES",
    "CALIBRATION_MULTIPLES",
    "DEFAULT_RERANK_MULTIPLE",
    "FORMAT",
    "HEAD_BLOCKS_KEY",
    "HEAD_MIN_D",
    "K_MAX",
    "MODES",
    "ROTATION_SEED",
    "KnnResult",
    "KnnTable",
    "Mode",
    "binarize",
    "calibrate_rerank_multiple",
    "cosine_topk",
    "hamming_then_rerank",
    "hamming_topk",
    "head_blocks",
    "head_blocks_shape",
    "head_dims",
    "head_layout",
    "head_values",
    "int8_norms",
    "rotation",
    "upgrade_table",
    "write_table",
]
