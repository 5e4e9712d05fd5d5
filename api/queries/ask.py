"""ask: answer a plain question about a place by running other primitives.

* **ask** ``{description, place? | cell? | lat+lng?}``: locate (pinned cell >
  lat+lng > place > a place named in the question), route the question by its
  words (:data:`api.queries.topics.TOPICS`, deterministic, no language model),
  run the plan and package the sub-answers (each with its own receipt), the
  plan and one paragraph built from the sub-answers' fields.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
from pydantic import BaseModel

from api.context import ServiceContext
from api.errors import ApiError, InvalidArgument
from api.memory.auth import Caller
from api.models import (
    AreaOverTimeIn,
    AskAnswer,
    AskBody,
    AskIn,
    DidChangeIn,
    FindSimilarIn,
    TrajectoryIn,
    WhatIsHereIn,
)
from api.places import MAX_TEXT_CHARS
from api.queries._common import CellRef, parse_cell_arg, slot_date, store_errors
from api.queries.area import area_over_time
from api.queries.cell import SIGMA_FLOOR, CellSeries, read_cell, robust_sigma
from api.queries.cell import trajectory as trajectory_query
from api.queries.change import did_change
from api.queries.describe import BAND_LABELS, format_value, what_is_here
from api.queries.locate import Located, geocode, latlng_cell, pinned, where_text
from api.queries.similar import find_similar
from api.queries.topics import SIMILAR_K, Topic, can_answer, check_question, route, year_of
from api.recall.consult import NOT_CONSULTED, consult_memory, not_consulted
from api.receipts import sign_answer
from api.registry import primitive
from store import address, tslot

if TYPE_CHECKING:
    from store.cube.read import CubeReader

__all__ = [
    "AREA_HALF_DEG",
    "MAX_SCAN_CELLS",
    "ask",
]

MAX_SCAN_CELLS = 4096
"""Most cells of a feature ask's change scan evaluates (a regular subsample above this)."""
AREA_HALF_DEG = 0.0005
"""Half side (degrees, ~55 m) of the box area_over_time reads around a point location."""


def _pick_window(s: CellSeries, year: int | None) -> tuple[int, int] | None:
    """did_change window: a year's first and last clear slots, else latest vs ~1 year earlier."""
    ct = s.tslots[s.clear]
    if year is not None:
        lo, hi = tslot.day_slot(f"{year}-01-01"), tslot.day_slot(f"{year}-12-31")
        inside = ct[(ct >= lo) & (ct <= hi)]
        return (int(inside[0]), int(inside[-1])) if inside.size >= 2 else None
    if ct.size < 2:
        return None
    t1 = int(ct[-1])
    earlier = ct[:-1]
    t0 = int(earlier[np.argmin(np.abs(earlier - (t1 - 365)))])
    return t0, t1


def _feature_cells(feature: dict[str, Any]) -> list[tuple[int, int]]:
    """Lattice cells whose centres lie in a feature's geometry (regular subsample above the cap)."""
    from shapely import contains_xy
    from shapely.geometry import shape

    try:
        geom = shape(feature["geometry"])
    except (ValueError, TypeError, AttributeError, KeyError):
        return []
    west, south, east, north = geom.bounds
    la0, la1, ln0, ln1 = address.bbox_q_range(south, west, north, east)
    n = (la1 - la0) * (ln1 - ln0)
    if n <= 0:
        return []
    stride = max(1, math.ceil(math.sqrt(n / MAX_SCAN_CELLS)))
    la, ln = np.meshgrid(np.arange(la0, la1, stride), np.arange(ln0, ln1, stride), indexing="ij")
    lat, lng = address.q_center(la.ravel(), ln.ravel())
    keep = contains_xy(geom, np.asarray(lng), np.asarray(lat))
    return list(zip(la.ravel()[keep].tolist(), ln.ravel()[keep].tolist(), strict=True))


