"""Example calls of every intent on an ingested sample area (the last stage of ``make run``).

Each answer is printed in one line and saved in full (with its signed receipt)
under ``<data>/answers/<intent>.json``, so ``earthmem verify`` can check it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from api.context import ServiceContext
from api.dispatch import run, run_intent
from api.errors import ApiError
from store import address
from store.tslot import day_slot

__all__ = ["example_intents", "run_examples"]


def _first_last_clear(ctx: ServiceContext, cell: str, cut: int) -> tuple[int, int] | None:
    t = run(ctx, "trajectory", {"cell": cell, "band": "indices.ndvi"}).model_dump()
    clear = [p["tslot"] for p in t["points"] if p["clear"]]
    before = [s for s in clear if s < cut]
    after = [s for s in clear if s >= cut]
    return (before[-1], after[0]) if before and after else None


def example_intents(ctx: ServiceContext, manifest: dict[str, Any]) -> list[dict[str, Any]]:
    """One intent payload per intent type, aimed at the sample's planted events."""
    ev = {e["kind"]: e for e in manifest["events"]}
    feat = {f["kind"]: f for f in manifest["features"]}
    clearing = address.encode(
        ev["forest_clearing"]["centre"]["lat"], ev["forest_clearing"]["centre"]["lng"]
    )
    forest = address.encode(feat["forest"]["centre"]["lat"], feat["forest"]["centre"]["lng"])
    window = _first_last_clear(ctx, clearing, day_slot(ev["forest_clearing"]["end"]))
    flood = ev["flood"]
    out: list[dict[str, Any]] = [
        {"type": "where_is", "description": feat["lake"]["name"]},
        {"type": "what_is_here", "cell": clearing},
        {
            "type": "did_change",
            "cell": clearing,
            "band": "indices.ndvi",
            "window": list(window or (0, 1)),
        },
        {
            "type": "area_over_time",
            "geometry": flood["geometry"],
            "start_date": "2023-06-01",
            "end_date": flood["end"],
            "index": "ndwi",
            "max_scenes": 12,
        },
        {"type": "find_like", "key": forest, "k": 5},
        {"type": "is_like", "a": clearing, "b": forest},
        {
            "type": "confirm",
            "cell": clearing,
            "claim": {
                "band": "indices.ndvi",
                "op": "lt",
                "value": 0.3,
                "tslot": (window or (0, 1))[1],
            },
        },
        {
            "type": "ask",
            "description": f"did the forest near {feat['forest']['name'].split()[0]} change in 2024?",
        },
    ]
    return out


def _summary(answer: dict[str, Any]) -> str:
    r = answer.get("result", answer)
    t = answer.get("type", "")
    if t == "did_change":
        return f"{r['band']} {r['start']['value']:.2f} -> {r['end']['value']:.2f} (delta {r['delta']:+.2f}, significant={r['significant']})"
    if t == "area_over_time":
        a = r["areas"][0]
        an, tr = a["anomaly"], a["trend"]
        text = f"{r['index']}: {len(a['scenes'])} overpasses kept, {len(a['excluded'])} excluded (clear fraction under the threshold)"
        if an.get("difference") is not None:
            text += f"; latest median {an['latest_median']:.2f} vs same-season baseline {an['baseline_median']:.2f}"
            text += f" (z {an['z']:.1f})" if an.get("z") is not None else ""
        if tr.get("slope_per_year") is not None:
            text += f"; trend {tr['slope_per_year']:+.2f}/yr (Mann-Kendall p {tr['mann_kendall_p']:.2f})"
        return text
    if t == "find_like":
        return (
            f"{r['returned_k']}/{r['requested_k']} neighbours, best {r['neighbours'][0]['score']:.3f}"
            if r["neighbours"]
            else r.get("note", "")
        )
    if t == "is_like":
        if r.get("cosine") is None:
            return str(r.get("note") or "no vintage holds vectors for both cells")
        return f"cosine {r['cosine']:.3f} over vintages {r['vintages_compared']}"
    if t == "confirm":
        return f"verdict {r['verdict']}: {r.get('reason', '')}"[:160]
    for key in ("summary", "answer", "cell64"):
        if isinstance(r.get(key), str):
            return r[key][:160]
    return ", ".join(sorted(r))[:160]


def run_examples(
    data: Path, manifest: dict[str, Any], *, manifest_path: Path | None = None
) -> list[dict[str, Any]]:
    """Run every example intent, print one line each, save the answers."""
    ctx = ServiceContext(data, manifest_path=manifest_path or data / "sample" / "manifest.json")
    out_dir = data / "answers"
    out_dir.mkdir(parents=True, exist_ok=True)
    answers = []
    for payload in example_intents(ctx, manifest):
        kind = payload["type"]
        try:
            answer = run_intent(ctx, payload)
        except ApiError as exc:
            print(f"  {kind:15} error [{exc.code}]: {exc.message}")
            continue
        answers.append(answer)
        (out_dir / f"{kind}.json").write_text(json.dumps(answer.get("result", answer), indent=1))
        try:
            line = _summary(answer)
        except (KeyError, TypeError, ValueError, IndexError):  # a partial answer: show its fields
            line = ", ".join(sorted(answer.get("result", answer)))[:160]
        print(f"  {kind:15} {line}")
    print(
        f"  answers with signed receipts saved in {out_dir}/ (check one: earthmem verify {out_dir}/did_change.json)"
    )
    return answers
