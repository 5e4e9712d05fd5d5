"""The bench-only "long" catalog: the demo's scenes copied in time and moved east in space.

Built once under ``bench/.cache`` (see :func:`long_area`); it gives the ingest
bench's cost-per-scene rows a largest size well beyond the demo's scenes, at
the demo's density.
"""

from __future__ import annotations

import json
import shutil
from datetime import date, datetime, timedelta
from pathlib import Path
from typing import Any

from bench.common import CACHE_DIR, DemoArea

__all__ = ["LONG_EAST_M", "LONG_SHIFT_DAYS", "LONG_TILES", "LONG_VERSION", "S1", "S2", "long_area"]

S2, S1 = "sentinel-2-l2a", "sentinel-1-rtc"
"""The scene collections the ingest bench reads."""

LONG_SHIFT_DAYS = 7 * 104
"""Shift of the long catalog's time copies: 104 weeks keeps weekdays and week phase."""
LONG_EAST_M = 2240.0
"""Easting shift of the long catalog's space copies: 112 x 20 m (a whole number of 10 m and 20 m
pixels), about one level-8 block (256 lattice columns) at 23.36 N, so copy ``k`` of the demo
footprint covers the two blocks of block column ``+k``, at the same place in them."""
LONG_TILES = 4
"""Copies in space of the demo footprint (the original plus ``LONG_TILES - 1`` eastward)."""
LONG_VERSION = 2


def _vrt_xml(src: str, dx: float) -> str:
    """A VRT of a single-band raster ``src`` moved ``dx`` metres east (same pixels, same CRS)."""
    from xml.sax.saxutils import escape, quoteattr

    import rasterio

    with rasterio.open(src) as ds:
        if ds.count != 1 or ds.crs is None:
            raise ValueError(f"{src}: expected one band with a CRS")
        t = ds.transform
        dtype = {"uint8": "Byte", "uint16": "UInt16", "int16": "Int16", "float32": "Float32"}[
            ds.dtypes[0]
        ]
        nodata = "" if ds.nodata is None else f"<NoDataValue>{ds.nodata!r}</NoDataValue>"
        by, bx = ds.block_shapes[0]
        w, h, wkt = ds.width, ds.height, ds.crs.to_wkt()
    rect = f'xOff="0" yOff="0" xSize="{w}" ySize="{h}"'
    return (
        f'<VRTDataset rasterXSize="{w}" rasterYSize="{h}">\n'
        f'  <SRS dataAxisToSRSAxisMapping="1,2">{escape(wkt)}</SRS>\n'
        f"  <GeoTransform>{t.c + dx!r}, {t.a!r}, {t.b!r}, {t.f!r}, {t.d!r}, {t.e!r}</GeoTransform>\n"
        f'  <VRTRasterBand dataType="{dtype}" band="1">\n'
        f"    {nodata}\n"
        "    <SimpleSource>\n"
        f'      <SourceFilename relativeToVRT="0">{escape(src)}</SourceFilename>\n'
        "      <SourceBand>1</SourceBand>\n"
        f'      <SourceProperties RasterXSize="{w}" RasterYSize="{h}" DataType={quoteattr(dtype)} '
        f'BlockXSize="{bx}" BlockYSize="{by}"/>\n'
        f"      <SrcRect {rect}/>\n"
        f"      <DstRect {rect}/>\n"
        "    </SimpleSource>\n"
        "  </VRTRasterBand>\n"
        "</VRTDataset>\n"
    )


def _shift_item_east(item: dict[str, Any], k: int, hrefs: dict[str, str]) -> dict[str, Any]:
    """Copy ``k`` of an item moved ``k * LONG_EAST_M`` east in its UTM CRS.

    The footprint's vertices go to the item's ``proj:code`` CRS, move, and come
    back; ``bbox`` is their envelope; ``proj:bbox`` / ``proj:transform`` move by
    the same metres; asset hrefs are replaced through ``hrefs`` (COG -> VRT).
    """
    from pyproj import Transformer

    dx = k * LONG_EAST_M
    copy: dict[str, Any] = json.loads(json.dumps(item))
    copy["id"] = f"{item['id']}_e{k}"
    props = copy["properties"]
    to_utm = Transformer.from_crs("EPSG:4326", props["proj:code"], always_xy=True)
    to_ll = Transformer.from_crs(props["proj:code"], "EPSG:4326", always_xy=True)
    ring = copy["geometry"]["coordinates"][0]
    x, y = to_utm.transform([p[0] for p in ring], [p[1] for p in ring])
    lng, lat = to_ll.transform([v + dx for v in x], list(y))
    copy["geometry"]["coordinates"] = [
        [[round(a, 7), round(b, 7)] for a, b in zip(lng, lat, strict=True)]
    ]
    ring = copy["geometry"]["coordinates"][0]
    copy["bbox"] = [
        min(p[0] for p in ring),
        min(p[1] for p in ring),
        max(p[0] for p in ring),
        max(p[1] for p in ring),
    ]
    if "proj:bbox" in props:
        x0, y0, x1, y1 = props["proj:bbox"]
        props["proj:bbox"] = [x0 + dx, y0, x1 + dx, y1]
    for holder in (props, *copy["assets"].values()):
        tr = holder.get("proj:transform")
        if tr:
            holder["proj:transform"] = [*tr[:2], tr[2] + dx, *tr[3:]]
    for asset in copy["assets"].values():
        if asset.get("href") in hrefs:
            asset["href"] = hrefs[asset["href"]]
    return copy