def _change_target(
    ctx: ServiceContext, reader: CubeReader, loc: Located, band: str, year: int | None
) -> tuple[CellRef, tuple[int, int] | None, str]:
    """The cell and window did_change runs on, and why."""
    span = (
        f"the first and last clear observations of {year}"
        if year
        else ("the latest clear observation and the one nearest a year before it")
    )
    if loc.feature is not None and loc.feature.get("geometry"):
        cells = _feature_cells(loc.feature)
        best: tuple[float, CellRef, tuple[int, int]] | None = None
        floor = SIGMA_FLOOR.get(band, 0.02)
        for la, ln in cells:
            s = read_cell(ctx, reader, band, la, ln)
            w = _pick_window(s, year)
            if w is None:
                continue
            i0, i1 = s.at(w[0]), s.at(w[1])
            assert i0 is not None
            assert i1 is not None
            sigma, _ = robust_sigma(s.values[s.clear], floor)
            z = (float(s.values[i1]) - float(s.values[i0])) / sigma
            if best is None or abs(z) > abs(best[0]):
                best = (z, CellRef(address.q_to_raw(la, ln)), w)
        name = loc.feature.get("name")
        if best is not None:
            why = (
                f"{BAND_LABELS[band]} between {span}, at the cell of {name} with the largest change "
                f"(|z| {abs(best[0]):.1f}) among {len(cells)} cells scanned"
            )
            return best[1], best[2], why
    s = read_cell(ctx, reader, band, loc.cell.lat_q, loc.cell.lng_q)
    return (
        loc.cell,
        _pick_window(s, year),
        f"{BAND_LABELS[band]} between {span} at the located cell",
    )


def _area_args(loc: Located, index: str, year: int | None, last_day: int | None) -> dict[str, Any]:
    place = loc.out.get("place")
    if place and place.get("bbox") and place["source"] == "sample":
        w, s, e, n = place["bbox"]
        bbox = {"min_lat": s, "min_lng": w, "max_lat": n, "max_lng": e}
    else:
        c = loc.cell
        bbox = {
            "min_lat": c.lat - AREA_HALF_DEG,
            "min_lng": c.lng - AREA_HALF_DEG,
            "max_lat": c.lat + AREA_HALF_DEG,
            "max_lng": c.lng + AREA_HALF_DEG,
        }
    if year is not None:
        start, end = f"{year}-01-01", f"{year}-12-31"
    else:
        end_slot = last_day if last_day is not None else tslot.day_slot("2024-12-31")
        start, end = slot_date(end_slot - 364), slot_date(end_slot)
    return {
        "bbox": bbox,
        "start_date": start,
        "end_date": end,
        "index": index,
        "max_scenes": 24,
        "chart": False,
    }


@dataclass
class _Plan:
    steps: list[dict[str, Any]]
    results: list[dict[str, Any]]
    caller: Caller | None = None
    """Who asked, when a token was presented (what_is_here then consults memory too)."""


def _run_step(ctx: ServiceContext, plan: _Plan, name: str, args: dict[str, Any], why: str) -> None:
    for step in plan.steps:  # one call answers several topics
        if step["primitive"] == name and step["args"] == args:
            step["why"] += f"; {why}"
            return
    plan.steps.append({"primitive": name, "args": args, "why": why})
    runners: dict[str, tuple[Callable[[Any, Any], BaseModel], type[BaseModel]]] = {
        "did_change": (did_change, DidChangeIn),
        "trajectory": (trajectory_query, TrajectoryIn),
        "area_over_time": (area_over_time, AreaOverTimeIn),
        "find_similar": (find_similar, FindSimilarIn),
        "what_is_here": (what_is_here, WhatIsHereIn),
    }
    fn, model = runners[name]
    try:
        validated = model.model_validate(args)
        if name == "what_is_here":
            answer = what_is_here(ctx, validated, plan.caller).model_dump(mode="json")
        else:
            answer = fn(ctx, validated).model_dump(mode="json")
    except ApiError as exc:
        plan.results.append(
            {
                "primitive": name,
                "status": "error",
                "answer": None,
                "error": {"code": exc.code, "message": exc.message},
                "text": f"{name} could not answer: {exc.message}",
            }
        )
        return
    plan.results.append(
        {
            "primitive": name,
            "status": "answered",
            "answer": answer,
            "error": None,
            "text": _sub_text(name, answer),
        }
    )


