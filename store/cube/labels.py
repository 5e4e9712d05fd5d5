"""Labelled views of cube regions: numpy values with their lattice and time coordinates."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from store.address import q_center
from store.cube.bands import BandSpec

if TYPE_CHECKING:
    import xarray as xr

__all__ = ["region_dataarray"]


def region_dataarray(
    spec: BandSpec,
    slots: npt.NDArray[np.int64],
    box: tuple[int, int, int, int],
    values: npt.NDArray[Any],
    snapshot_id: str,
) -> xr.DataArray:
    """A region's values as an ``xarray.DataArray`` with dims ``(tslot, lat, lng[, dim])``.

    Args:
        spec: The band.
        slots: Tslots of ``values``' first axis.
        box: ``(lat_q0, lat_q1, lng_q0, lng_q1)`` half-open lattice box of the values.
        values: ``(len(slots), lat_q1 - lat_q0, lng_q1 - lng_q0[, d])``.
        snapshot_id: The snapshot read (an attribute of the result).

    Returns:
        Coordinates ``tslot``, ``lat``/``lng`` (cell centres, degrees), ``lat_q``,
        ``lng_q`` and ``date`` (day tempo) or ``year`` (year tempo); attrs name the
        band, units, tempo, CRS and snapshot.
    """
    # Imported here: xarray (with pandas) costs seconds to import and the
    # writer processes that Dagster spawns never need it.
    import xarray as xr

    lat_q0, lat_q1, lng_q0, lng_q1 = box
    lat_q = np.arange(lat_q0, lat_q1, dtype=np.int64)
    lng_q = np.arange(lng_q0, lng_q1, dtype=np.int64)
    lat, lng = q_center(lat_q, lng_q)
    coords: dict[str, Any] = {
        "tslot": ("tslot", slots),
        "lat": ("lat", lat),
        "lng": ("lng", lng),
        "lat_q": ("lat", lat_q),
        "lng_q": ("lng", lng_q),
    }
    if spec.tempo == "day":
        coords["date"] = ("tslot", np.datetime64("1970-01-01", "D") + slots.astype("m8[D]"))
    else:
        coords["year"] = ("tslot", slots + 1970)
    dims = ("tslot", "lat", "lng", *((spec.extra_dim[0],) if spec.extra_dim else ()))
    return xr.DataArray(
        values,
        dims=dims,
        coords=coords,
        name=spec.name,
        attrs={
            "band": spec.name,
            "units": spec.units,
            "long_name": spec.long_name,
            "tempo": spec.tempo,
            "crs": "EPSG:4326",
            "snapshot_id": snapshot_id,
        },
    )
