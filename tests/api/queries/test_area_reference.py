"""area_over_time's whole answer equals a straightforward reference on the tiny sample.

The reference reads each overpass of the area from the cube with
``read_region`` (zarr, one slot at a time), counts clear cells inside the
area, selects, thins and reduces with the numpy oracle of
:mod:`tests.api.queries.area_reference`, and builds the anomaly the way its
definition in :mod:`api.queries.area` reads. The primitive's answer (the
chunk-streaming, vectorised path, areas read together) must match it
exactly: clear fractions, exclusions, statistics and anomaly. A call with
several areas must answer each exactly as a call with that area alone, and
read a chunk the areas share once per pass.
"""

from __future__ import annotations

import datetime as dt
from collections import Counter
from typing import Any

import numpy as np
import pytest

from api.context import ServiceContext
from api.dispatch import run
from api.queries.area_geometry import Area, parse_area
from api.queries.area_series import BASELINE_DAYS, MAX_BASELINE
from api.queries.area_stats import pick_even
from api.receipts import Signer
from store import tslot
from store.cube import CubeReader
from tests.api.queries.area_reference import reference_stats

_THRESHOLD = 0.4


def _where(tiny_store: Any) -> dict[str, dict[str, Any]]:
    w, s, e, n = tiny_store.manifest["bbox"]
    dx, dy = e - w, n - s
    triangle = [[w, s], [e, s], [(w + e) / 2, n], [w, s]]
    return {
        "sample": {"bbox": [s, w, n, e]},
        "triangle": {"geometry": {"type": "Polygon", "coordinates": [triangle]}},
        "shifted": {"bbox": [s + 0.3 * dy, w + 0.2 * dx, n + 0.1 * dy, e - 0.1 * dx]},
    }


def _fraction_and_stats(
    reader: CubeReader, area: Area, t: int
) -> tuple[float, dict[str, Any] | None]:
    y0, y1, x0, x1 = area.box
    v = reader.read_region("indices.ndvi", y0, y1, x0, x1, t, t + 1, drop_empty=False)
    c = reader.read_region("s2.clear", y0, y1, x0, x1, t, t + 1, drop_empty=False)
    vals = np.asarray(v.values[0], dtype=np.float64)
    mask = area.mask()
    clear = (np.asarray(c.values[0]) == 2) & mask
    fraction = int(clear.sum()) / area.n_cells
    weights = np.zeros(mask.shape)
    weights[mask] = area.weights  # row-major, as the area's cells
    ok = clear & np.isfinite(vals)
    if not ok.any():
        return fraction, None
    st = reference_stats(vals[ok], weights[ok])
    return fraction, {
        **st,
        "n_clear": int(ok.sum()),
        "clear_fraction": int(ok.sum()) / area.n_cells,
    }


def _reference(
    ctx: ServiceContext, reader: CubeReader, area: Area, t0: int, t1: int, max_scenes: int
) -> dict[str, Any]:
    cand = [t for t, _ in ctx.overpasses(reader, "s2", area.box, t0, t1)]
    measured = {t: _fraction_and_stats(reader, area, t) for t in cand}
    under = {t: measured[t][0] for t in cand if measured[t][0] < _THRESHOLD}
    excluded = list(under)
    kept = pick_even([t for t in cand if measured[t][0] >= _THRESHOLD], max_scenes)
    scenes = [(t, measured[t][1]) for t in kept if measured[t][1] is not None]
    excluded += [t for t in kept if measured[t][1] is None]
    t_latest, latest = scenes[-1]
    year_start = tslot.day_slot(dt.date(tslot.slot_to_date(t_latest).year, 1, 1))

    def doy(a: int, b: int) -> int:
        d = abs(tslot.day_of_year(a) - tslot.day_of_year(b))
        return min(d, 365 - d)

    base = [
        t
        for t, _ in ctx.overpasses(reader, "s2", area.box, None, year_start - 1)
        if doy(t, t_latest) <= BASELINE_DAYS
    ][-MAX_BASELINE:]
    base_stats = []
    for t in base:
        f, st = _fraction_and_stats(reader, area, t)
        if f >= _THRESHOLD and st is not None:
            base_stats.append((t, st))
    assert base_stats, "the tiny sample has a same-season baseline"
    medians = np.array([st["median"] for _, st in base_stats])
    between = float(np.std(medians, ddof=1)) if medians.size >= 2 else 0.0
    spatial = float(np.mean([(st["p75"] - st["p25"]) / 1.349 for _, st in base_stats]))
    baseline = float(np.median(medians))
    return {
        "fractions": under,
        "excluded": sorted(excluded),
        "scenes": scenes,
        "anomaly": {
            "latest_tslot": t_latest,
            "baseline_tslots": [t for t, _ in base_stats],
            "baseline_median": baseline,
            "difference": latest["median"] - baseline,
            "z": (latest["median"] - baseline) / max(between, spatial),
        },
    }


