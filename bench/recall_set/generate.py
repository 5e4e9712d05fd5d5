"""Generate the labelled recall set (``recall_set.jsonl``): memories about places, and queries.

    python -m bench.recall_set.generate [--out PATH] [--check]

A pure function of :data:`SEED` and the fixed text of :mod:`bench.recall_set.vocab`
(plus the demo sample's feature geometry, itself a pure function of its seed):
generating twice gives the same bytes. ``--check`` regenerates and compares with
the committed file (exit status 1 when they differ).

Records (one JSON object a line, ``"record"`` says which):

* ``meta`` — format, seed, counts, and how to read the rest;
* ``place`` — a synthetic place (name, kind, lat, lng) or a sample feature (name,
  id, centre);
* ``item`` — a memory: ``key`` (the set's id; the store assigns its own), ``phase``
  (1: written first; 2: written after the ``@phase1`` instant, the supersessions),
  the memory_create fields (``type``, ``title``, ``statement``, ``tags``, ``where``,
  ``valid_at`` | ``valid_from``/``valid_to``), ``supersedes`` (a key) and, for
  feature anchors, ``centre`` (where a bulk load puts the anchor);
* ``query`` — ``key``, ``case`` (place, time, supersession, name, paraphrase,
  keyword), ``subtype``, the recall body fields (``query``, ``near``, ``at``,
  ``asOf``; ``asOf`` is ``"@phase1"``: the loader substitutes the instant it
  recorded between the two phases), ``relevant`` (``{item key: grade}``, 2 = what
  the query is about, 1 = related) and ``hidden`` (keys that must not be shown:
  superseded items, or items written after ``asOf``).

Relevance is decided by construction (which place, topic, facet and date an item
was made from), never by running a ranker. Every paraphrase query is checked to
share no content word with any of its relevant items (a shared word, or one a
prefix of the other, or five leading letters in common, counts as shared).

The set was generated and committed before any tuning of recall.
"""

from __future__ import annotations

import argparse
import datetime as dt
import functools
import json
import math
import random
import re
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent.parent))

from bench.recall_set.vocab import (
    DECISIONS,
    FEATURE_TOPICS,
    FEATURES,
    SYNTHETIC_PLACES,
    TOPICS,
    Topic,
)

__all__ = [
    "CASES",
    "FORMAT",
    "SEED",
    "SET_PATH",
    "content_words",
    "demo_features",
    "generate",
    "item_text",
    "main",
    "read_set",
    "render",
    "shares_content_word",
]

SEED = 20261201
"""The generator's seed."""
FORMAT = "earthmem-recall-set/1"
"""The ``format`` of the meta record."""
SET_PATH = Path(__file__).resolve().parent / "recall_set.jsonl"
"""The committed set."""
CASES = ("place", "time", "supersession", "name", "paraphrase", "keyword")
"""Case types, in report order."""
PHASE1 = "@phase1"
"""``asOf`` placeholder: the instant after phase 1 was written, before phase 2."""

_MIN_SPACING_M = 200.0
_POINT_RADIUS_M = 150
_FEATURE_RADIUS_M = 100
_MARGIN_M = 60.0
_YEARS = (2023, 2024)
_STOP = frozenset(
    {
        "a",
        "an",
        "and",
        "are",
        "as",
        "at",
        "be",
        "before",
        "by",
        "for",
        "from",
        "had",
        "has",
        "have",
        "in",
        "inside",
        "into",
        "is",
        "it",
        "its",
        "of",
        "on",
        "once",
        "onto",
        "or",
        "out",
        "over",
        "so",
        "than",
        "that",
        "the",
        "their",
        "then",
        "there",
        "these",
        "they",
        "this",
        "to",
        "too",
        "until",
        "up",
        "upon",
        "was",
        "were",
        "where",
        "which",
        "while",
        "who",
        "with",
        "without",
        "nearby",
        "near",
        "only",
        "several",
        "new",
    }
)
"""Words that carry no content (the paraphrase rule ignores them)."""


