"""The cube: Zarr v3 arrays on the cell64 lattice inside one icechunk repository.

* :mod:`store.cube.bands` — the band registry (every band, its storage and meaning);
* :mod:`store.cube.layout` — groups, arrays, chunking, CF metadata, layout creation;
* :mod:`store.cube.codec` — the one chunk encode/decode path and batched store I/O;
* :mod:`store.cube.write` — partition transactions (:class:`CubeWriter`);
* :mod:`store.cube.read` — snapshot readers (:class:`CubeReader`): regions, cached
  block columns and tiles;
* :mod:`store.cube.cache` — the byte-bounded cache of decoded columns and tiles.
"""

from store.cube.bands import (
    BANDS,
    DAY_SLOTS,
    REGISTRY,
    TIME_CHUNK_DAYS,
    X_SIZE,
    Y_SIZE,
    YEAR_SLOTS,
    BandSpec,
    band_spec,
)
from store.cube.cache import DEFAULT_CACHE_BYTES, ChunkCache, Column
from store.cube.layout import (
    DEFAULT_BLOCK_LEVEL,
    LAYOUT_VERSION,
    MAX_REGION_ELEMENTS,
    geotransform,
)
from store.cube.read import CubeReader
from store.cube.write import CubeTransaction, CubeWriter

__all__ = [
    "BANDS",
    "DAY_SLOTS",
    "DEFAULT_BLOCK_LEVEL",
    "DEFAULT_CACHE_BYTES",
    "LAYOUT_VERSION",
    "MAX_REGION_ELEMENTS",
    "REGISTRY",
    "TIME_CHUNK_DAYS",
    "X_SIZE",
    "YEAR_SLOTS",
    "Y_SIZE",
    "BandSpec",
    "ChunkCache",
    "Column",
    "CubeReader",
    "CubeTransaction",
    "CubeWriter",
    "band_spec",
    "geotransform",
]
