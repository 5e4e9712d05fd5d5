"""URL signing for Microsoft Planetary Computer assets.

PC assets live in Azure Blob Storage and need a short-lived SAS token appended
to each href. :func:`planetary_computer_modifier` returns a pystac-client
``modifier``: the ``planetary_computer`` package's ``sign_inplace`` when that
package is importable (and no explicit token endpoint / fetcher was given),
else :class:`SasSigner`, a small built-in signer that fetches tokens from the
PC token endpoint (``GET {endpoint}/{account}/{container}`` ->
``{"token": ..., "msft:expiry": ...}``) and caches them until expiry.
"""

from __future__ import annotations

import contextlib
import threading
import time
import urllib.parse
from collections.abc import Callable, MutableMapping
from typing import Any

import pystac

from pipelines.sources.errors import CatalogUnreachable
from store.errors import InvalidDate
from store.tslot import parse_datetime

__all__ = [
    "PC_TOKEN_ENDPOINT",
    "SasSigner",
    "TokenFetcher",
    "http_token_fetcher",
    "planetary_computer_modifier",
]

PC_TOKEN_ENDPOINT = "https://planetarycomputer.microsoft.com/api/sas/v1/token"
"""Planetary Computer SAS token endpoint."""

TokenFetcher = Callable[[str, str], tuple[str, float]]
"""``(account, container) -> (token, expiry unix seconds)``."""

_BLOB_SUFFIX = ".blob.core.windows.net"
_REFRESH_MARGIN_S = 60.0


def http_token_fetcher(endpoint: str = PC_TOKEN_ENDPOINT, timeout_s: float = 10.0) -> TokenFetcher:
    """A :data:`TokenFetcher` that asks a PC-style token endpoint over HTTP.

    Raises (when called):
        CatalogUnreachable: The endpoint failed or answered garbage.
    """
    import httpx

    def fetch(account: str, container: str) -> tuple[str, float]:
        url = f"{endpoint.rstrip('/')}/{account}/{container}"
        try:
            resp = httpx.get(url, timeout=timeout_s)
        except httpx.HTTPError as err:
            raise CatalogUnreachable(url, f"token request failed: {err}") from err
        if resp.status_code != 200:
            raise CatalogUnreachable(url, "token request refused", status=resp.status_code)
        try:
            body = resp.json()
            token = str(body["token"])
        except (ValueError, KeyError, TypeError) as err:
            raise CatalogUnreachable(url, f"bad token response: {err}") from err
        expiry = time.time() + 45 * 60.0
        raw_expiry = body.get("msft:expiry")
        if isinstance(raw_expiry, str):
            with contextlib.suppress(InvalidDate):  # keep the default on a bad expiry
                expiry = parse_datetime(raw_expiry).timestamp()
        return token, expiry

    return fetch


class SasSigner:
    """Appends cached SAS tokens to Azure Blob hrefs, in place (a pystac-client modifier)."""

    def __init__(self, fetch: TokenFetcher | None = None) -> None:
        """Create a signer.

        Args:
            fetch: Token fetcher; defaults to the public PC token endpoint over HTTP.
        """
        self._fetch = fetch or http_token_fetcher()
        self._cache: dict[tuple[str, str], tuple[str, float]] = {}
        self._lock = threading.Lock()

    def token(self, account: str, container: str) -> str:
        """The SAS token for a storage account/container, fetched or from cache."""
        key = (account, container)
        with self._lock:
            cached = self._cache.get(key)
            if cached is not None and cached[1] - _REFRESH_MARGIN_S > time.time():
                return cached[0]
        token, expiry = self._fetch(account, container)
        with self._lock:
            self._cache[key] = (token, expiry)
        return token

    def sign_href(self, href: str) -> str:
        """Sign one href (unchanged if it is not an Azure Blob URL or already signed)."""
        url = urllib.parse.urlparse(href)
        host = url.hostname or ""
        if url.scheme not in ("http", "https") or not host.endswith(_BLOB_SUFFIX):
            return href
        if "sig=" in url.query:
            return href
        parts = [p for p in url.path.split("/") if p]
        if not parts:
            return href
        token = self.token(host[: -len(_BLOB_SUFFIX)], parts[0])
        return href + ("&" if url.query else "?") + token.lstrip("?")

    def _sign_assets(self, assets: MutableMapping[str, Any]) -> None:
        for asset in assets.values():
            if isinstance(asset, pystac.Asset):
                asset.href = self.sign_href(asset.href)
            elif isinstance(asset, MutableMapping) and isinstance(asset.get("href"), str):
                asset["href"] = self.sign_href(asset["href"])

    def __call__(self, obj: Any) -> None:
        """Sign every asset of an item, collection, item collection or their dicts, in place."""
        if isinstance(obj, pystac.ItemCollection):
            for item in obj.items:
                self._sign_assets(item.assets)
        elif isinstance(obj, (pystac.Item, pystac.Collection)):
            self._sign_assets(obj.assets)
        elif isinstance(obj, pystac.Asset):
            obj.href = self.sign_href(obj.href)
        elif isinstance(obj, MutableMapping):
            if obj.get("type") == "FeatureCollection":
                for feature in obj.get("features", []):
                    if isinstance(feature, MutableMapping):
                        self._sign_assets(feature.get("assets", {}))
            elif isinstance(obj.get("assets"), MutableMapping):
                self._sign_assets(obj["assets"])


def planetary_computer_modifier(
    token_endpoint: str | None = None, fetch: TokenFetcher | None = None
) -> Callable[[Any], None]:
    """The modifier to pass to ``pystac_client.Client.open`` for Planetary Computer.

    Args:
        token_endpoint: Token endpoint URL; forces the built-in signer (tests
            point it at a fake endpoint on loopback).
        fetch: Injected token fetcher; forces the built-in signer.

    Returns:
        ``planetary_computer.sign_inplace`` if importable and nothing was
        injected, else a :class:`SasSigner`.
    """
    if token_endpoint is None and fetch is None:
        try:
            import planetary_computer
        except ImportError:
            pass
        else:
            sign: Callable[[Any], None] = planetary_computer.sign_inplace
            return sign
    if fetch is None:
        fetch = http_token_fetcher(token_endpoint or PC_TOKEN_ENDPOINT)
    return SasSigner(fetch)
