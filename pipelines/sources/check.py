"""Cheap readability check of the file behind an :class:`AssetRef`."""

from __future__ import annotations

from pipelines.sources.models import AssetRef, Skip

__all__ = ["check_readable"]


def check_readable(asset: AssetRef, item_id: str | None = None) -> Skip | None:
    """Open the asset and decode its first and last pixel.

    GeoTIFFs (and anything GDAL reads) go through rasterio; ``.npy`` files
    through numpy (header and memory map). A missing, truncated or corrupt
    file, or one whose shape disagrees with ``asset.shape``, gives a Skip.

    Args:
        asset: The asset to check.
        item_id: Item id to put on the Skip (defaults to the href).

    Returns:
        None when the file reads, else a :class:`Skip` with the reason.
    """
    ident = item_id or asset.href
    if asset.href.endswith(".npy") and "://" not in asset.href:
        return _check_npy(asset, ident)
    import rasterio
    from rasterio.errors import RasterioError
    from rasterio.windows import Window

    href = asset.href
    if href.startswith(("http://", "https://")):
        href = f"/vsicurl/{href}"
    try:
        with rasterio.open(href) as ds:
            h, w = ds.height, ds.width
            ds.read(1, window=Window(0, 0, 1, 1))
            ds.read(1, window=Window(w - 1, h - 1, 1, 1))
    except (RasterioError, OSError, ValueError) as err:
        return Skip(ident, f"asset {asset.role!r} unreadable: {err}", "corrupt_item", asset.href)
    if asset.shape is not None and asset.shape != (h, w):
        reason = f"asset {asset.role!r} is {(h, w)}, item says {asset.shape}"
        return Skip(ident, reason, "corrupt_item", asset.href)
    return None


def _check_npy(asset: AssetRef, ident: str) -> Skip | None:
    import numpy as np

    try:
        arr = np.load(asset.href, mmap_mode="r", allow_pickle=False)
        if arr.size:
            _ = arr.reshape(-1)[-1]
    except (OSError, ValueError, EOFError) as err:
        return Skip(ident, f"asset {asset.role!r} unreadable: {err}", "corrupt_item", asset.href)
    if asset.shape is not None and tuple(arr.shape[:2]) != asset.shape:
        reason = f"asset {asset.role!r} is {tuple(arr.shape[:2])}, item says {asset.shape}"
        return Skip(ident, reason, "corrupt_item", asset.href)
    return None