def _sub_text(name: str, a: dict[str, Any]) -> str:
    if name == "did_change":
        band = BAND_LABELS.get(a["band"], a["band"])
        verdict = "a significant change" if a["significant"] else "not a significant change"
        return (
            f"{band} at cell {a['cell']} went from {format_value(a['start']['value'])} "
            f"({a['start']['date']}) to {format_value(a['end']['value'])} ({a['end']['date']}), "
            f"delta {a['delta']:+.2f}, z {a['significance']['z']:.1f}: {verdict}."
        )
    if name == "trajectory":
        pts = [p for p in a["points"] if p["clear"] and p["value"] is not None]
        if not pts:
            return f"No clear NDVI observation at cell {a['cell']} in the window."
        vals = [p["value"] for p in pts]
        return (
            f"NDVI at cell {a['cell']}: {len(pts)} clear observations from {pts[0]['date']} to "
            f"{pts[-1]['date']}, between {format_value(min(vals))} and {format_value(max(vals))}; latest "
            f"{format_value(vals[-1])} on {pts[-1]['date']}."
        )
    if name == "area_over_time":
        idx = a["index"].upper()
        area = a["areas"][0]
        scenes = area["scenes"]
        if not scenes:
            return f"No overpass of the area had enough clear {idx} cells in the window."
        peak = max(scenes, key=lambda s: s["median"])
        low = min(scenes, key=lambda s: s["median"])
        trend = area["trend"]
        tr = (
            f"; trend {trend['slope_per_year']:+.2f}/year (Mann-Kendall p "
            f"{trend['mann_kendall_p']:.2f})"
            if trend["slope_per_year"] is not None and trend["mann_kendall_p"] is not None
            else f"; no trend ({trend['reason']})"
        )
        return (
            f"{idx} over the area ({area['n_cells']} cells, {len(scenes)} overpasses): median "
            f"highest {format_value(peak['median'])} on {peak['date']}, lowest {format_value(low['median'])} on "
            f"{low['date']}{tr}."
        )
    if name == "find_similar":
        nb = a["neighbours"]
        if not nb:
            return "No other cell has an embedding to compare with."
        return (
            f"The {len(nb)} cells most like it (Tessera {a['vintage']}) score "
            f"{nb[0]['score']:.2f} to {nb[-1]['score']:.2f}; the nearest is {nb[0]['cell64']}."
        )
    if name == "what_is_here":
        return str(a["summary"])
    return f"{name} answered."


def _locate_ask(ctx: ServiceContext, args: AskIn, question: str) -> Located | str:
    if args.cell is not None:
        return pinned(parse_cell_arg(args.cell), "cell")
    if (args.lat is None) != (args.lng is None):
        raise InvalidArgument("ask takes lat and lng together", code="missing_fields")
    if args.lat is not None and args.lng is not None:
        return pinned(latlng_cell(args.lat, args.lng), "lat_lng")
    if args.place is not None:
        return geocode(ctx, args.place, "place")
    if len(question) > MAX_TEXT_CHARS:
        return f"the question is longer than {MAX_TEXT_CHARS} characters to search for a place"
    try:
        return geocode(ctx, question, "question")
    except InvalidArgument as exc:
        return exc.message


@primitive(
    "ask",
    AskIn,
    AskAnswer,
    "Answer a plain question about a place: locate it, route by its words, run the intents.",
    "Deterministic, no language model. Locate: cell > lat+lng > place > a place named in the "
    "question ('the forest near Kanke'). Route by words: change/cleared/deforestation -> "
    "did_change NDVI; flood/water/wet -> area_over_time NDWI; green/vegetation/crop -> NDVI "
    "trajectory; similar/like -> find_similar; trend -> area_over_time trend; describe/summary "
    "(or no topic word with a named place) -> what_is_here. A year in the question bounds the "
    "window. The answer holds the plan, each sub-answer with its receipt and one paragraph; a "
    "question it cannot locate or route says so and lists what it can answer. With a bearer "
    "token that may read, it also cites what the token's project has recorded near the place "
    "(up to five active items within 1 km or linked to the named feature, each with its "
    "corroboration verdict and fact ids, by id); without one, memory is not consulted and the "
    "answer says so.",
    cost="heavy",
    consults_memory=True,
)
def ask(ctx: ServiceContext, args: AskIn, caller: Caller | None = None) -> AskAnswer:
    """ask {description, place? | cell? | lat+lng?} (memory consulted for a caller)."""
    question = check_question(args.description)
    topics = route(question)
    year = year_of(question)
    with store_errors():
        reader = ctx.reader()
        found = _locate_ask(ctx, args, question)
        plan = _Plan([], [], caller)
        memory = not_consulted(
            NOT_CONSULTED if caller is None else "memory was not consulted: no place was located"
        )
        status: Literal["answered", "not_located", "not_routed"] = "answered"
        loc = found if isinstance(found, Located) else None
        # Without topic words, only a pinned location or a named sample feature gets the
        # default summary: a city guessed from a stray word of the question does not.
        named = loc is not None and (
            loc.out["resolved_from"] != "question"
            or (loc.place is not None and loc.place.source == "sample")
        )
        if not topics and not named:
            status = "not_routed"
            text = (
                "I could not tell what you are asking: the question has no word of a topic I "
                "can answer (change, water/flood, green/vegetation, similar, trend, summary)"
                + ("" if loc is not None else f", and names no place I know ({found})")
                + "."
            )
        elif loc is None:
            status = "not_located"
            text = (
                f"I could not find where you mean ({found}). Name a place (e.g. 'Kanke Lake'), "
                "or send a cell, lat+lng or place."
            )
        else:
            _plan(ctx, reader, plan, loc, topics, year)
            head = f"Location: {where_text(loc.out)}"
            if loc.out.get("note"):
                head += f" ({loc.out['note']})"
            label = loc.place.name if loc.place is not None else f"cell {loc.cell.cell}"
            memory = consult_memory(ctx, caller, loc.cell.lat, loc.cell.lng, loc.place, label)
            said = (
                memory["sentence"]
                if memory["consulted"]
                else "Memory was not consulted (no token)."
            )
            text = " ".join([head + ".", *(r["text"] for r in plan.results), said])
    body = {
        "question": question,
        "status": status,
        "location": loc.out if loc else None,
        "topics": [{"topic": t.name, "words": w} for t, w in topics],
        "plan": plan.steps,
        "results": plan.results,
        "answer": text,
        "can_answer": can_answer() if status != "answered" else None,
        "snapshot_id": reader.snapshot_id,
        "memory": memory,
    }
    body = AskBody.model_validate(body).model_dump(mode="json")
    cells: set[str] = {loc.cell.cell} if loc else set()
    fact_ids: set[str] = set()
    for r in plan.results:
        rec = (r["answer"] or {}).get("receipt") or {}
        cells.update(rec.get("cells", ()))
        fact_ids.update(rec.get("fact_ids", ()))
    fact_ids.update(memory["fact_ids"])
    query = args.model_dump(mode="json", exclude_none=True)
    signed = sign_answer(
        ctx.signer, "ask", query, body, sorted(cells), sorted(fact_ids), reader.snapshot_id
    )
    return AskAnswer.model_validate(signed)


