"""Parsing the three Sentinel-2 naming conventions, S1 RTC, the baseline rule, and bad items."""

from __future__ import annotations

import copy
import dataclasses
from datetime import UTC, datetime

import pytest

from pipelines.sources import (
    CorruptItem,
    MissingAsset,
    SceneItem,
    Skip,
    UnknownCRS,
    baseline_rule,
    parse_item,
    parse_or_skip,
)
from tests.pipelines.sources.conftest import load_fixture

CONVENTIONS = ["earth_search_s2_l2a.json", "planetary_computer_s2_l2a.json", "cdse_s2_l2a.json"]
ROLES = {"blue", "green", "red", "nir", "swir16", "swir22", "scl"}


@pytest.fixture(params=CONVENTIONS)
def s2_item(request: pytest.FixtureRequest) -> dict:
    return load_fixture(request.param)


def test_each_convention_parses_to_canonical_roles(s2_item: dict) -> None:
    scene = parse_item(s2_item)
    assert scene.kind == "s2"
    assert scene.collection == "sentinel-2-l2a"
    assert set(scene.assets) == ROLES
    assert scene.datetime == datetime(2023, 4, 15, 4, 52, 31, 24000, tzinfo=UTC)
    assert scene.cloud_cover == pytest.approx(12.5)
    assert scene.processing_baseline == "05.09"
    assert scene.source_href is not None
    assert scene.source_href.startswith("https://")


def test_three_conventions_agree_on_everything_but_provenance() -> None:
    scenes = [parse_item(load_fixture(name)) for name in CONVENTIONS]

    def essence(scene: SceneItem) -> dict:
        return {
            role: (a.band, a.scale, a.offset, a.nodata, a.crs, a.transform, a.shape)
            for role, a in scene.assets.items()
        }

    first = essence(scenes[0])
    assert first["red"] == (
        "B04",
        1e-4,
        -0.1,
        0.0,
        32645,
        (10.0, 0.0, 300000.0, 0.0, -10.0, 2600040.0),
        (10980, 10980),
    )
    assert first["swir16"][6] == (5490, 5490)  # 20 m band (CDSE: B11_20m chosen over B11_60m)
    assert first["scl"][1:4] == (1.0, 0.0, 0.0)  # classes: not scaled
    for other in scenes[1:]:
        assert essence(other) == first
    # Where the numbers came from differs, and is recorded.
    sources = [s.assets["red"].scale_source for s in scenes]
    assert sources == ["raster:bands", "baseline>=04.00", "raster:scale"]
    keys = [s.assets["red"].key for s in scenes]
    assert keys == ["red", "B04", "B04_10m"]
    assert all(s.assets["scl"].scale_source == "identity" for s in scenes)


def test_sentinel1_rtc_roles() -> None:
    scene = parse_item(load_fixture("planetary_computer_s1_rtc.json"))
    assert scene.kind == "s1"
    assert set(scene.assets) == {"vv", "vh"}
    vv = scene.assets["vv"]
    assert (vv.band, vv.scale, vv.offset, vv.scale_source) == ("VV", 1.0, 0.0, "identity")
    assert vv.nodata == -32768.0
    assert vv.dtype == "float32"
    assert vv.crs == 32645
    assert scene.cloud_cover is None
    assert scene.processing_baseline is None


def _strip_raster(item: dict) -> dict:
    for asset in item["assets"].values():
        for key in ("raster:bands", "raster:scale", "raster:offset"):
            asset.pop(key, None)
    return item


@pytest.mark.parametrize(
    ("baseline", "when", "offset", "rule"),
    [
        ("05.09", "2023-04-15T04:52:31Z", -0.1, "baseline>=04.00"),
        ("04.00", "2022-01-25T04:52:31Z", -0.1, "baseline>=04.00"),
        ("03.01", "2021-06-01T04:52:31Z", 0.0, "baseline<04.00"),
        (None, "2022-01-24T23:59:59Z", 0.0, "date<2022-01-25"),
        (None, "2022-01-25T00:00:00Z", -0.1, "date>=2022-01-25"),
    ],
)
def test_baseline_rule_without_raster_metadata(baseline, when, offset, rule) -> None:
    item = _strip_raster(load_fixture("earth_search_s2_l2a.json"))
    item["properties"]["datetime"] = when
    item["properties"].pop("s2:product_uri")
    if baseline is None:
        item["properties"].pop("s2:processing_baseline")
    else:
        item["properties"]["s2:processing_baseline"] = baseline
    scene = parse_item(item)
    red = scene.assets["red"]
    assert (red.scale, red.offset, red.scale_source) == (1e-4, offset, rule)
    assert scene.assets["scl"].scale_source == "identity"


def test_raster_bands_win_over_the_baseline_rule() -> None:
    item = load_fixture("earth_search_s2_l2a.json")
    item["properties"]["s2:processing_baseline"] = "03.00"  # says "no offset"
    red = parse_item(item).assets["red"]
    assert (red.offset, red.scale_source) == (-0.1, "raster:bands")


