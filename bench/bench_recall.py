"""Recall: ranking quality on the labelled recall set, and latency at 10^4..10^6 items.

Quality: the committed set (``bench/recall_set/recall_set.jsonl``) is written
through the real write path (``memory_create`` / ``memory_update`` in process,
with a token) and each query is ranked by the fused ``recall`` primitive, by the
store's own full-text lane (``search_text``) and by a BM25-only baseline
(bm25s, same run; its tokenisation is printed). recall@10 and nDCG@10 overall
and per case type, plus how many hidden items (superseded, or written after
``asOf``) each shows, with the vector lane and without: the embedder configured
(``EARTHMEM_EMBEDDER``), or else a small model2vec model trained here on generated text
(``tests/recall_model.py``), and recall again with that setting removed.

Latency: p50 / p95 of recall (paired in rounds with the fts lane on the same
query) on stores bulk-loaded with the set plus filler and their history (not
through the API: :func:`bench.recall_set.load.bulk_load`; ``asOf: "@phase1"`` is the
load's instant before the set's corrections, judged from the history of every
candidate as for a written store; SQLite stores cached under
``bench/.cache``, PostgreSQL loaded from them into a server the bench starts):
10^4 and 10^5 items on SQLite and PostgreSQL by default, 10^6 on SQLite with
``--large``. When the dispatch room has no ``recall``, every recall column says
so and the fts lane alone is measured and labelled as such.

    python -m bench.bench_recall [--quick | --large] [--calls N] [--no-pg] [--json PATH]
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import CACHE_DIR, Timing, time_calls, write_json
from bench.paired import paired
from bench.recall_set.generate import CASES
from bench.recall_set.load import (
    BULK_PROJECT,
    RecallSet,
    cached_sqlite,
    copy_items,
    keys_of,
    load_api,
    read_recall_set,
    write_manifest,
)
from bench.recall_set.metrics import score_system, summarise
from bench.recall_set.rank import (
    BM25_TOKENISATION,
    EMBEDDER_ENV,
    Bm25Baseline,
    answer_lanes,
    hit_ids,
    recall_body,
    recall_missing,
)

Ranker = Callable[[Mapping[str, Any]], Sequence[str]]


def _log(msg: str) -> None:
    print(f"[bench_recall] {msg}", file=sys.stderr, flush=True)


@contextlib.contextmanager
def _env_without(name: str) -> Iterator[None]:
    saved = os.environ.pop(name, None)
    try:
        yield
    finally:
        if saved is not None:
            os.environ[name] = saved


@contextlib.contextmanager
def _an_embedder(notes: list[str]) -> Iterator[None]:
    """The quality section with the vector lane and without: ``EARTHMEM_EMBEDDER`` when set,
    else a small model2vec model trained here (cached) by ``tests/recall_model.py`` on its own
    generated text, not on the recall set; the latency section runs as configured."""
    if os.environ.get(EMBEDDER_ENV):
        notes.append(f"vector lane: the configured embedder ({EMBEDDER_ENV})")
        yield
        return
    from tests.recall_model import build_model

    model = CACHE_DIR / "recall_model_v1"
    if not (model / "config.json").is_file():
        build_model(model)
    notes.append(
        f"vector lane: no {EMBEDDER_ENV} set, so a small model2vec model trained here by "
        "tests/recall_model.py on its own generated sentences (not on the recall set): the "
        "fused column runs with it, the no_vector column without"
    )
    os.environ[EMBEDDER_ENV] = str(model)
    try:
        yield
    finally:
        os.environ.pop(EMBEDDER_ENV, None)


def _recall_ranker(
    ctx: Any, token: str, phase1_at: str, keys: Mapping[str, str], seen: dict[str, Any]
) -> Ranker:
    """Set keys ranked by ``recall``; lanes, degraded flags and errors gathered in ``seen``."""
    from api.dispatch import call_primitive, describe_error

    def rank(q: Mapping[str, Any]) -> list[str]:
        try:
            answer = call_primitive(ctx, "recall", recall_body(q, phase1_at), token=token)
        except Exception as exc:  # one failing query is reported, not fatal
            described = describe_error(exc)
            code = described[1]["error"]["code"] if described else type(exc).__name__
            seen.setdefault("errors", []).append(f"{q['key']}: {code}")
            return []
        lanes, degraded = answer_lanes(answer)
        seen.setdefault("lanes", set()).update(lanes)
        seen["degraded"] = seen.get("degraded", 0) + bool(degraded)
        return [keys.get(i, i) for i in hit_ids(answer)]

    return rank


def quality(rset: RecallSet, tmp: Path) -> tuple[list[dict[str, Any]], list[str], dict[str, Any]]:
    """Rows, notes and the per-system summaries of the quality section."""
    notes: list[str] = []
    t0 = time.perf_counter()
    ld = load_api(rset, tmp / "quality")
    _log(f"wrote {len(ld.ids)} items through memory_create/memory_update in {ld.seconds:.1f} s")
    keys = keys_of(ld.ids)
    store = ld.ctx.memory()
    bm25 = Bm25Baseline(rset.items)
    systems: dict[str, Ranker] = {
        "bm25": lambda q: bm25.rank(q["query"]),
        "fts": lambda q: [
            keys.get(i, i) for i, _ in store.search_text(ld.project, q["query"], limit=10)
        ],
    }
    missing = recall_missing()
    seen: dict[str, dict[str, Any]] = {"fused": {}, "no_vector": {}}
    if missing is None:
        systems["fused"] = _recall_ranker(ld.ctx, ld.token, ld.phase1_at, keys, seen["fused"])
        if os.environ.get(EMBEDDER_ENV):
            from api.context import ServiceContext
            from api.receipts import Signer

            with _env_without(EMBEDDER_ENV):
                ctx2 = ServiceContext(
                    ld.ctx.data_dir,
                    signer=Signer.generate(),
                    manifest_path=ld.ctx.manifest_path,
                    memory_url=ld.ctx.memory_url,
                )
                rank2 = _recall_ranker(ctx2, ld.token, ld.phase1_at, keys, seen["no_vector"])
                scored_nv = score_system(rset.queries, rank2)
            if "vector" in seen["no_vector"].get("lanes", set()):
                notes.append(
                    f"the vector lane still ran with {EMBEDDER_ENV} unset: the 'no vector' "
                    "column is not valid"
                )
        else:
            notes.append(
                f"no embedder configured ({EMBEDDER_ENV} unset): quality with the vector lane "
                "not measured; the fused column ran without it"
            )
    else:
        notes.append(f"{missing}: the fused recall column is not measured")
    per = {name: score_system(rset.queries, fn) for name, fn in systems.items()}
    if missing is None and os.environ.get(EMBEDDER_ENV):
        per["no_vector"] = scored_nv
    summ = {name: summarise(rows, CASES) for name, rows in per.items()}
    for name in ("fused", "no_vector"):
        info = seen[name]
        if info.get("errors"):
            notes.append(f"{name}: {len(info['errors'])} queries failed: {info['errors'][:5]}")
        if info.get("lanes"):
            notes.append(
                f"{name}: lanes that contributed: {sorted(info['lanes'])}; "
                f"degraded answers: {info.get('degraded', 0)}"
            )
    notes.append(f"BM25 baseline: {BM25_TOKENISATION}")
    rows = _quality_rows(summ, len(rset.items), missing)
    print(_quality_table(summ))
    _log(f"quality section: {time.perf_counter() - t0:.1f} s")
    return rows, notes, {"summary": summ, "api_load_s": round(ld.seconds, 2)}


def _quality_rows(
    summ: dict[str, dict[str, dict[str, float]]], n_items: int, missing: str | None
) -> list[dict[str, Any]]:
    main = "fused" if "fused" in summ else "fts"
    label = "fused recall" if main == "fused" else "fts lane only (store search_text; recall n/a)"
    rows = []
    for case in ("overall", *CASES):
        s, b = summ[main][case], summ["bm25"][case]
        target = ">= BM25 + 0.1" if case == "overall" else ">= BM25"
        met = None
        if main == "fused":
            met = s["ndcg"] >= b["ndcg"] + (0.1 if case == "overall" else 0.0)
        rows.append(
            {
                "case": f"recall quality nDCG@10, {case}: {label}",
                "data": f"{int(s['queries'])} queries over {n_items} items (API-loaded)",
                "median": s["ndcg"],
                "n": int(s["queries"]),
                "unit": "nDCG@10",
                "baseline_case": "BM25-only (bm25s, same run)",
                "baseline": {"median": b["ndcg"], "n": int(b["queries"])},
                "target": target if main == "fused" else f"(info; target {target} is recall's)",
                "met": met,
                "recall_at_10": {k: round(v[case]["recall"], 3) for k, v in summ.items()},
                "hidden_shown": {k: int(v[case]["hidden_shown"]) for k, v in summ.items()},
                **({"fts_ndcg": round(summ["fts"][case]["ndcg"], 3)} if main == "fused" else {}),
                **(
                    {"no_vector_ndcg": round(summ["no_vector"][case]["ndcg"], 3)}
                    if "no_vector" in summ
                    else {}
                ),
            }
        )
    return rows


def _quality_table(summ: dict[str, dict[str, dict[str, float]]]) -> str:
    names = [n for n in ("bm25", "fts", "fused", "no_vector") if n in summ]
    head = f"{'case':13} {'n':>4} " + " ".join(
        f"{n + ' nDCG':>15} {n + ' R@10':>15}" for n in names
    )
    head += f" {'target':>14} {'met':>6}  hidden shown ({'/'.join(names)})"
    lines = [head]
    for case in ("overall", *CASES):
        cells = " ".join(
            f"{summ[n][case]['ndcg']:15.3f} {summ[n][case]['recall']:15.3f}" for n in names
        )
        target = "BM25 + 0.1" if case == "overall" else ">= BM25"
        if "fused" in summ:
            need = summ["bm25"][case]["ndcg"] + (0.1 if case == "overall" else 0.0)
            met = "met" if summ["fused"][case]["ndcg"] >= need else "MISSED"
        else:
            met = "n/a"
        hidden = "/".join(str(int(summ[n][case]["hidden_shown"])) for n in names)
        lines.append(
            f"{case:13} {int(summ['bm25'][case]['queries']):4d} {cells} {target:>14} {met:>6}  {hidden}"
        )
    return "\n".join(lines)


# --------------------------------------------------------------------------- latency


def _p95(samples: Sequence[float]) -> float:
    s = sorted(samples)
    return s[min(len(s) - 1, math.ceil(0.95 * len(s)) - 1)]


def _rounds(one: Callable[[int], None], calls: int, budget_s: float) -> int:
    """Timed rounds that fit ``budget_s`` (at least 20, at most ``calls``), from 5 warm-ups."""
    t0 = time.perf_counter()
    for i in range(5):
        one(-1 - i)
    per = (time.perf_counter() - t0) / 5
    return max(20, min(calls, int(budget_s / per) if per > 0 else calls))


def _latency_rows(
    backend: str,
    n: int,
    store: Any,
    url: str,
    rset: RecallSet,
    calls: int,
    budget_s: float,
    tmp: Path,
    ids: Mapping[str, str],
    phase1_at: str,
) -> tuple[list[dict[str, Any]], list[str]]:
    notes: list[str] = []
    qs = rset.queries
    kw = next(q for q in qs if q["case"] == "keyword")
    found = {i for i, _ in store.search_text(BULK_PROJECT, kw["query"], limit=10)}
    want = {ids[k] for k in kw["relevant"]}
    notes.append(
        f"{backend} {n:,}: search_text finds the bulk-loaded set's items for {kw['key']}: "
        + ("yes" if want <= found else f"NO (found {len(want & found)} of {len(want)})")
    )

    def fts(i: int) -> None:
        store.search_text(BULK_PROJECT, qs[i % len(qs)]["query"], limit=10)

    data = (
        f"{n:,} items (bulk-loaded, with their history), {len(qs)} set queries cycled, limit 10; "
        "asOf @phase1 = the bulk load's instant before the corrections"
    )
    missing = recall_missing()
    rows: list[dict[str, Any]] = []
    sqlite_target = backend == "sqlite"
    if missing is None:
        from api.context import ServiceContext
        from api.dispatch import call_primitive
        from api.memory.auth import issue_token
        from api.receipts import Signer

        ctx = ServiceContext(
            tmp / "data",
            signer=Signer.generate(),
            manifest_path=write_manifest(tmp / "manifest.json"),
            memory_url=url,
        )
        token, _ = issue_token(ctx.memory(), BULK_PROJECT, ("read",), actor="bench:recall")

        def rec(i: int) -> None:
            q = qs[i % len(qs)]
            call_primitive(ctx, "recall", recall_body(q, phase1_at), token=token)

        def both(i: int) -> None:
            rec(i)
            fts(i)

        pr = paired(rec, fts, _rounds(both, calls, budget_s), warmup=0)
        a_ms = [x * 1e3 for x in pr.a_samples]
        b_ms = [x * 1e3 for x in pr.b_samples]
        t, b = Timing.of(a_ms), Timing.of(b_ms)
        p50_target = sqlite_target and n == 100_000
        p95_target = sqlite_target and n == 1_000_000
        rows.append(
            {
                "case": f"recall p50, {backend}, {n:,} items",
                "data": data,
                **t.as_dict(),
                "unit": "ms",
                "baseline_case": "fts lane alone (store search_text), same query",
                "baseline": b.as_dict(),
                **pr.ratio_fields(),
                "ratio_def": "recall / fts lane",
                "target": "p50 <= 10 ms" if p50_target else "(info)",
                "met": (t.median <= 10.0) if p50_target else None,
            }
        )
        rows.append(
            {
                "case": f"recall p95, {backend}, {n:,} items",
                "data": data,
                "median": _p95(a_ms),
                "n": len(a_ms),
                "unit": "ms",
                "baseline_case": "fts lane p95",
                "baseline": {"median": _p95(b_ms), "n": len(b_ms)},
                "target": "p95 <= 50 ms" if p95_target else "(info)",
                "met": (_p95(a_ms) <= 50.0) if p95_target else None,
            }
        )
        with contextlib.suppress(Exception):
            ctx.memory().close()
    else:
        samples: list[float] = []

        def timed(i: int) -> None:
            t0 = time.perf_counter()
            fts(i)
            if i >= 0:
                samples.append((time.perf_counter() - t0) * 1e3)

        rounds = _rounds(fts, calls, budget_s)
        time_calls(timed, rounds, warmup=0)
        ms = Timing.of(samples)
        for stat, value in (("p50", ms.median), ("p95", _p95(samples))):
            rows.append(
                {
                    "case": f"fts lane {stat} (store search_text; recall n/a), {backend}, {n:,} items",
                    "data": data,
                    **(ms.as_dict() if stat == "p50" else {"n": ms.n}),
                    "median": value,
                    "unit": "ms",
                    "target": "(info: recall's targets are p50 <= 10 ms at 10^5 SQLite, "
                    "p95 <= 50 ms at 10^6)",
                    "met": None,
                }
            )
    return rows, notes


def latency(
    rset: RecallSet, sizes: Sequence[int], calls: int, budget_s: float, use_pg: bool, tmp: Path
) -> tuple[list[dict[str, Any]], list[str], dict[str, Any]]:
    """Rows, notes and load times of the latency section."""
    from store.memory import open_store
    from store.memory.sql import SqlMemoryStore
    from store.memory.sqlite import SqliteMemoryStore

    rows: list[dict[str, Any]] = []
    notes: list[str] = []
    loads: dict[str, float] = {}
    missing = recall_missing()
    if missing is not None:
        notes.append(f"{missing}: latency rows measure the fts lane (store search_text) alone")
    cached: dict[int, tuple[str, dict[str, str], str]] = {}
    for n in sizes:
        t0 = time.perf_counter()
        cached[n] = cached_sqlite(rset, n, CACHE_DIR)
        loads[f"sqlite_{n}_s"] = round(time.perf_counter() - t0, 2)
        _log(
            f"sqlite store of {n:,} items ready in {loads[f'sqlite_{n}_s']:.1f} s (cached after the first build)"
        )
        url, ids, phase1_at = cached[n]
        store = SqliteMemoryStore(url)
        try:
            r, nt = _latency_rows(
                "sqlite", n, store, url, rset, calls, budget_s, tmp / f"sqlite{n}", ids, phase1_at
            )
        finally:
            store.close()
        rows += r
        notes += nt
    if not use_pg:
        return rows, notes, loads
    try:
        from tests import pg_server

        server = pg_server.start()
    except Exception as exc:  # the bench reports it instead of failing the run
        notes.append(f"PostgreSQL not measured: {exc}")
        return rows, notes, loads
    try:
        for n in sizes:
            url, ids, phase1_at = cached[n]
            dst_url = server.create_database("recall")
            dst = open_store(dst_url)
            src = SqliteMemoryStore(url)
            try:
                assert isinstance(dst, SqlMemoryStore)
                t0 = time.perf_counter()
                copy_items(src, dst, BULK_PROJECT)
                loads[f"postgresql_{n}_s"] = round(time.perf_counter() - t0, 2)
                _log(
                    f"postgresql store of {n:,} items loaded in {loads[f'postgresql_{n}_s']:.1f} s"
                )
                r, nt = _latency_rows(
                    "postgresql",
                    n,
                    dst,
                    dst_url,
                    rset,
                    calls,
                    budget_s,
                    tmp / f"pg{n}",
                    ids,
                    phase1_at,
                )
                rows += r
                notes += nt
            finally:
                src.close()
                dst.close()
        notes.append(f"PostgreSQL {server.version} (started by the bench, test durability)")
    finally:
        server.stop()
    return rows, notes, loads


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    mode = ap.add_mutually_exclusive_group()
    mode.add_argument("--quick", action="store_true", help="10^3 items on SQLite only, 40 calls")
    mode.add_argument("--large", action="store_true", help="10^6 items on SQLite (bench-large)")
    ap.add_argument("--sizes", default=None, help="comma-separated store sizes (override)")
    ap.add_argument("--calls", type=int, default=None, help="most timed calls per store")
    ap.add_argument(
        "--budget-s", type=float, default=None, help="time budget per store (>= 20 calls)"
    )
    ap.add_argument("--no-pg", action="store_true", help="skip PostgreSQL")
    ap.add_argument("--no-quality", action="store_true", help="latency only")
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    if args.quick:
        sizes, calls, budget, use_pg = [1_000], 40, 5.0, False
    elif args.large:
        sizes, calls, budget, use_pg = [1_000_000], 300, 120.0, False
    else:
        sizes, calls, budget, use_pg = [10_000, 100_000], 300, 20.0, True
    budget = args.budget_s or budget
    if args.sizes:
        sizes = [int(x) for x in args.sizes.split(",")]
    calls = args.calls or calls
    use_pg = use_pg and not args.no_pg
    rset = read_recall_set()
    rows: list[dict[str, Any]] = []
    notes: list[str] = []
    extra: dict[str, Any] = {}
    summary: dict[str, Any] = {}
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="bench-recall-") as tmpdir:
        tmp = Path(tmpdir)
        if not args.no_quality:
            with _an_embedder(notes):
                r, nt, summary = quality(rset, tmp)
            extra["api_load_s"] = summary["api_load_s"]
            rows += r
            notes += nt
        t1 = time.perf_counter()
        r, nt, extra["load_seconds"] = latency(rset, sizes, calls, budget, use_pg, tmp)
        rows += r
        notes += nt
        extra["latency_section_s"] = round(time.perf_counter() - t1, 1)
    extra["total_s"] = round(time.perf_counter() - t0, 1)
    for row in rows:
        if row["unit"] == "ms":
            print(f"{row['case']:70} {row['median']:9.3f} ms")
    for note in notes:
        print(note)
    _log(f"done in {extra['total_s']:.0f} s")
    write_json(
        args.json,
        {
            "bench": "recall",
            "title": "Recall: quality on the labelled set (vs BM25) and latency (p50/p95)",
            "data": {
                "set": dict(rset.meta),
                "sizes": sizes,
                "most_calls": calls,
                "budget_s_per_store": budget,
                **extra,
            },
            "quality": summary,
            "rows": rows,
            "notes": notes,
        },
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