# --------------------------------------------------------------------------- geometry


def _metres(lat1: float, lng1: float, lat2: float, lng2: float) -> float:
    """Great-circle distance (haversine), metres."""
    r = 6_371_008.8
    p1, p2 = math.radians(lat1), math.radians(lat2)
    dp, dl = p2 - p1, math.radians(lng2 - lng1)
    a = math.sin(dp / 2) ** 2 + math.cos(p1) * math.cos(p2) * math.sin(dl / 2) ** 2
    return 2 * r * math.asin(math.sqrt(a))


@functools.lru_cache(maxsize=1)
def _demo_geometry() -> tuple[tuple[float, float, float, float], dict[str, dict[str, Any]]]:
    """The demo sample's bbox (west, south, east, north) and its features by id (seed 0)."""
    from pipelines.sample._geo import make_grid
    from pipelines.sample._scene import build_scene

    grid = make_grid("demo")
    scene = build_scene(grid, 0)
    return grid.bbox_lonlat(), {f["id"]: f for f in scene.features}


def demo_features() -> list[dict[str, Any]]:
    """The demo sample's named features (manifest form: id, name, kind, centre, geometry)."""
    return list(_demo_geometry()[1].values())


def _feature_gap_m(feature: dict[str, Any], lat: float, lng: float) -> float:
    """Approximate distance (m) from a point to a feature's polygon (0 inside)."""
    from shapely.geometry import Point, shape

    deg = shape(feature["geometry"]).distance(Point(lng, lat))
    return deg * 111_320.0 * math.cos(math.radians(lat))  # the lng degree is the shorter


def _places(rng: random.Random) -> list[dict[str, Any]]:
    (west, south, east, north), _ = _demo_geometry()
    dlat = _MARGIN_M / 111_320.0
    dlng = dlat / math.cos(math.radians((south + north) / 2))
    out: list[dict[str, Any]] = []
    for name, kind in SYNTHETIC_PLACES:
        for _ in range(10_000):
            lat = round(rng.uniform(south + dlat, north - dlat), 6)
            lng = round(rng.uniform(west + dlng, east - dlng), 6)
            if all(_metres(lat, lng, p["lat"], p["lng"]) >= _MIN_SPACING_M for p in out):
                break
        else:
            raise RuntimeError(f"no room for {name} at {_MIN_SPACING_M} m spacing")
        out.append({"record": "place", "name": name, "kind": kind, "lat": lat, "lng": lng})
    return out


# --------------------------------------------------------------------------- words


def content_words(text: str) -> set[str]:
    """Lower-case alphabetic words of ``text`` that carry content (stop words dropped)."""
    return {w for w in re.findall(r"[a-z]+", text.lower()) if w not in _STOP and len(w) > 1}


def _related(a: str, b: str) -> bool:
    if a == b:
        return True
    if min(len(a), len(b)) >= 4 and (a.startswith(b) or b.startswith(a)):
        return True
    return len(a) >= 5 and len(b) >= 5 and a[:5] == b[:5]


def shares_content_word(query: str, texts: Iterable[str]) -> set[tuple[str, str]]:
    """Pairs (query word, text word) that count as shared under the paraphrase rule."""
    q = content_words(query)
    t = set().union(*(content_words(x) for x in texts))
    return {(a, b) for a in q for b in t if _related(a, b)}


def item_text(item: dict[str, Any]) -> list[str]:
    """The indexed text of an item: title, statement, details and tags."""
    return [item["title"], item["statement"], item.get("details") or "", *item["tags"]]


# --------------------------------------------------------------------------- items


def _day(rng: random.Random, year: int, topic: Topic) -> dt.date:
    month = {"flood": (7, 9), "harvest": (10, 12), "drought": (4, 6)}.get(topic.key, (1, 12))
    return dt.date(year, rng.randint(*month), rng.randint(1, 28))


