"""STAC API source: loopback server equivalence, cloud-filter negotiation, errors, signing."""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Iterator
from datetime import date
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar

import pytest

from pipelines.sources import (
    CatalogUnreachable,
    SasSigner,
    StacApiSource,
    StaticCatalogSource,
    UnknownCollection,
    open_source,
    planetary_computer_modifier,
    provider_collection,
)
from tests.pipelines.sources.conftest import load_fixture

AOI = (85.29, 23.34, 85.40, 23.40)
QUERIES = [
    ("sentinel-2-l2a", AOI, date(2023, 1, 1), date(2023, 1, 31), None),
    ("sentinel-2-l2a", AOI, date(2023, 1, 1), date(2023, 1, 31), 50.0),
    ("sentinel-2-l2a", AOI, date(2023, 1, 10), date(2023, 1, 10), None),
    ("sentinel-2-l2a", (85.55, 23.30, 85.70, 23.40), date(2021, 1, 1), date(2023, 12, 31), None),
    ("sentinel-2-l2a", AOI, date(2021, 1, 1), date(2023, 12, 31), 20.0),
    ("sentinel-1-rtc", AOI, date(2023, 1, 1), date(2023, 1, 31), None),
    ("sentinel-1-rtc", (10.0, 10.0, 11.0, 11.0), date(2023, 1, 1), date(2023, 1, 31), None),
]


@pytest.mark.parametrize("query", QUERIES)
def test_loopback_api_matches_static_catalog(small_catalog: Path, loopback_api: str, query) -> None:
    static = StaticCatalogSource(small_catalog).search(*query)
    api = StacApiSource(loopback_api, page_size=2).search(*query)  # small pages: paging runs
    assert api.ids == static.ids
    assert {(s.item_id, s.code) for s in api.skipped} == {
        (s.item_id, s.code) for s in static.skipped
    }
    for a, b in zip(api.items, static.items, strict=True):
        assert a.assets == b.assets
        assert a.datetime == b.datetime
        assert a.bbox == b.bbox


def test_loopback_server_has_no_query_extension_so_cloud_is_client_side(loopback_api: str) -> None:
    src = StacApiSource(loopback_api)
    assert src.cloud_mode() == "client"
    res = src.search("sentinel-2-l2a", AOI, date(2023, 1, 1), date(2023, 1, 31), max_cloud=50)
    assert res.cloud_filter == "client"
    assert res.ids == ("s2-a", "s2-b")


def test_injected_modifier_sees_every_page(loopback_api: str) -> None:
    calls: list[Any] = []

    def modifier(obj: Any) -> None:
        calls.append(obj)
        for feature in obj.get("features", []):
            for asset in feature["assets"].values():
                asset["href"] += "?signed=1"

    src = open_source({"kind": "stac_api", "url": loopback_api}, modifier=modifier)
    res = src.search("sentinel-1-rtc", AOI, date(2023, 1, 1), date(2023, 1, 31))
    assert calls
    assert res.items
    assert all(a.href.endswith("?signed=1") for it in res.items for a in it.assets.values())


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_unreachable_api_raises_quickly() -> None:
    url = f"http://127.0.0.1:{_closed_port()}"
    t0 = time.perf_counter()
    with pytest.raises(CatalogUnreachable) as err:
        StacApiSource(url, timeout_s=2, max_retries=0).search(
            "sentinel-2-l2a", AOI, date(2023, 1, 1), date(2023, 1, 2)
        )
    assert time.perf_counter() - t0 < 5
    assert err.value.url == url
    assert err.value.code == "catalog_unreachable"


class _FakeApi(BaseHTTPRequestHandler):
    """Landing page advertising chosen conformance; records POST /search bodies."""

    conforms: ClassVar[list[str]] = []
    bodies: ClassVar[list[dict]] = []
    status = 200

    def log_message(self, *args: Any) -> None:
        pass

    def _send(self, code: int, body: dict) -> None:
        raw = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(raw)))
        self.end_headers()
        self.wfile.write(raw)

    def do_GET(self) -> None:
        if type(self).status != 200:
            self._send(type(self).status, {"code": "oops"})
            return
        host = self.headers.get("Host", "127.0.0.1")
        base = f"http://{host}"
        if self.path.startswith("/token/"):
            _, _, account, container = self.path.split("/")
            type(self).bodies.append({"token_for": [account, container]})
            self._send(
                200,
                {
                    "token": f"sv=2021&se=x&sig={account}-{container}",
                    "msft:expiry": "2099-01-01T00:00:00Z",
                },
            )
            return
        self._send(
            200,
            {
                "type": "Catalog",
                "id": "fake",
                "description": "fake",
                "stac_version": "1.0.0",
                "conformsTo": type(self).conforms,
                "links": [
                    {"rel": "self", "href": base + "/"},
                    {"rel": "root", "href": base + "/"},
                    {
                        "rel": "search",
                        "href": base + "/search",
                        "method": "POST",
                        "type": "application/geo+json",
                    },
                ],
            },
        )

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        type(self).bodies.append(body)
        feature = load_fixture("planetary_computer_s2_l2a.json")
        self._send(200, {"type": "FeatureCollection", "features": [feature], "links": []})