def test_stac11_band_level_scale() -> None:
    item = _strip_raster(load_fixture("cdse_s2_l2a.json"))
    item["assets"]["B04_10m"]["bands"][0].update(scale=2e-4, offset=-0.2)
    red = parse_item(item).assets["red"]
    assert (red.scale, red.offset, red.scale_source) == (2e-4, -0.2, "bands")


def test_baseline_read_from_product_name_when_property_absent() -> None:
    item = _strip_raster(load_fixture("cdse_s2_l2a.json"))
    del item["properties"]["processing:version"]
    item["id"] = item["id"].replace("_N0509_", "_N0300_")
    scene = parse_item(item)
    assert scene.processing_baseline == "03.00"
    assert scene.assets["red"].scale_source == "baseline<04.00"
    assert baseline_rule("04.00", datetime(2020, 1, 1, tzinfo=UTC))[1] == -0.1


def test_missing_asset_is_a_skip_with_reason() -> None:
    item = load_fixture("planetary_computer_s2_l2a.json")
    del item["assets"]["SCL"]
    with pytest.raises(MissingAsset) as err:
        parse_item(item)
    assert err.value.roles == ("scl",)
    skip = parse_or_skip(item)
    assert isinstance(skip, Skip)
    assert skip.code == "missing_asset"
    assert "scl" in skip.reason
    assert skip.item_id == item["id"]
    # Optional roles may be absent: swir22 is not required by default.
    item = load_fixture("planetary_computer_s2_l2a.json")
    del item["assets"]["B12"]
    assert "swir22" not in parse_item(item).assets


@pytest.mark.parametrize(
    "mutate",
    [
        lambda it: it["properties"].update({"proj:epsg": None}),
        lambda it: it["properties"].pop("proj:epsg"),
        lambda it: it["properties"].update({"proj:epsg": 99999999}),
    ],
)
def test_unknown_crs_is_a_skip(mutate) -> None:
    item = load_fixture("earth_search_s2_l2a.json")
    mutate(item)
    with pytest.raises(UnknownCRS):
        parse_item(item)
    skip = parse_or_skip(item)
    assert isinstance(skip, Skip)
    assert skip.code == "unknown_crs"


def test_bad_proj_code_on_asset_is_a_skip_and_asset_crs_overrides_item() -> None:
    item = load_fixture("cdse_s2_l2a.json")
    item["assets"]["B04_10m"]["proj:code"] = "EPSG:32644"
    assert parse_item(item).assets["red"].crs == 32644
    assert parse_item(item).assets["nir"].crs == 32645
    item["assets"]["B04_10m"]["proj:code"] = "NOT:ACRS"
    skip = parse_or_skip(item)
    assert isinstance(skip, Skip)
    assert skip.code == "unknown_crs"
    assert "B04_10m" in skip.reason


@pytest.mark.parametrize(
    "mutate",
    [
        lambda it: it["properties"].pop("datetime"),
        lambda it: it["properties"].update({"datetime": "yesterday"}),
        lambda it: it["assets"]["B04"].pop("href"),
        lambda it: it["assets"]["B04"].update({"proj:shape": [10980]}),
        lambda it: it.pop("id"),
    ],
)
def test_corrupt_items_are_skips(mutate) -> None:
    item = load_fixture("planetary_computer_s2_l2a.json")
    mutate(item)
    skip = parse_or_skip(item)
    assert isinstance(skip, Skip)
    assert skip.code == "corrupt_item"
    with pytest.raises(CorruptItem):
        parse_item(item)


def test_relative_hrefs_resolve_against_the_item_file() -> None:
    item = copy.deepcopy(load_fixture("earth_search_s2_l2a.json"))
    item["assets"]["red"]["href"] = "./B04.tif"
    scene = parse_item(item, source_href="/data/cat/s2/item-1/item-1.json")
    assert scene.assets["red"].href == "/data/cat/s2/item-1/B04.tif"


def test_models_are_frozen() -> None:
    scene = parse_item(load_fixture("earth_search_s2_l2a.json"))
    with pytest.raises(dataclasses.FrozenInstanceError):
        scene.id = "x"  # type: ignore[misc]
    with pytest.raises(TypeError):
        scene.assets["red"] = scene.assets["nir"]  # type: ignore[index]
    with pytest.raises(dataclasses.FrozenInstanceError):
        scene.assets["red"].scale = 1.0  # type: ignore[misc]


def test_a_bad_timestamp_is_a_corrupt_item_naming_the_value() -> None:
    item = load_fixture("earth_search_s2_l2a.json")
    item["properties"]["datetime"] = "2024-13-01T00:00:00Z"
    with pytest.raises(CorruptItem, match="bad timestamp '2024-13-01T00:00:00Z'"):
        parse_item(item)
