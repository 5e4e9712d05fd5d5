"""PNG charts of area_over_time (matplotlib, Agg backend) and a bounded store of recent charts.

A chart has one line per area (weighted median per kept overpass) with its
p25-p75 band. Its id is the first 32 hex characters of blake3 over the PNG,
so the same answer gives the same id. :class:`ChartStore` keeps the most
recent charts in memory (bounded by count and bytes) so the REST adapter can
serve ``/v1/charts/{chart_id}.png``; charts are not persisted.
"""

from __future__ import annotations

import io
import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import blake3

__all__ = [
    "CHART_STORE_BYTES",
    "CHART_STORE_COUNT",
    "ChartSeries",
    "ChartStore",
    "chart_id_of",
    "render_area_chart",
    "render_count_map",
]

CHART_STORE_COUNT = 128
"""Most charts kept in memory."""
CHART_STORE_BYTES = 32 << 20
"""Most bytes of PNG kept in memory."""


@dataclass(frozen=True)
class ChartSeries:
    """One area's line."""

    label: str
    """Legend label (the area id)."""
    dates: Sequence[str]
    """ISO dates of the kept overpasses."""
    median: Sequence[float]
    """Weighted medians."""
    p25: Sequence[float]
    """Weighted 25th percentiles."""
    p75: Sequence[float]
    """Weighted 75th percentiles."""


def chart_id_of(png: bytes) -> str:
    """Content id of a PNG (32 hex characters)."""
    return blake3.blake3(png).hexdigest()[:32]


def render_area_chart(series: Sequence[ChartSeries], *, title: str, ylabel: str) -> bytes:
    """Render the chart as PNG bytes.

    Args:
        series: One entry per area (areas without kept overpasses are skipped).
        title: Chart title.
        ylabel: Y axis label (the index).

    Returns:
        PNG bytes (about 30-60 kB at 800 x 400 px).
    """
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.dates as mdates
    import numpy as np
    from matplotlib.figure import Figure

    fig = Figure(figsize=(8, 4), dpi=100)
    ax = fig.add_subplot(1, 1, 1)
    drawn = 0
    for s in series:
        if not s.dates:
            continue
        x = np.array(s.dates, dtype="datetime64[D]")
        (line,) = ax.plot(x, s.median, marker="o", markersize=3, linewidth=1.5, label=s.label)
        ax.fill_between(x, s.p25, s.p75, color=line.get_color(), alpha=0.2, linewidth=0)
        drawn += 1
    if drawn == 0:
        ax.text(
            0.5,
            0.5,
            "no overpass above the clear-fraction threshold",
            ha="center",
            va="center",
            transform=ax.transAxes,
        )
    else:
        ax.legend(loc="best", fontsize=8)
        ax.xaxis.set_major_formatter(mdates.ConciseDateFormatter(ax.xaxis.get_major_locator()))
    ax.set_title(title, fontsize=10)
    ax.set_ylabel(ylabel)
    ax.grid(True, alpha=0.3)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", metadata={"Software": None})
    return buf.getvalue()


def render_count_map(counts: Any, *, title: str) -> bytes:
    """Render a small map (400 x 400 px at most) of per-cell counts as PNG bytes.

    Args:
        counts: ``(rows, columns)`` counts, row 0 the southernmost; NaN outside the area.
        title: Map title.
    """
    import matplotlib

    matplotlib.use("Agg", force=False)
    import numpy as np
    from matplotlib.figure import Figure

    grid = np.asarray(counts, dtype=np.float64)
    fig = Figure(figsize=(4, 4), dpi=100)
    ax = fig.add_subplot(1, 1, 1)
    finite = grid[np.isfinite(grid)]
    top = float(finite.max()) if finite.size else 1.0
    img = ax.imshow(
        np.ma.masked_invalid(grid),
        origin="lower",
        cmap="viridis",
        vmin=0,
        vmax=max(top, 1.0),
        interpolation="nearest",
    )
    fig.colorbar(img, ax=ax, shrink=0.8, label="clear observations")
    ax.set_title(title, fontsize=8)
    ax.set_xticks([])
    ax.set_yticks([])
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", metadata={"Software": None})
    return buf.getvalue()


class ChartStore:
    """Recent charts in memory, bounded by count and bytes (oldest evicted first)."""

    def __init__(
        self, max_count: int = CHART_STORE_COUNT, max_bytes: int = CHART_STORE_BYTES
    ) -> None:
        self.max_count = max_count
        self.max_bytes = max_bytes
        self._items: OrderedDict[str, bytes] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()

    def put(self, png: bytes) -> str:
        """Store a PNG; returns its chart id."""
        cid = chart_id_of(png)
        with self._lock:
            if cid in self._items:
                self._items.move_to_end(cid)
                return cid
            self._items[cid] = png
            self._bytes += len(png)
            while self._items and (
                len(self._items) > self.max_count or self._bytes > self.max_bytes
            ):
                _, old = self._items.popitem(last=False)
                self._bytes -= len(old)
        return cid

    def get(self, chart_id: str) -> bytes | None:
        """The PNG of a chart id, or None when unknown or evicted."""
        with self._lock:
            return self._items.get(chart_id)

    def __len__(self) -> int:
        with self._lock:
            return len(self._items)
