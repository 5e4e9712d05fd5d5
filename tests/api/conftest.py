"""Fixtures of the service-layer tests: a service context on the tiny sample and its clearing cell.

Modules and folders that need another context (a memory database, a model) define their own ``ctx``.
"""

from __future__ import annotations

from typing import Any

import pytest

from api.context import ServiceContext
from api.receipts import Signer
from store import address


@pytest.fixture(scope="module")
def ctx(tiny_store: Any) -> ServiceContext:
    return ServiceContext(tiny_store.data, signer=Signer.generate())


@pytest.fixture(scope="module")
def clearing_cell(tiny_store: Any) -> str:
    c = tiny_store.event("forest_clearing")["centre"]
    return address.encode(c["lat"], c["lng"])