def _observation(
    key: str, place: dict[str, Any], topic: Topic, facet: int, day: dt.date, rng: random.Random
) -> dict[str, Any]:
    f = topic.facets[facet]
    item: dict[str, Any] = {
        "record": "item",
        "key": key,
        "phase": 1,
        "type": "observation",
        "title": f.title.format(place=place["name"]),
        "statement": f.statement.format(place=place["name"], date=day.isoformat()),
        "tags": list(topic.tags),
        "where": {"lat": place["lat"], "lng": place["lng"]},
        "place": place["name"],
        "topic": topic.key,
        "facet": facet,
    }
    if topic.ranged:
        start = day - dt.timedelta(days=rng.randint(30, 60))
        item["valid_from"], item["valid_to"] = start.isoformat(), day.isoformat()
    else:
        item["valid_at"] = day.isoformat()
    return item


def _items(rng: random.Random, places: list[dict[str, Any]]) -> list[dict[str, Any]]:
    _, feats = _demo_geometry()
    out: list[dict[str, Any]] = []

    def key() -> str:
        return f"i{len(out) + 1:04d}"

    for place in places:
        for topic in rng.sample(TOPICS, 5):
            facet = rng.randrange(len(topic.facets))
            for year in _YEARS:
                out.append(_observation(key(), place, topic, facet, _day(rng, year, topic), rng))
    for feat in FEATURES:
        centre = feats[feat.feature_id]["centre"]
        for tkey in feat.topics:
            title, tags, statement = FEATURE_TOPICS[tkey]
            for year in _YEARS:
                day = dt.date(year, rng.randint(1, 12), rng.randint(1, 28))
                text = statement.format(date=day.isoformat(), n=f"{rng.uniform(1.0, 3.5):.1f}")
                out.append(
                    {
                        "record": "item",
                        "key": key(),
                        "phase": 1,
                        "type": "observation",
                        "title": title,
                        "statement": text,
                        "tags": list(tags),
                        "where": {"place": feat.name},
                        "centre": {"lat": centre["lat"], "lng": centre["lng"]},
                        "place": feat.name,
                        "topic": tkey,
                        "valid_at": day.isoformat(),
                    }
                )
    for kind, title, statement in DECISIONS:
        out.append(
            {
                "record": "item",
                "key": key(),
                "phase": 1,
                "type": kind,
                "title": title,
                "statement": statement,
                "tags": ["procedure"],
                "where": None,
                "place": None,
                "topic": "procedure",
            }
        )
    return out


def _pairs(items: list[dict[str, Any]]) -> dict[tuple[str, str], list[dict[str, Any]]]:
    """Observations of synthetic places by (place, topic), oldest first."""
    out: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for it in items:
        if "facet" in it:
            out.setdefault((it["place"], it["topic"]), []).append(it)
    return out


def _supersede(
    rng: random.Random, items: list[dict[str, Any]], n: int
) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """``n`` phase-2 corrections of the newer item of distinct (place, topic) pairs."""
    pairs = _pairs(items)
    chosen = rng.sample(sorted(pairs), n)
    out = []
    for pk in chosen:
        old = pairs[pk][-1]
        new = {
            **old,
            "key": f"i{len(items) + 1:04d}",
            "phase": 2,
            "statement": old["statement"]
            + " Corrected after a second visit: the first report overstated it.",
            "supersedes": old["key"],
        }
        old["superseded_by"] = new["key"]
        items.append(new)
        out.append((old, new))
    return out


# --------------------------------------------------------------------------- queries


