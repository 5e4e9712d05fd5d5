"""earthmem's store: the address algebra, the cubes, the k-NN tables and the readers.

Submodules: :mod:`store.address` (cell64, neighbours, blocks), :mod:`store.tslot`
(time slots), :mod:`store.facts` (canonical form, fact ids), :mod:`store.errors`
(typed errors).
"""

__all__ = ["address", "errors", "facts", "tslot"]