@pytest.mark.parametrize(
    ("name", "start", "end"),
    [
        ("sample", "2024-01-01", "2024-12-31"),  # baseline overpasses outside the candidates
        ("triangle", "2023-01-01", "2024-12-31"),  # baseline among the candidates (reused)
    ],
)
def test_answer_equals_the_straightforward_reference(
    tiny_store: Any, name: str, start: str, end: str
) -> None:
    ctx = ServiceContext(tiny_store.data, signer=Signer.generate())
    reader = ctx.reader()
    where = _where(tiny_store)[name]
    args = {**where, "start_date": start, "end_date": end, "max_scenes": 12, "chart": False}
    got = run(ctx, "area_over_time", args).model_dump(mode="json")["areas"][0]
    area = parse_area("a", where.get("geometry"), where.get("bbox"))
    t0 = tslot.day_slot(dt.date.fromisoformat(start))
    t1 = tslot.day_slot(dt.date.fromisoformat(end))
    want = _reference(ctx, reader, area, t0, t1, 12)

    assert got["n_cells"] == area.n_cells
    assert [e["tslot"] for e in got["excluded"]] == want["excluded"]
    below = {e["tslot"]: e["clear_fraction"] for e in got["excluded"] if "below" in e["reason"]}
    assert below == want["fractions"]
    assert [s["tslot"] for s in got["scenes"]] == [t for t, _ in want["scenes"]]
    for s, (_, st) in zip(got["scenes"], want["scenes"], strict=True):
        assert {k: s[k] for k in st} == st
    anomaly = got["anomaly"]
    for k, v in want["anomaly"].items():
        assert anomaly[k] == v, k


def _spied(tiny_store: Any) -> tuple[ServiceContext, list[tuple[str, tuple[int, ...]]]]:
    """A context keeping no chunk (each pass reads what it needs) that records every fetch."""
    ctx = ServiceContext(tiny_store.data, signer=Signer.generate(), cache_bytes=1)
    reader = ctx.reader()
    calls: list[tuple[str, tuple[int, ...]]] = []
    real = reader.read_chunks

    def read_chunks(band: str, coords: Any) -> Any:
        calls.extend((band, tuple(c)) for c in coords)
        return real(band, coords)

    reader.read_chunks = read_chunks  # type: ignore[method-assign]
    return ctx, calls


def test_areas_read_together_answer_as_each_alone(tiny_store: Any) -> None:
    span = {"start_date": "2023-01-01", "end_date": "2024-12-31", "max_scenes": 12, "chart": False}
    where = _where(tiny_store)
    areas = [{"id": name, **w} for name, w in where.items()]
    areas.append({"id": "sample_again", **where["sample"]})
    ctx, calls = _spied(tiny_store)
    together = run(ctx, "area_over_time", {"areas": areas, **span}).model_dump(mode="json")
    alone_reads = 0
    facts: list[str] = []
    for a, got in zip(areas, together["areas"], strict=True):
        one, one_calls = _spied(tiny_store)
        want = run(one, "area_over_time", {**where[a["id"].removesuffix("_again")], **span})
        dumped = want.model_dump(mode="json")
        assert {**got, "id": "area"} == dumped["areas"][0]
        facts += [f["fact_id"] for f in dumped["facts"]]
        alone_reads += len(one_calls)
    assert [f["fact_id"] for f in together["facts"]] == facts
    # four passes (candidates, kept, baseline fractions, baseline statistics): a chunk the
    # areas share is read at most once per pass, not once per area and pass
    assert max(Counter(calls).values()) <= 4
    assert len(calls) < alone_reads
