"""The cube: Zarr v3 arrays on the cell64 lattice inside one icechunk repository.

* :mod:`store.cube.bands` — the band registry (every band, its storage and meaning);
* :mod:`store.cube.layout` — groups, arrays, chunking, CF metadata, layout creation;
* :mod:`store.cube.codec` — the one chunk encode/decode path and batched store I/O;
* :mod:`store.cube.write` — partition transactions (:class:`CubeWriter`);
* :mod:`store.cube.read` — snapshot readers (:class:`CubeReader`): regions, cached
  block columns and tiles;
* :mod:`store.cube.cache` — the byte-bounded cache of decoded columns and tiles.

The band registry and the cache load with the package; the layout, reader and writer (zarr,
icechunk, pyarrow) load when one of their names is first used.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

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
from store.lazy import lazy_attributes

if TYPE_CHECKING:
    from store.cube.layout import (
        DEFAULT_BLOCK_LEVEL,
        LAYOUT_VERSION,
        MAX_REGION_ELEMENTS,
        geotransform,
    )
    from store.cube.read import CubeReader
    from store.cube.transaction import CubeTransaction
    from store.cube.write import CubeWriter

_LAZY: dict[str, str] = {
    "DEFAULT_BLOCK_LEVEL": "store.cube.layout",
    "LAYOUT_VERSION": "store.cube.layout",
    "MAX_REGION_ELEMENTS": "store.cube.layout",
    "geotransform": "store.cube.layout",
    "CubeReader": "store.cube.read",
    "CubeTransaction": "store.cube.transaction",
    "CubeWriter": "store.cube.write",
}
"""Names whose modules import zarr, icechunk, pyarrow and pyproj (seconds of start-up): loaded
on first use, so a process that only describes or validates (``tools/list``, a bad argument,
the band registry) never pays for them."""


__getattr__ = lazy_attributes(__name__, _LAZY)


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
