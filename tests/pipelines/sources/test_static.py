"""Static catalog source: local filtering by collection, footprint, time and cloud."""

from __future__ import annotations

from datetime import UTC, date, datetime
from pathlib import Path

import pytest

from pipelines.sources import CatalogUnreachable, StaticCatalogSource, open_source

AOI = (85.29, 23.34, 85.40, 23.40)


def test_search_filters_by_bbox_and_dates(small_catalog: Path) -> None:
    src = StaticCatalogSource(small_catalog)
    res = src.search("sentinel-2-l2a", AOI, date(2023, 1, 1), date(2023, 1, 31))
    assert res.ids == ("s2-a", "s2-b", "s2-c")
    assert {(s.item_id, s.code) for s in res.skipped} == {
        ("s2-noscl", "missing_asset"),
        ("s2-nocrs", "unknown_crs"),
    }
    assert all(s.reason for s in res.skipped)
    assert res.cloud_filter == "none"
    # Other bbox: only the eastern scene.
    east = src.search(
        "sentinel-2-l2a", (85.55, 23.30, 85.70, 23.40), date(2023, 1, 1), date(2023, 12, 31)
    )
    assert east.ids == ("s2-d",)


def test_end_date_is_inclusive_and_datetimes_work(small_catalog: Path) -> None:
    src = StaticCatalogSource(small_catalog)
    assert src.search("sentinel-2-l2a", AOI, date(2023, 1, 10), date(2023, 1, 10)).ids == ("s2-b",)
    narrow = src.search(
        "sentinel-2-l2a",
        AOI,
        datetime(2023, 1, 10, 5, tzinfo=UTC),
        datetime(2023, 1, 15, 4, tzinfo=UTC),
    )
    assert narrow.ids == ()


def test_cloud_bound(small_catalog: Path) -> None:
    src = StaticCatalogSource(small_catalog)
    res = src.search("sentinel-2-l2a", AOI, date(2023, 1, 1), date(2023, 1, 31), max_cloud=50)
    assert res.ids == ("s2-a", "s2-b")
    assert res.cloud_filter == "client"
    # The bound does not apply to SAR.
    s1 = src.search("sentinel-1-rtc", AOI, date(2023, 1, 1), date(2023, 1, 31), max_cloud=1)
    assert s1.ids == ("s1-a", "s1-b")
    assert s1.cloud_filter == "none"


def test_parsed_items_carry_resolved_assets(small_catalog: Path) -> None:
    src = open_source({"kind": "static", "path": str(small_catalog)})
    old = src.search("sentinel-2-l2a", AOI, date(2021, 12, 1), date(2021, 12, 31))
    (scene,) = old.items
    red = scene.assets["red"]
    assert Path(red.href).is_file()
    assert (red.scale, red.offset, red.scale_source) == (1e-4, 0.0, "baseline<04.00")
    assert red.crs == 32645
    assert red.band == "B04"


def test_missing_catalog_is_unreachable(tmp_path: Path) -> None:
    with pytest.raises(CatalogUnreachable) as err:
        StaticCatalogSource(tmp_path / "nope" / "catalog.json").search(
            "sentinel-2-l2a", AOI, date(2023, 1, 1), date(2023, 1, 2)
        )
    assert "nope" in err.value.url
    bad = tmp_path / "catalog.json"
    bad.write_text("{not json")
    with pytest.raises(CatalogUnreachable):
        StaticCatalogSource(bad).search("sentinel-2-l2a", AOI, date(2023, 1, 1), date(2023, 1, 2))


def test_inverted_window_is_refused(small_catalog: Path) -> None:
    with pytest.raises(ValueError, match="before"):
        StaticCatalogSource(small_catalog).search(
            "sentinel-2-l2a", AOI, date(2023, 2, 1), date(2023, 1, 1)
        )


def test_fast_json_walk_matches_pystac_walk(small_catalog: Path) -> None:
    from pipelines.sources.static import _load_with_pystac, load_catalog_items

    fast = {d["id"]: (h, d) for h, d in load_catalog_items(small_catalog)}
    slow = {d["id"]: (h, d) for h, d in _load_with_pystac(str(small_catalog))}
    assert fast.keys() == slow.keys()
    assert len(fast) == 10
    for key, (href, data) in fast.items():
        other_href, other = slow[key]
        assert href == other_href
        assert data["collection"] == other["collection"]
        assert {k: a["href"] for k, a in data["assets"].items()} == {
            k: a["href"] for k, a in other["assets"].items()
        }
