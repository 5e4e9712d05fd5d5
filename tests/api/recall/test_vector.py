"""The vector lane: items written through memory_create with a model trained here, ranked by
the cosine of their embedding to the query's; degraded (ran=False) when it cannot run."""

from __future__ import annotations

import re
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from api.context import ServiceContext
from api.dispatch import call_primitive
from api.errors import ApiError
from api.memory.auth import issue_token
from api.recall.lanes import RecallQuery
from api.recall.vector import CACHE, vector_lane
from api.receipts import Signer
from store.memory.model import ItemFilter
from tests.recall_model import serve_embeddings

PROJECT = "ranchi"
ITEMS = {
    "flood": (
        "Paddy fields flooded by the Jumar river",
        "Flood water covered the paddy after the monsoon rain",
        ["flood", "river"],
    ),
    "fire": ("Wildfire near the village", "A blaze burned the woodland for two days", ["fire"]),
    "drought": ("Cropland parched", "The harvest failed in the dry field", ["drought"]),
    "logging": (
        "Logging along the highway",
        "Felling cleared the forest beside the road",
        ["logging"],
    ),
    "mine": ("Quarry dust", "The mine expanded near the road", ["mine"]),
    "snow": ("Snow on the peak", "A blizzard closed the mountain road", ["snow"]),
}
PARAPHRASE = "inundation farmland stream downpour"
"""Shares no word with the flood item (nor with any other)."""


def _ctx(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, setting: str | None) -> ServiceContext:
    if setting is None:
        monkeypatch.delenv("EARTHMEM_EMBEDDER", raising=False)
    else:
        monkeypatch.setenv("EARTHMEM_EMBEDDER", setting)
    return ServiceContext(
        tmp_path, signer=Signer.generate(), memory_url=f"sqlite:///{tmp_path / 'memory.sqlite'}"
    )


def _write(
    ctx: ServiceContext, token: str, key: str, title: str, statement: str, tags: list[str]
) -> str:
    body = {
        "type": "observation",
        "title": title,
        "statement": statement,
        "tags": tags,
        "where": {"lat": 23.35 + 0.001 * len(key), "lng": 85.33},
    }
    answer: Any = call_primitive(ctx, "memory_create", body, token=token)
    return str(answer["result"]["item"]["id"])


def _query(text: str = PARAPHRASE, **kw: Any) -> RecallQuery:
    return RecallQuery(project=PROJECT, text=text, where=ItemFilter(), **kw)


