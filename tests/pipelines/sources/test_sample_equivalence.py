"""The real tiny sample area: static and loopback API searches agree; registry matches catalog."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import date
from pathlib import Path

import pytest

from pipelines.sources import (
    StacApiSource,
    StaticCatalogSource,
    TesseraRegistrySource,
    serve_catalog,
)

sample = pytest.importorskip(
    "pipelines.sample", reason="pipelines.sample (build_sample) is not importable yet"
)
if not hasattr(sample, "build_sample"):
    pytest.skip("pipelines.sample has no build_sample yet", allow_module_level=True)

AOI = (85.2, 23.2, 85.5, 23.5)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    info = sample.build_sample(tmp_path_factory.mktemp("sample"), size="tiny")
    return Path(info.catalog)


@pytest.fixture(scope="module")
def tiny_api(tiny: Path) -> Iterator[str]:
    with serve_catalog(tiny) as url:
        yield url


@pytest.mark.parametrize(
    ("collection", "start", "end", "max_cloud"),
    [
        ("sentinel-2-l2a", date(2023, 1, 1), date(2024, 12, 31), None),
        ("sentinel-2-l2a", date(2023, 1, 1), date(2024, 12, 31), 30.0),
        ("sentinel-2-l2a", date(2023, 6, 1), date(2023, 9, 30), None),
        ("sentinel-1-rtc", date(2023, 1, 1), date(2024, 12, 31), None),
        ("tessera-embeddings", date(2024, 1, 1), date(2024, 12, 31), None),
    ],
)
def test_static_and_loopback_agree_on_the_sample(
    tiny, tiny_api, collection, start, end, max_cloud
) -> None:
    static = StaticCatalogSource(tiny).search(collection, AOI, start, end, max_cloud)
    api = StacApiSource(tiny_api).search(collection, AOI, start, end, max_cloud)
    assert static.items, "the sample should have scenes here"
    assert static.skipped == ()
    assert api.skipped == ()
    assert api.ids == static.ids
    assert [i.assets for i in api.items] == [i.assets for i in static.items]


def test_sample_scenes_parse_and_read(tiny: Path) -> None:
    from pipelines.sources import check_readable

    res = StaticCatalogSource(tiny).search(
        "sentinel-2-l2a", AOI, date(2023, 1, 1), date(2024, 12, 31)
    )
    first = res.items[0]
    assert first.assets["red"].crs == 32645
    assert first.processing_baseline is not None
    assert all(check_readable(a, first.id) is None for a in first.assets.values())


def test_registry_layout_matches_catalog_tessera_items(tiny: Path) -> None:
    registry = tiny.parent / "tessera"
    if not (registry / "global_0.1_degree_representation").is_dir():
        pytest.skip("the sample writes no geotessera tree under tessera/")
    window = (date(2023, 1, 1), date(2024, 12, 31))
    from_catalog = StaticCatalogSource(tiny).search("tessera-embeddings", AOI, *window)
    from_registry = TesseraRegistrySource(registry).search("tessera-embeddings", AOI, *window)
    key = lambda res: sorted(  # noqa: E731
        (i.tessera_year, Path(i.assets["embedding"].href).name) for i in res.items
    )
    assert key(from_catalog) == key(from_registry)
    assert key(from_registry)
    assert (
        from_registry.items[0].assets["embedding"].crs
        == from_catalog.items[0].assets["embedding"].crs
    )
