"""Build behaviour: determinism, layout, manifest, errors, CLI."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pytest
import rasterio
from shapely.geometry import Point, box, shape

from pipelines.sample import (
    CENTER_LAT,
    CENTER_LNG,
    InvalidSampleSize,
    SampleExists,
    build_sample,
    cli_main,
    s1_dates,
    s2_dates,
)


def _digests(root: Path) -> dict[str, str]:
    return {
        p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


def test_same_seed_gives_identical_bytes(tiny, tmp_path):
    out = tmp_path / "again"
    assert cli_main(["--size", "tiny", "--out", str(out), "--seed", "0"]) == 0
    a, b = _digests(tiny.root), _digests(out)
    assert a.keys() == b.keys()
    assert len(a) == tiny.info.n_files
    differing = [k for k in a if a[k] != b[k]]
    assert differing == []


def test_other_seed_changes_content(tiny, tmp_path):
    info = build_sample(tmp_path / "s1", "tiny", seed=1)
    assert (info.root / "landcover.tif").read_bytes() != (tiny.root / "landcover.tif").read_bytes()
    # Same layout and dates though.
    assert info.n_s2 == tiny.info.n_s2
    assert info.n_s1 == tiny.info.n_s1


def test_refuses_to_overwrite_and_rejects_unknown_size(tiny, tmp_path):
    with pytest.raises(SampleExists):
        build_sample(tiny.root, "tiny")
    with pytest.raises(InvalidSampleSize):
        build_sample(tmp_path / "x", "huge")  # type: ignore[arg-type]
    assert cli_main(["--size", "tiny", "--out", str(tiny.root)]) == 2


def test_progress_is_reported(tmp_path):
    seen: list[tuple[str, int, int]] = []
    build_sample(tmp_path / "p", "tiny", progress=lambda s, d, t: seen.append((s, d, t)))
    stages = {s for s, _, _ in seen}
    assert {"scene", "sentinel-2-l2a", "sentinel-1-rtc", "tessera-embeddings", "stac"} <= stages
    s2 = [(d, t) for s, d, t in seen if s == "sentinel-2-l2a"]
    assert s2[-1] == (14, 14)


def test_layout_and_counts(tiny):
    root = tiny.root
    info = tiny.info
    assert info.catalog == root / "catalog.json"
    assert info.catalog.exists()
    assert info.n_s2 == len(s2_dates("tiny")) == 14
    assert info.n_s1 == len(s1_dates("tiny"))
    assert info.n_tessera == 2
    assert len(s2_dates("demo")) == 146
    assert len(s1_dates("demo")) == 61
    for it in tiny.items("sentinel-2-l2a"):
        d = tiny.item_dir("sentinel-2-l2a", it["id"])
        assert sorted(p.name for p in d.glob("*.tif")) == [
            "B02.tif",
            "B03.tif",
            "B04.tif",
            "B08.tif",
            "B11.tif",
            "B12.tif",
            "SCL.tif",
        ]
    t = "grid_85.35_23.35"
    for year in (2023, 2024):
        base = root / "tessera" / "global_0.1_degree_representation" / str(year) / t
        assert (base / f"{t}.npy").exists()
        assert (base / f"{t}_scales.npy").exists()
    assert (root / "tessera" / "global_0.1_degree_tiff_all" / f"{t}.tiff").exists()


def test_landcover_has_every_class(tiny):
    lc = tiny.landcover()
    assert set(np.unique(lc).tolist()) == {1, 2, 3, 4, 5}
    classes = json.loads((tiny.root / "landcover_classes.json").read_text())["classes"]
    assert [c["name"] for c in classes] == ["farmland", "forest", "lake", "river", "town"]
    with rasterio.open(tiny.root / "landcover.tif") as ds:
        assert ds.crs.to_epsg() == 32645
        assert ds.res == (10.0, 10.0)


def test_manifest_events_and_features_lie_inside_the_area(tiny):
    m = tiny.manifest
    area = box(*m["bbox"])
    assert area.contains(Point(CENTER_LNG, CENTER_LAT))
    kinds = {e["kind"] for e in m["events"]}
    assert kinds == {"forest_clearing", "flood", "construction", "crop_season"}
    for e in m["events"] + m["features"]:
        geom = shape(e["geometry"])
        assert geom.is_valid, e["id"]
        assert area.buffer(1e-9).contains(geom), e["id"]
        centre = Point(e["centre"]["lng"], e["centre"]["lat"])
        assert geom.buffer(1e-9).contains(centre), e["id"]
        assert tiny.mask(e["geometry"]).sum() >= 9, e["id"]
    for e in m["events"]:
        assert e["start"] <= e["end"], e["id"]
        assert e["expected"], e["id"]
    names = {f["kind"]: f["name"] for f in m["features"]}
    assert names["lake"] == "Kanke Lake"
    assert names["river"] == "Jumar River"


def test_event_masks_match_land_cover(tiny):
    lc = tiny.landcover()
    clearing = tiny.mask(tiny.event("forest-clearing-2024")["geometry"])
    assert (lc[clearing] == 2).all()
    flood = tiny.mask(tiny.event("monsoon-flood-2024")["geometry"])
    assert (lc[flood] == 1).all()
    cons = tiny.mask(tiny.event("construction-site-2023")["geometry"])
    assert (lc[cons] == 1).all()


def test_tiny_dates_bracket_the_events(tiny):
    dates = [d.isoformat() for d in s2_dates("tiny")]
    assert any(d < "2024-03-15" for d in dates if d >= "2024-01-01")
    assert any("2024-03-15" < d < "2024-05-01" for d in dates)
    inside = [d for d in dates if "2024-08-01" <= d <= "2024-08-25"]
    assert len(inside) >= 2
    assert any("2024-07-01" <= d < "2024-08-01" for d in dates)
    assert any("2024-08-25" < d <= "2024-09-30" for d in dates)
    assert any(d[5:7] in ("08", "09") for d in dates)
    assert any(d[5:7] in ("01", "02") for d in dates)
    s1 = [d.isoformat() for d in s1_dates("tiny")]
    assert any("2024-08-01" <= d <= "2024-08-25" for d in s1)


def test_relative_root_gives_item_relative_hrefs(tmp_path, monkeypatch) -> None:
    import json as _json

    from pipelines.sample import build_sample as _build

    monkeypatch.chdir(tmp_path)
    _build(Path("rel/sample"), size="tiny", seed=0)
    item = sorted((tmp_path / "rel/sample/sentinel-2-l2a").glob("*/*.json"))[0]
    href = _json.loads(item.read_text())["assets"]["red"]["href"]
    assert href == "./B04.tif"
