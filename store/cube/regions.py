"""Region reads of a cube snapshot: labelled arrays of a box, a bbox, a block, a cell's series.

:class:`RegionReads` is the part of :class:`store.cube.read.CubeReader` that reads
through zarr into ``xarray.DataArray`` s (only the existing chunks of the region, found
from the snapshot's chunk index); reads above ``max_region_elements`` raise
:class:`~store.errors.RegionTooLarge`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt
import zarr

from store.address import bbox_q_range
from store.blocks import Block, block_q_range
from store.cube.bands import YEAR_SLOTS, BandSpec, band_spec
from store.cube.codec import check_box, fill_mask
from store.cube.labels import region_dataarray
from store.errors import RegionOutOfBounds, RegionTooLarge

if TYPE_CHECKING:
    import xarray as xr

__all__ = ["RegionReads"]


class RegionReads:
    """Region reads over a snapshot's arrays (mixed into :class:`~store.cube.read.CubeReader`)."""

    block_level: int
    """Spatial chunk level of the cube."""
    max_region_elements: int
    """Cap on elements per read."""

    @property
    def snapshot_id(self) -> str:
        """Id of the snapshot read (provided by the reader)."""
        raise NotImplementedError

    def array(self, band: str) -> zarr.Array:
        """The band's array (provided by the reader)."""
        raise NotImplementedError

    def chunk_index(self, band: str) -> dict[tuple[int, int], npt.NDArray[np.int64]]:
        """The band's stored chunks (provided by the reader)."""
        raise NotImplementedError

    def _read(
        self, spec: BandSpec, slots: npt.NDArray[np.int64], ys: slice, xs: slice
    ) -> npt.NDArray[Any]:
        raise NotImplementedError

    def _candidate_tslots(
        self,
        spec: BandSpec,
        lat_q0: int,
        lat_q1: int,
        lng_q0: int,
        lng_q1: int,
        t0: int | None,
        t1: int | None,
    ) -> npt.NDArray[np.int64]:
        """Time slots of existing chunks intersecting the region, within [t0, t1)."""
        lo = 0 if t0 is None else t0
        hi = spec.time_size if t1 is None else t1
        if not 0 <= lo < hi <= spec.time_size:
            raise RegionOutOfBounds(
                f"tslot range [{lo}, {hi}) is empty or outside [0, {spec.time_size})"
            )
        side = 1 << self.block_level
        index = self.chunk_index(spec.name)
        parts = [
            tcs
            for cy in range(lat_q0 // side, (lat_q1 - 1) // side + 1)
            for cx in range(lng_q0 // side, (lng_q1 - 1) // side + 1)
            if (tcs := index.get((cy, cx))) is not None
        ]
        if not parts:
            return np.zeros(0, dtype=np.int64)
        tcs = np.unique(np.concatenate(parts))
        step = spec.time_chunk
        slots = (tcs[:, None] * step + np.arange(step)[None, :]).ravel()
        return slots[(slots >= lo) & (slots < hi) & (slots < spec.time_size)]

    def cell_series(
        self,
        band: str,
        lat_q: int,
        lng_q: int,
        t0: int | None = None,
        t1: int | None = None,
    ) -> tuple[npt.NDArray[np.int64], npt.NDArray[Any]]:
        """Time series of one cell: the slots holding a value and the values.

        Reads only the existing chunks along the cell's time column.

        Args:
            band: Band name.
            lat_q: Row of the cell.
            lng_q: Column of the cell.
            t0: First tslot (inclusive; default: start of the axis).
            t1: End tslot (exclusive; default: end of the axis).

        Returns:
            ``(tslots, values)``: sorted slots where the cell is not fill, and
            the values (``(n,)``, or ``(n, d)`` for vector bands).
        """
        spec = band_spec(band)
        check_box(lat_q, lat_q + 1, lng_q, lng_q + 1)
        slots = self._candidate_tslots(spec, lat_q, lat_q + 1, lng_q, lng_q + 1, t0, t1)
        extra = (spec.extra_dim[1],) if spec.extra_dim else ()
        if slots.size == 0:
            return slots, np.zeros((0, *extra), dtype=spec.dtype)
        values = self._read(spec, slots, slice(lat_q, lat_q + 1), slice(lng_q, lng_q + 1))
        values = values[:, 0, 0]
        fill = fill_mask(values, spec.fill_value)
        keep = ~fill.reshape(fill.shape[0], -1).all(axis=1)
        return slots[keep], values[keep]

    def read_region(
        self,
        band: str,
        lat_q0: int,
        lat_q1: int,
        lng_q0: int,
        lng_q1: int,
        t0: int | None = None,
        t1: int | None = None,
        *,
        drop_empty: bool = True,
    ) -> xr.DataArray:
        """Read a lattice region as an ``xarray.DataArray``.

        Args:
            band: Band name.
            lat_q0: First row (inclusive).
            lat_q1: End row (exclusive).
            lng_q0: First column (inclusive).
            lng_q1: End column (exclusive).
            t0: First tslot (inclusive; default: start of the axis).
            t1: End tslot (exclusive; default: end of the axis).
            drop_empty: Keep only tslots with a value somewhere in the region
                (default). When false every slot of ``[t0, t1)`` is returned
                (``t0`` and ``t1`` then required).

        Returns:
            DataArray with dims ``(tslot, lat, lng[, dim])`` and coordinates
            ``tslot``, ``lat``/``lng`` (cell centres, degrees), ``lat_q``,
            ``lng_q`` and ``date`` (day tempo) or ``year`` (year tempo); attrs
            name the band, units and ``snapshot_id``.

        Raises:
            RegionOutOfBounds: Empty or out-of-lattice region or tslot range.
            RegionTooLarge: More than ``max_region_elements`` elements to read.
        """
        spec = band_spec(band)
        check_box(lat_q0, lat_q1, lng_q0, lng_q1)
        if drop_empty:
            slots = self._candidate_tslots(spec, lat_q0, lat_q1, lng_q0, lng_q1, t0, t1)
        else:
            if t0 is None or t1 is None:
                raise RegionOutOfBounds("drop_empty=False needs an explicit [t0, t1)")
            if not 0 <= t0 < t1 <= spec.time_size:
                raise RegionOutOfBounds(f"tslot range [{t0}, {t1}) outside [0, {spec.time_size})")
            slots = np.arange(t0, t1, dtype=np.int64)
        extra = (spec.extra_dim[1],) if spec.extra_dim else ()
        elements = slots.size * (lat_q1 - lat_q0) * (lng_q1 - lng_q0) * math.prod(extra)
        if elements > self.max_region_elements:
            raise RegionTooLarge(
                f"region of {elements} elements exceeds the cap of {self.max_region_elements}; "
                "narrow the area or the tslot range"
            )
        shape = (slots.size, lat_q1 - lat_q0, lng_q1 - lng_q0, *extra)
        if slots.size:
            values = self._read(spec, slots, slice(lat_q0, lat_q1), slice(lng_q0, lng_q1))
        else:
            values = np.zeros(shape, dtype=spec.dtype)
        if drop_empty and slots.size:
            fill = fill_mask(values, spec.fill_value)
            keep = ~fill.reshape(fill.shape[0], -1).all(axis=1)
            slots, values = slots[keep], values[keep]
        return region_dataarray(
            spec, slots, (lat_q0, lat_q1, lng_q0, lng_q1), values, self.snapshot_id
        )

    def read_bbox(
        self,
        band: str,
        bbox: Sequence[float],
        t0: int | None = None,
        t1: int | None = None,
        *,
        drop_empty: bool = True,
    ) -> xr.DataArray:
        """Read the cells whose centres lie in a bbox.

        Args:
            band: Band name.
            bbox: ``(min_lat, min_lng, max_lat, max_lng)`` in degrees.
            t0: First tslot (inclusive).
            t1: End tslot (exclusive).
            drop_empty: See :meth:`read_region`.

        Returns:
            As :meth:`read_region`.

        Raises:
            RegionOutOfBounds: The bbox holds no cell centre.
        """
        if len(bbox) != 4:
            raise RegionOutOfBounds("bbox must be (min_lat, min_lng, max_lat, max_lng)")
        lat_q0, lat_q1, lng_q0, lng_q1 = bbox_q_range(*(float(v) for v in bbox))
        if lat_q0 >= lat_q1 or lng_q0 >= lng_q1:
            raise RegionOutOfBounds(f"bbox {tuple(bbox)} holds no cell centre")
        return self.read_region(band, lat_q0, lat_q1, lng_q0, lng_q1, t0, t1, drop_empty=drop_empty)

    def read_block(
        self,
        band: str,
        block: Block,
        t0: int | None = None,
        t1: int | None = None,
        *,
        drop_empty: bool = True,
    ) -> xr.DataArray:
        """Read one block (any level) of a band.

        Args:
            band: Band name.
            block: The block (``store.blocks.Block``).
            t0: First tslot (inclusive).
            t1: End tslot (exclusive).
            drop_empty: See :meth:`read_region`.

        Returns:
            As :meth:`read_region`.
        """
        lat_q0, lat_q1, lng_q0, lng_q1 = block_q_range(block)
        return self.read_region(band, lat_q0, lat_q1, lng_q0, lng_q1, t0, t1, drop_empty=drop_empty)

    def cell_vector(self, lat_q: int, lng_q: int, year: int) -> tuple[npt.NDArray[np.int8], float]:
        """The Tessera int8 vector and scale of one cell and year.

        Args:
            lat_q: Row of the cell.
            lng_q: Column of the cell.
            year: Calendar year (year slot = ``year - 1970``).

        Returns:
            ``(vector int8[128], scale)``; scale NaN = water, +inf = no data
            (the vector is then all zeros).
        """
        slot = year - 1970
        if not 0 <= slot < YEAR_SLOTS:
            raise RegionOutOfBounds(f"year {year} outside [1970, {1970 + YEAR_SLOTS})")
        check_box(lat_q, lat_q + 1, lng_q, lng_q + 1)
        vector = np.asarray(self.array("geotessera")[slot, lat_q, lng_q, :], dtype=np.int8)
        scale = float(np.asarray(self.array("geotessera.scale")[slot, lat_q, lng_q]))
        return vector, scale

    def cell_multi_year(
        self, lat_q: int, lng_q: int, years: Sequence[int]
    ) -> tuple[npt.NDArray[np.int8], npt.NDArray[np.float32]]:
        """``geotessera.multi_year``: one cell's vintages concatenated.

        Args:
            lat_q: Row of the cell.
            lng_q: Column of the cell.
            years: Calendar years, in the order to concatenate.

        Returns:
            ``(int8[128 * len(years)], float32[len(years)] scales)``.
        """
        pairs = [self.cell_vector(lat_q, lng_q, y) for y in years]
        vectors = [v for v, _ in pairs]
        scales = np.array([s for _, s in pairs], dtype=np.float32)
        return (np.concatenate(vectors) if vectors else np.zeros(0, np.int8)), scales