@pytest.fixture
def written(
    recall_model_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> tuple[ServiceContext, str, dict[str, str]]:
    ctx = _ctx(tmp_path, monkeypatch, str(recall_model_dir))
    token = issue_token(ctx.memory(), PROJECT, ("read", "write"), actor="agent:test")[0]
    ids = {k: _write(ctx, token, k, *v) for k, v in ITEMS.items()}
    return ctx, token, ids


def _words(text: str) -> set[str]:
    return set(re.findall(r"\w+", text.lower()))


def test_a_paraphrase_sharing_no_word_ranks_its_target_first(written: Any) -> None:
    ctx, _, ids = written
    store = ctx.memory()
    flood = store.get(PROJECT, ids["flood"])
    assert flood is not None
    assert flood.embedding is not None
    assert len(flood.embedding) == 48
    for title, statement, tags in ITEMS.values():
        assert not _words(PARAPHRASE) & _words(" ".join([title, statement, *tags]))
    assert store.search_text(PROJECT, PARAPHRASE, limit=10) == []  # full text finds nothing
    hits = vector_lane(ctx, store, _query())
    assert hits.ran
    assert hits.lane == "vector"
    assert hits.note is None
    assert hits.candidates == len(ITEMS)
    ranked = sorted(hits.scores, key=hits.scores.__getitem__, reverse=True)
    assert ranked[0] == ids["flood"]
    assert hits.scores[ids["flood"]] > 0.8
    # other topics, one per query
    for text, key in (
        ("inferno jungle", "fire"),
        ("sleet summit", "snow"),
        ("clearcut timberland motorway", "logging"),
    ):
        got = vector_lane(ctx, store, _query(text)).scores
        assert max(got, key=got.__getitem__) == ids[key], text
    # the per-lane candidate cap
    assert len(vector_lane(ctx, store, _query(candidates=2)).scores) == 2
    # the text lane's candidates are scored too, past the cap (when their cosine is positive)
    full = vector_lane(ctx, store, _query()).scores
    second = sorted(full, key=full.__getitem__, reverse=True)[1]
    capped = vector_lane(ctx, store, _query(candidates=1, text_ids=(second,))).scores
    assert capped == {ids["flood"]: full[ids["flood"]], second: full[second]}


def test_a_query_of_words_the_embedder_does_not_know_proposes_nothing(written: Any) -> None:
    ctx, token, _ = written
    hits = vector_lane(ctx, ctx.memory(), _query("qqzx vvbn"))
    assert hits.ran
    assert hits.scores == {}
    assert hits.note is not None
    assert "no word the embedder knows" in hits.note
    answer: Any = call_primitive(ctx, "recall", {"query": "qqzx vvbn"}, token=token)
    assert answer["degraded"] is False  # the lane ran: nothing to match is not degraded


def test_the_item_matrix_is_read_once_per_history_head(written: Any) -> None:
    ctx, token, _ = written
    store = ctx.memory()
    vector_lane(ctx, store, _query())
    reads = CACHE.info()["reads"]
    vector_lane(ctx, store, _query("inferno jungle"))
    assert CACHE.info()["reads"] == reads  # served from the cache
    new = _write(ctx, token, "x", "Creek overflow", "deluge on the acreage", ["flood"])
    hits = vector_lane(ctx, store, _query())
    assert CACHE.info()["reads"] == reads + 1
    assert new in hits.scores


def test_other_projects_items_are_never_scored(written: Any) -> None:
    ctx, _, ids = written
    other = issue_token(ctx.memory(), "elsewhere", ("read", "write"), actor="agent:b")[0]
    theirs = _write(ctx, other, "t", "Inundation of farmland", "stream downpour", ["flood"])
    hits = vector_lane(ctx, ctx.memory(), _query())
    assert theirs not in hits.scores
    assert set(hits.scores) <= set(ids.values())


def test_a_missed_deadline_does_not_run_the_lane(written: Any) -> None:
    ctx, _, _ = written
    hits = vector_lane(ctx, ctx.memory(), _query(deadline=time.monotonic() - 0.001))
    assert not hits.ran
    assert hits.scores == {}
    assert hits.note is not None
    assert "embedDeadlineMs" in hits.note


def test_a_slow_endpoint_misses_the_deadline(
    recall_model_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    gate = threading.Event()
    with serve_embeddings(recall_model_dir, gate) as (url, _):
        ctx = _ctx(tmp_path, monkeypatch, url)
        hits = vector_lane(ctx, ctx.memory(), _query(deadline=time.monotonic() + 0.3))
        assert not hits.ran
        assert "embedDeadlineMs" in (hits.note or "")
        gate.set()
        token = issue_token(ctx.memory(), PROJECT, ("read", "write"), actor="agent:test")[0]
        flood = _write(ctx, token, "flood", *ITEMS["flood"])
        _write(ctx, token, "fire", *ITEMS["fire"])
        hits = vector_lane(ctx, ctx.memory(), _query())
        assert hits.ran
        assert max(hits.scores, key=hits.scores.__getitem__) == flood


def test_without_an_embedder_the_lane_does_not_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ctx = _ctx(tmp_path, monkeypatch, None)
    token = issue_token(ctx.memory(), PROJECT, ("read", "write"), actor="agent:test")[0]
    item = _write(ctx, token, "flood", *ITEMS["flood"])
    stored = ctx.memory().get(PROJECT, item)
    assert stored is not None
    assert stored.embedding is None
    hits = vector_lane(ctx, ctx.memory(), _query())
    assert not hits.ran
    assert hits.note == "no embedder configured (EARTHMEM_EMBEDDER)"


def test_items_written_before_the_embedder_are_counted_in_the_note(
    recall_model_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ctx = _ctx(tmp_path, monkeypatch, None)
    token = issue_token(ctx.memory(), PROJECT, ("read", "write"), actor="agent:test")[0]
    before = _write(ctx, token, "flood", *ITEMS["flood"])
    ctx = _ctx(tmp_path, monkeypatch, str(recall_model_dir))
    after = _write(ctx, token, "fire", *ITEMS["fire"])
    hits = vector_lane(ctx, ctx.memory(), _query("inferno"))
    assert hits.ran
    assert list(hits.scores) == [after]
    assert before not in hits.scores
    assert hits.note is not None
    assert hits.note.startswith("1 of 2 candidate items have no embedding")


def test_a_misconfigured_embedder_fails_writes_and_degrades_recall(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ctx = _ctx(tmp_path, monkeypatch, str(tmp_path / "no-such-model"))
    token = issue_token(ctx.memory(), PROJECT, ("read", "write"), actor="agent:test")[0]
    with pytest.raises(ApiError) as info:
        _write(ctx, token, "flood", *ITEMS["flood"])
    assert (info.value.status, info.value.code) == (503, "embedder_misconfigured")
    assert ctx.memory().head(PROJECT).seq == 0  # nothing written
    hits = vector_lane(ctx, ctx.memory(), _query())
    assert not hits.ran
    assert (hits.note or "").startswith("embedder misconfigured")
