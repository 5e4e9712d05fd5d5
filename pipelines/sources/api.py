"""STAC API source: item search through pystac-client against any URL.

The ``max_cloud`` bound goes to the server as the ``query`` extension when the
landing page's conformance lists ``item-search#query``, else as a CQL2-JSON
``filter`` when it lists ``item-search#filter``, else it is applied locally
after the search (the rustac loopback server's memory backend advertises
neither, and answers ``query`` with an empty page rather than an error, so the
adapter must not send it blindly). ``SearchResult.cloud_filter`` says which.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from datetime import date, datetime
from typing import Any

from pipelines.sources.bands import COLLECTION_KIND, canonical_collection, provider_collection
from pipelines.sources.base import BBox, cloud_ok, datetime_interval, finish, window
from pipelines.sources.errors import CatalogUnreachable
from pipelines.sources.models import CloudFilter, Kind, SceneItem, SearchResult, Skip
from pipelines.sources.parse import parse_or_skip

__all__ = ["PRESETS", "StacApiSource"]

PRESETS: Mapping[str, str] = {
    "earth-search": "https://earth-search.aws.element84.com/v1",
    "planetary-computer": "https://planetarycomputer.microsoft.com/api/stac/v1",
    "cdse": "https://stac.dataspace.copernicus.eu/v1",
}
"""Named STAC APIs (preset name -> landing page URL)."""

_QUERY = "/item-search#query"
_FILTER = "/item-search#filter"


class StacApiSource:
    """A :class:`~pipelines.sources.base.SceneSource` over a STAC API (pystac-client)."""

    def __init__(
        self,
        url: str,
        *,
        provider: str | None = None,
        modifier: Callable[[Any], None] | None = None,
        timeout_s: float = 20.0,
        page_size: int = 100,
        max_items: int = 10_000,
        headers: Mapping[str, str] | None = None,
        max_retries: int = 3,
        required_roles: Mapping[Kind, Sequence[str]] | None = None,
    ) -> None:
        """Create the source (no network until the first search).

        Args:
            url: Landing page of the API.
            provider: Preset name used to translate collection names
                (``earth-search``, ``planetary-computer``, ``cdse``), or None.
            modifier: pystac-client modifier applied to every page (URL signing).
            timeout_s: Per-request timeout (connect and read).
            page_size: Items per page requested from the server.
            max_items: Explicit upper bound on items one search returns.
            headers: Extra HTTP headers (e.g. auth).
            max_retries: Connection retries per request (urllib3); 0 fails fast.
            required_roles: Per kind, roles an item must have.
        """
        if page_size < 1 or max_items < 1:
            raise ValueError("page_size and max_items must be positive")
        self.url = url
        self.provider = provider
        self.modifier = modifier
        self.timeout_s = timeout_s
        self.page_size = page_size
        self.max_items = max_items
        self.headers = dict(headers or {})
        self.max_retries = max_retries
        self.required_roles = dict(required_roles or {})
        self._client: Any = None

    def _open(self) -> Any:
        if self._client is None:
            from pystac_client import Client
            from pystac_client.exceptions import APIError
            from pystac_client.stac_api_io import StacApiIO

            io = StacApiIO(
                headers=self.headers or None,
                timeout=self.timeout_s,
                max_retries=self.max_retries or None,
            )
            try:
                self._client = Client.open(self.url, modifier=self.modifier, stac_io=io)
            except APIError as err:
                status = getattr(err, "status_code", None)
                raise CatalogUnreachable(self.url, str(err)[:500], status) from err
            except Exception as err:  # requests / JSON / STAC parse errors
                raise CatalogUnreachable(self.url, f"{type(err).__name__}: {err}"[:500]) from err
        return self._client

    def conforms(self, fragment: str) -> bool:
        """True when the landing page lists a conformance URI ending in ``fragment``."""
        uris = self._open().get_conforms_to()
        return any(str(uri).endswith(fragment) for uri in uris)

    def cloud_mode(self) -> CloudFilter:
        """How a ``max_cloud`` bound would be sent to this server."""
        if self.conforms(_QUERY):
            return "server-query"
        if self.conforms(_FILTER):
            return "server-filter"
        return "client"

    def search(
        self,
        collection: str,
        bbox: BBox,
        start: datetime | date,
        end: datetime | date,
        max_cloud: float | None = None,
    ) -> SearchResult:
        """Search the API (see :meth:`SceneSource.search`)."""
        from pystac_client.exceptions import APIError

        lo, hi = window(start, end)
        name = provider_collection(self.provider, collection)
        kind = COLLECTION_KIND.get(canonical_collection(collection)) or COLLECTION_KIND.get(name)
        client = self._open()
        params: dict[str, Any] = {
            "collections": [name],
            "bbox": list(bbox),
            "datetime": datetime_interval(lo, hi),
            "limit": self.page_size,
            "max_items": self.max_items,
        }
        mode: CloudFilter = "none"
        if max_cloud is not None and kind == "s2":
            mode = self.cloud_mode()
            if mode == "server-query":
                params["query"] = {"eo:cloud_cover": {"lt": max_cloud}}
            elif mode == "server-filter":
                params["filter"] = {
                    "op": "<",
                    "args": [{"property": "eo:cloud_cover"}, max_cloud],
                }
                params["filter_lang"] = "cql2-json"
        items: list[SceneItem] = []
        skipped: list[Skip] = []
        roles = self.required_roles.get(kind) if kind else None
        try:
            for page in client.search(**params).pages_as_dicts():
                for feature in page.get("features", []):
                    parsed = parse_or_skip(feature, kind=kind, required_roles=roles)
                    if isinstance(parsed, Skip):
                        skipped.append(parsed)
                    elif mode != "client" or cloud_ok(parsed, max_cloud):
                        items.append(parsed)
        except APIError as err:
            status = getattr(err, "status_code", None)
            raise CatalogUnreachable(self.url, str(err)[:500], status) from err
        except OSError as err:
            raise CatalogUnreachable(self.url, f"{type(err).__name__}: {err}"[:500]) from err
        return finish(items, skipped, mode)