def _plan(
    ctx: ServiceContext,
    reader: CubeReader,
    plan: _Plan,
    loc: Located,
    topics: list[tuple[Topic, list[str]]],
    year: int | None,
) -> None:
    names = {t.name: w for t, w in topics}
    water = "water" in names
    flags = read_cell(ctx, reader, "indices.ndvi", loc.cell.lat_q, loc.cell.lng_q)
    clear = flags.tslots[flags.clear]
    last_day = int(clear[-1]) if clear.size else None
    for topic, words in topics:
        said = f"the question says {', '.join(repr(w) for w in words)}"
        if topic.name == "change":
            band = "indices.ndwi" if water else "indices.ndvi"
            cell, window, why = _change_target(ctx, reader, loc, band, year)
            if window is None:
                plan.steps.append(
                    {
                        "primitive": "did_change",
                        "args": {"cell": cell.cell, "band": band},
                        "why": why,
                    }
                )
                plan.results.append(
                    {
                        "primitive": "did_change",
                        "status": "error",
                        "answer": None,
                        "error": {
                            "code": "no_observation",
                            "message": "fewer than two clear observations to compare",
                        },
                        "text": f"{BAND_LABELS[band]} change: the store has fewer than two clear "
                        f"observations at cell {cell.cell}"
                        + (f" in {year}" if year else "")
                        + " to compare.",
                    }
                )
                continue
            args = {"cell": cell.cell, "band": band, "window": list(window)}
            _run_step(ctx, plan, "did_change", args, f"{said}: {why}")
        elif topic.name == "water":
            args = _area_args(loc, "ndwi", year, last_day)
            _run_step(ctx, plan, "area_over_time", args, f"{said}: NDWI per overpass over the area")
        elif topic.name == "green":
            targs: dict[str, Any] = {"cell": loc.cell.cell, "band": "indices.ndvi"}
            if year is not None:
                targs["window"] = [
                    tslot.day_slot(f"{year}-01-01"),
                    tslot.day_slot(f"{year}-12-31"),
                ]
            _run_step(ctx, plan, "trajectory", targs, f"{said}: the cell's NDVI series")
        elif topic.name == "similar":
            sargs = {"key": loc.cell.cell, "k": SIMILAR_K}
            _run_step(ctx, plan, "find_similar", sargs, f"{said}: nearest cells by embedding")
        elif topic.name == "trend":
            args = _area_args(loc, "ndwi" if water else "ndvi", year, last_day)
            _run_step(ctx, plan, "area_over_time", args, f"{said}: trend of the area's medians")
        elif topic.name == "summary":
            _run_step(
                ctx, plan, "what_is_here", {"cell": loc.cell.cell}, f"{said}: what the store holds"
            )
    if not topics:
        _run_step(
            ctx,
            plan,
            "what_is_here",
            {"cell": loc.cell.cell},
            "no topic words: a summary of what the store holds at the named place",
        )