@pytest.fixture
def fake_api() -> Iterator[tuple[str, type[_FakeApi]]]:
    handler = type("Handler", (_FakeApi,), {"conforms": [], "bodies": [], "status": 200})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", handler
    finally:
        server.shutdown()
        server.server_close()


BASE = ["https://api.stacspec.org/v1.0.0/core", "https://api.stacspec.org/v1.0.0/item-search"]


@pytest.mark.parametrize(
    ("extra", "mode", "key"),
    [
        (["https://api.stacspec.org/v1.0.0/item-search#query"], "server-query", "query"),
        (["https://api.stacspec.org/v1.0.0-rc.2/item-search#filter"], "server-filter", "filter"),
    ],
)
def test_cloud_bound_follows_conformance(fake_api, extra, mode, key) -> None:
    url, handler = fake_api
    handler.conforms = BASE + extra
    res = StacApiSource(url, provider="planetary-computer").search(
        "sentinel-2-l2a", AOI, date(2023, 4, 1), date(2023, 4, 30), max_cloud=20
    )
    assert res.cloud_filter == mode
    (body,) = handler.bodies
    assert key in body
    assert body["collections"] == ["sentinel-2-l2a"]
    assert body["datetime"] == "2023-04-01T00:00:00.000000Z/2023-04-30T23:59:59.999999Z"
    if key == "query":
        assert body["query"] == {"eo:cloud_cover": {"lt": 20}}
    else:
        assert body["filter"]["args"][0] == {"property": "eo:cloud_cover"}
    assert res.ids == ("S2B_MSIL2A_20230415T044659_R076_T45QTL_20230415T071020",)


def test_server_error_status_is_carried(fake_api) -> None:
    url, handler = fake_api
    handler.status = 503
    with pytest.raises(CatalogUnreachable) as err:
        StacApiSource(url, max_retries=0).search(
            "sentinel-2-l2a", AOI, date(2023, 1, 1), date(2023, 1, 2)
        )
    assert err.value.status == 503


def test_planetary_computer_signing_with_fake_token_endpoint(fake_api) -> None:
    url, handler = fake_api
    handler.conforms = BASE
    cfg = {
        "kind": "stac_api",
        "url": url,
        "preset": "planetary-computer",
        "token_endpoint": url + "/token",
    }
    res = open_source(cfg).search("sentinel-2-l2a", AOI, date(2023, 4, 1), date(2023, 4, 30))
    (scene,) = res.items
    red = scene.assets["red"].href
    assert red.endswith("?sv=2021&se=x&sig=sentinel2l2a01-sentinel2-l2")
    tokens = [b for b in handler.bodies if "token_for" in b]
    assert tokens == [{"token_for": ["sentinel2l2a01", "sentinel2-l2"]}]  # fetched once, cached


def test_sas_signer_with_injected_fetcher() -> None:
    seen: list[tuple[str, str]] = []

    def fetch(account: str, container: str) -> tuple[str, float]:
        seen.append((account, container))
        return "sig=abc", time.time() + 3600

    signer = SasSigner(fetch)
    feature = load_fixture("planetary_computer_s1_rtc.json")
    signer(feature)
    assert feature["assets"]["vv"]["href"].endswith(".tiff?sig=abc")
    assert signer.sign_href("https://example.com/a.tif") == "https://example.com/a.tif"
    assert signer.sign_href("https://x.blob.core.windows.net/c/a.tif?sig=zz").endswith("sig=zz")
    assert seen == [("sentinel1euwestrtc", "sentinel1-grd-rtc")]
    assert isinstance(planetary_computer_modifier(fetch=fetch), SasSigner)


def test_collection_names_per_provider() -> None:
    assert provider_collection("planetary-computer", "sentinel-1-rtc") == "sentinel-1-rtc"
    assert provider_collection("earth-search", "sentinel-2-l2a") == "sentinel-2-l2a"
    assert provider_collection(None, "anything") == "anything"
    with pytest.raises(UnknownCollection):
        provider_collection("earth-search", "sentinel-1-rtc")


def test_config_validation() -> None:
    with pytest.raises(ValueError, match="needs a path"):
        open_source({"kind": "static"})
    with pytest.raises(ValueError, match="unknown preset"):
        open_source({"kind": "stac_api", "preset": "nope"})
    with pytest.raises(ValueError, match="unknown source config"):
        open_source({"kind": "static", "path": "x", "colour": "red"})
    src = open_source({"kind": "stac_api", "preset": "earth-search"})
    assert isinstance(src, StacApiSource)
    assert src.url.startswith("https://earth-search")