def long_area(area: DemoArea) -> DemoArea:
    """A bench-only catalog ~8x the demo's scenes at its density (built once under ``bench/.cache``).

    Every demo S2 / S1 item, plus a copy 104 weeks later (copies dated after
    today are left out: their weeks are not partitions yet), each also copied
    ``LONG_TILES - 1`` times eastward by ``k * LONG_EAST_M`` onto fresh
    blocks. A space copy's assets are GDAL VRTs over the demo's COGs with the
    GeoTransform moved (real rasters at the new place, no pixel copies). The
    area file (``manifest.json``: name + bbox) is the envelope of every item.
    """
    from pipelines.sources.static import load_catalog_items

    root = CACHE_DIR / f"ingest_long_{area.size}_v{LONG_VERSION}"
    catalog = root / "catalog.json"
    if not catalog.exists():
        if root.exists():
            shutil.rmtree(root)
        tmp = root.with_name(root.name + ".tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        sample = area.sample.resolve()
        today = date.today().isoformat()
        vrts: dict[int, dict[str, str]] = {k: {} for k in range(1, LONG_TILES)}
        by_coll: dict[str, list[dict[str, Any]]] = {S2: [], S1: []}
        for _, item in load_catalog_items(area.catalog):
            coll = item.get("collection")
            if coll not in by_coll:
                continue
            copy = json.loads(json.dumps(item))
            props = copy["properties"]
            for key in ("datetime", "start_datetime", "end_datetime"):
                if isinstance(props.get(key), str):
                    t = datetime.fromisoformat(props[key].replace("Z", "+00:00"))
                    props[key] = (t + timedelta(days=LONG_SHIFT_DAYS)).strftime(
                        "%Y-%m-%dT%H:%M:%SZ"
                    )
            copy["id"] = f"{item['id']}_p104w"
            in_time = [item] + ([copy] if props["datetime"][:10] <= today else [])
            for k in range(1, LONG_TILES):
                dx = k * LONG_EAST_M
                for asset in item["assets"].values():
                    href = asset.get("href")
                    if isinstance(href, str) and href.endswith(".tif") and href not in vrts[k]:
                        rel = Path(href).resolve().relative_to(sample).with_suffix(".vrt")
                        dst = tmp / "vrt" / f"e{k}" / rel
                        dst.parent.mkdir(parents=True, exist_ok=True)
                        dst.write_text(_vrt_xml(href, dx))
                        vrts[k][href] = str(root / "vrt" / f"e{k}" / rel)
            for it in in_time:
                by_coll[coll].append(it)
                by_coll[coll] += [_shift_item_east(it, k, vrts[k]) for k in range(1, LONG_TILES)]
        links = []
        boxes = []
        for coll, items in by_coll.items():
            (tmp / coll).mkdir()
            item_links = []
            for it in items:
                it["links"] = []
                boxes.append(it["bbox"])
                (tmp / coll / f"{it['id']}.json").write_text(json.dumps(it))
                item_links.append({"rel": "item", "href": f"./{it['id']}.json"})
            doc = json.loads((area.sample / coll / "collection.json").read_text())
            doc["links"] = item_links
            (tmp / coll / "collection.json").write_text(json.dumps(doc))
            links.append({"rel": "child", "href": f"./{coll}/collection.json"})
        cat: dict[str, Any] = {
            "type": "Catalog",
            "id": "earthmem-bench-long",
            "stac_version": "1.1.0",
        }
        cat |= {
            "description": f"bench-only: demo items + 104-week copies, x{LONG_TILES} eastward",
            "links": links,
        }
        envelope = [
            min(b[0] for b in boxes),
            min(b[1] for b in boxes),
            max(b[2] for b in boxes),
            max(b[3] for b in boxes),
        ]
        area_doc = {"name": f"bench-long-{area.size}-x{LONG_TILES}", "bbox": envelope}
        (tmp / "manifest.json").write_text(json.dumps(area_doc, indent=2))
        (tmp / "catalog.json").write_text(json.dumps(cat))
        tmp.rename(root)
    return DemoArea(f"{area.size}-long", root, area.data, {"built_from": str(area.sample)})