def _visible(items: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    return [it for it in items if "superseded_by" not in it]


def _query(key: str, case: str, subtype: str, text: str, **fields: Any) -> dict[str, Any]:
    rec: dict[str, Any] = {"record": "query", "key": key, "case": case, "subtype": subtype}
    rec["query"] = text
    rec.update(fields)
    return rec


def _noon(day: str) -> str:
    return f"{day}T12:00:00Z"


def _midpoint(it: dict[str, Any]) -> str:
    if "valid_at" in it:
        return _noon(it["valid_at"])
    a, b = dt.date.fromisoformat(it["valid_from"]), dt.date.fromisoformat(it["valid_to"])
    return _noon((a + (b - a) / 2).isoformat())


def _queries(
    rng: random.Random,
    places: list[dict[str, Any]],
    items: list[dict[str, Any]],
    superseded: list[tuple[dict[str, Any], dict[str, Any]]],
) -> list[dict[str, Any]]:
    _, feats = _demo_geometry()
    out: list[dict[str, Any]] = []
    pairs = _pairs(items)
    touched = {(old["place"], old["topic"]) for old, _ in superseded}
    clean = sorted(pk for pk in pairs if pk not in touched)
    by_place = {p["name"]: p for p in places}

    def add(case: str, subtype: str, text: str, **fields: Any) -> None:
        out.append(_query(f"q{len(out) + 1:03d}", case, subtype, text, **fields))

    # keyword: the title of an observation; both years are what it is about
    for pk in rng.sample(clean, 25):
        obs = pairs[pk]
        add("keyword", "title", obs[0]["title"], relevant={o["key"]: 2 for o in obs}, hidden=[])
    # place: a topic word near a synthetic place's point
    topic_words = {t.key: t.tags[0].replace("-", " ") for t in TOPICS}
    for pk in rng.sample(clean, 20):
        place = by_place[pk[0]]
        near = {"lat": place["lat"], "lng": place["lng"], "radius_m": _POINT_RADIUS_M}
        rel = {o["key"]: 2 for o in pairs[pk]}
        add("place", "point", topic_words[pk[1]], near=near, relevant=rel, hidden=[])
    # place: a feature topic near a named feature shared with another feature
    shared = [
        (f, t)
        for f in FEATURES
        for t in f.topics
        if sum(t in g.topics for g in FEATURES) > 1
        and all(
            _feature_gap_m(feats[g.feature_id], *_centre(feats[f.feature_id]))
            > _FEATURE_RADIUS_M + 50
            for g in FEATURES
            if g is not f and t in g.topics
        )
    ]
    for f, t in rng.sample(shared, min(6, len(shared))):
        rel = {it["key"]: 2 for it in items if it["place"] == f.name and it["topic"] == t}
        near = {"place": f.name, "radius_m": _FEATURE_RADIUS_M}
        add("place", "feature", FEATURE_TOPICS[t][0].lower(), near=near, relevant=rel, hidden=[])
    # time: valid time `at` picks one of the two years
    for pk in rng.sample(clean, 20):
        target = rng.choice(pairs[pk])
        text = target["title"]
        add("time", "at", text, at=_midpoint(target), relevant={target["key"]: 2}, hidden=[])
    # time: asOf before the corrections were written; supersession: now
    for i, (old, new) in enumerate(superseded):
        sibling = next(o for o in pairs[(old["place"], old["topic"])] if o is not old)
        if i < 10:
            add(
                "time",
                "asOf",
                old["title"],
                asOf=PHASE1,
                relevant={old["key"]: 2, sibling["key"]: 1},
                hidden=[new["key"]],
            )
        add(
            "supersession",
            "current",
            old["title"],
            relevant={new["key"]: 2, sibling["key"]: 1},
            hidden=[old["key"]],
        )
    # name: a feature named, or described without its name
    for f in FEATURES:
        at_f = [it for it in items if it["place"] == f.name]
        for j in range(4):
            t = f.topics[j % len(f.topics)]
            where = f.name if j < 2 else f.descriptions[j % 2]
            text = f"{FEATURE_TOPICS[t][0].lower()} at {where}"
            rel = {it["key"]: (2 if it["topic"] == t else 1) for it in at_f}
            add("name", "named" if j < 2 else "described", text, relevant=rel, hidden=[])
    # paraphrase: a facet said with other words; every current item of the facet is relevant
    facets: dict[tuple[str, int], list[dict[str, Any]]] = {}
    for it in items:
        if "facet" in it:
            facets.setdefault((it["topic"], it["facet"]), []).append(it)
    usable = sorted(k for k, v in facets.items() if 1 <= len(_visible(v)) <= 10)
    topics = {t.key: t for t in TOPICS}
    for tk, fi in rng.sample(usable, min(25, len(usable))):
        rel_items = _visible(facets[(tk, fi)])
        text = topics[tk].facets[fi].paraphrase
        hidden = [it["key"] for it in facets[(tk, fi)] if "superseded_by" in it]
        add("paraphrase", "facet", text, relevant={it["key"]: 2 for it in rel_items}, hidden=hidden)
    return out


def _centre(feature: dict[str, Any]) -> tuple[float, float]:
    return float(feature["centre"]["lat"]), float(feature["centre"]["lng"])


def _check(items: list[dict[str, Any]], queries: list[dict[str, Any]]) -> None:
    """The set's own invariants (raises ValueError): keys, paraphrases, hidden items."""
    by_key = {it["key"]: it for it in items}
    if len(by_key) != len(items):
        raise ValueError("duplicate item keys")
    for q in queries:
        rel = q["relevant"]
        if not rel or any(k not in by_key for k in [*rel, *q["hidden"]]):
            raise ValueError(f"{q['key']}: relevant or hidden keys unknown or empty")
        if set(rel) & set(q["hidden"]):
            raise ValueError(f"{q['key']}: an item is both relevant and hidden")
        if q.get("asOf") is None and any("superseded_by" in by_key[k] for k in rel):
            raise ValueError(f"{q['key']}: a superseded item is relevant now")
        if q["case"] == "paraphrase":
            shared = shares_content_word(q["query"], (t for k in rel for t in item_text(by_key[k])))
            if shared:
                raise ValueError(f"{q['key']}: paraphrase shares content words {sorted(shared)}")


def generate() -> list[dict[str, Any]]:
    """Every record of the set, in file order."""
    rng = random.Random(SEED)
    places = _places(rng)
    items = _items(rng, places)
    superseded = _supersede(rng, items, 20)
    queries = _queries(rng, places, items, superseded)
    _check(items, queries)
    _, feats = _demo_geometry()
    counts = {c: sum(q["case"] == c for q in queries) for c in CASES}
    meta = {
        "record": "meta",
        "format": FORMAT,
        "seed": SEED,
        "items": len(items),
        "queries": len(queries),
        "cases": counts,
        "note": "generated and committed before any tuning of recall; relevance by "
        "construction; asOf '@phase1' = the instant between the two write phases; "
        "grades: 2 = what the query is about, 1 = related",
    }
    feature_recs = [
        {
            "record": "place",
            "name": f.name,
            "kind": "feature",
            "feature_id": f.feature_id,
            "lat": feats[f.feature_id]["centre"]["lat"],
            "lng": feats[f.feature_id]["centre"]["lng"],
        }
        for f in FEATURES
    ]
    return [meta, *places, *feature_recs, *items, *queries]


def render(records: Iterable[dict[str, Any]]) -> str:
    """The JSONL text of the records (sorted keys: stable bytes)."""
    return "".join(json.dumps(r, sort_keys=True, ensure_ascii=False) + "\n" for r in records)


def read_set(path: Path = SET_PATH) -> Iterator[dict[str, Any]]:
    """The records of a set file."""
    with path.open(encoding="utf-8") as f:
        for line in f:
            if line.strip():
                yield json.loads(line)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--out", default=str(SET_PATH))
    ap.add_argument("--check", action="store_true", help="compare with the file instead")
    args = ap.parse_args(argv)
    text = render(generate())
    out = Path(args.out)
    if args.check:
        same = out.exists() and out.read_text(encoding="utf-8") == text
        print(f"{out}: {'up to date' if same else 'DIFFERS from the generator'}")
        return 0 if same else 1
    out.write_text(text, encoding="utf-8")
    print(f"wrote {out} ({text.count(chr(10))} records)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
