"""earthmem's store: the address algebra, the cubes, the k-NN tables and the readers.

Submodules: :mod:`store.address` (cell64, neighbours, blocks), :mod:`store.tslot`
(time slots), :mod:`store.errors` (typed errors).
"""

__all__ = ["address", "errors", "tslot"]
