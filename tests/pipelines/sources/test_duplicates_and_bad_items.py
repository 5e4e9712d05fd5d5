"""Duplicate item ids are resolved by content and ``updated``, never by order; a bad item file is a skip."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import UTC, date, datetime
from pathlib import Path

import pytest

from pipelines.sources import CatalogUnreachable, StaticCatalogSource
from pipelines.sources.base import resolve_duplicates
from pipelines.sources.models import SceneItem
from pipelines.sources.static import load_catalog, load_catalog_items
from tests.pipelines.sources.conftest import build_catalog

AOI = (85.29, 23.34, 85.40, 23.40)


def _item(href: str, *, cloud: float = 1.0, updated: datetime | None = None) -> SceneItem:
    return SceneItem(
        id="dup",
        collection="sentinel-2-l2a",
        kind="s2",
        datetime=datetime(2023, 9, 9, 5, tzinfo=UTC),
        bbox=(85.3, 23.3, 85.4, 23.4),
        cloud_cover=cloud,
        processing_baseline="05.09",
        assets={},
        source_href=href,
        updated=updated,
    )


def _both_orders(*items: SceneItem) -> list[tuple[list[SceneItem], list[tuple[str, str | None]]]]:
    out = []
    for order in (list(items), list(reversed(items))):
        kept, skips = resolve_duplicates(order)
        out.append((kept, sorted((s.code, s.href) for s in skips)))
    return out


def test_identical_copies_keep_one_and_report_the_other() -> None:
    a, b = _item("/a.json"), _item("/b.json")
    first, second = _both_orders(a, b)
    assert first == second
    kept, skips = first
    assert kept == [a]
    assert skips == [("duplicate_id", "/b.json")]


def test_the_single_newest_updated_wins_in_either_order() -> None:
    old = _item("/a.json", cloud=1.0)
    new = _item("/z.json", cloud=50.0, updated=datetime(2030, 1, 1, tzinfo=UTC))
    for kept, skips in _both_orders(old, new):
        assert kept == [new]
        assert skips == [("duplicate_id", "/a.json")]


@pytest.mark.parametrize("updated", [None, datetime(2030, 1, 1, tzinfo=UTC)])
def test_different_copies_without_a_single_newest_are_refused(updated: datetime | None) -> None:
    a = _item("/a.json", cloud=1.0, updated=updated)
    b = _item("/z.json", cloud=50.0, updated=updated)
    for kept, skips in _both_orders(a, b):
        assert kept == []
        assert skips == [("duplicate_id", "/a.json"), ("duplicate_id", "/z.json")]
    _, refused = resolve_duplicates([a, b])
    assert len({s.reason for s in refused}) == 2  # one line per copy, each naming both


def test_updated_is_parsed_from_the_item(small_catalog: Path) -> None:
    items = StaticCatalogSource(small_catalog).search(
        "sentinel-2-l2a", AOI, date(2023, 1, 1), date(2023, 1, 31)
    )
    assert items.items
    assert all(replace(i, updated=None) == i for i in items.items)  # the fixture has none


@pytest.fixture
def own_catalog(tmp_path: Path) -> Path:
    """A catalog of this test's own (the session's ``small_catalog`` must stay intact)."""
    return build_catalog(tmp_path)


def _an_item_file(catalog: Path) -> tuple[Path, str]:
    href, data = next(iter(load_catalog_items(catalog)))
    return Path(href), str(data["id"])


@pytest.mark.parametrize("text", ['{"type": "Feature", "id": ', "[1, 2]", '{"type": "Catalog"}'])
def test_an_unreadable_item_file_is_a_skip_and_the_rest_loads(own_catalog: Path, text: str) -> None:
    small_catalog = own_catalog
    n = len(load_catalog_items(small_catalog))
    path, item_id = _an_item_file(small_catalog)
    path.write_text(text)
    loaded = load_catalog(small_catalog)
    assert len(loaded.items) == n - 1
    assert item_id not in {d["id"] for _, d in loaded.items}
    ((collection, skip),) = loaded.broken
    assert skip.item_id == str(path)
    assert skip.code == "corrupt_item"
    assert collection
    res = StaticCatalogSource(small_catalog).search(
        str(collection), (-180.0, -90.0, 180.0, 90.0), date(2000, 1, 1), date(2030, 1, 1)
    )
    assert str(path) in {s.item_id for s in res.skipped}


def test_an_unreadable_collection_is_still_an_unreachable_catalog(own_catalog: Path) -> None:
    small_catalog = own_catalog
    root = json.loads(small_catalog.read_text())
    child = next(link["href"] for link in root["links"] if link["rel"] == "child")
    (small_catalog.parent / child).write_text("{broken")
    with pytest.raises(CatalogUnreachable):
        load_catalog(small_catalog)
