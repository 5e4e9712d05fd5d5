"""Package attributes loaded on first use (PEP 562 ``__getattr__``).

A package whose modules import heavy libraries (zarr, icechunk, pyarrow, numba) names
them here, so a process that never uses them never loads them. A dozen lines, so not
scientific-python's ``lazy_loader`` (a further dependency for the same ``__getattr__``).
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["lazy_attributes"]


def lazy_attributes(package: str, names: Mapping[str, str]) -> Callable[[str], Any]:
    """A module ``__getattr__`` for ``package``: ``names[attr]`` is the module that defines
    ``attr``; it is imported on first access and the value kept in the package."""

    def __getattr__(name: str) -> Any:
        module = names.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        setattr(sys.modules[package], name, value)
        return value

    return __getattr__
