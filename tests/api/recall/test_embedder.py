"""The embedder setting: a local model2vec directory (a model trained here) or an HTTP endpoint."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from api.context import ServiceContext
from api.recall.embedder import (
    EmbedDeadline,
    EmbedderFailed,
    EmbedderMisconfigured,
    HttpEmbedder,
    LocalEmbedder,
    embed_item,
    item_text,
    load_embedder,
)
from api.receipts import Signer
from tests.recall_model import serve_embeddings


def _cos(a: np.ndarray, b: np.ndarray) -> float:
    return float(a @ b)


def test_a_model2vec_directory_loads_offline_and_embeds_unit_vectors(
    recall_model_dir: Path,
) -> None:
    emb = load_embedder(str(recall_model_dir))
    assert isinstance(emb, LocalEmbedder)
    assert emb.name == f"model2vec:{recall_model_dir.resolve()}"
    vecs = emb.embed(["flood on the paddy", "wildfire in the woodland", "Jumar"])
    assert vecs.dtype == np.float32
    assert vecs.shape == (3, 48)
    assert np.linalg.norm(vecs[0]) == pytest.approx(1.0, abs=1e-5)
    assert not vecs[2].any()  # no word the model knows: a zero vector, not noise
    # the trained model puts synonyms together: a real embedder, not a hash
    flood, inundation, blaze = emb.embed(["flood", "inundation", "blaze"])
    assert _cos(flood, inundation) > _cos(flood, blaze) + 0.2
    assert np.array_equal(emb.embed(["flood on the paddy"])[0], vecs[0])  # deterministic
    assert emb.embed([]).shape == (0, 0)


def test_settings_that_name_no_model_are_typed_configuration_errors(tmp_path: Path) -> None:
    with pytest.raises(EmbedderMisconfigured, match="not a directory"):
        load_embedder(str(tmp_path / "missing"))
    # a Hugging Face repo id is not a directory: refused, never downloaded
    with pytest.raises(EmbedderMisconfigured, match="never downloaded"):
        load_embedder("minishlab/potion-base-8M")
    with pytest.raises(EmbedderMisconfigured, match="neither a model2vec"):
        load_embedder(str(tmp_path))
    st = tmp_path / "st"
    st.mkdir()
    (st / "modules.json").write_text("[]")
    with pytest.raises(EmbedderMisconfigured, match="sentence-transformers"):
        load_embedder(str(st))
    broken = tmp_path / "broken"
    broken.mkdir()
    for name in ("config.json", "model.safetensors", "tokenizer.json"):
        (broken / name).write_text("not a model")
    with pytest.raises(EmbedderMisconfigured, match="does not load") as info:
        load_embedder(str(broken))
    assert info.value.code == "embedder_misconfigured"
    assert info.value.status == 503
    with pytest.raises(EmbedderMisconfigured):
        load_embedder("http://")


def test_an_http_endpoint_running_the_same_model_gives_the_same_vectors(
    recall_model_dir: Path,
) -> None:
    local = load_embedder(str(recall_model_dir))
    with serve_embeddings(recall_model_dir) as (url, requests):
        emb = load_embedder(url + "#tiny-w2v")
        assert isinstance(emb, HttpEmbedder)
        assert emb.url == url
        texts = ["the stream overflowed", "a quarry by the motorway"]
        assert np.allclose(emb.embed(texts), local.embed(texts), atol=1e-6)
        assert requests == [{"input": texts, "model": "tiny-w2v"}]
        base = load_embedder(url.removesuffix("/v1/embeddings"))
        assert isinstance(base, HttpEmbedder)
        assert base.url == url
        assert base.model == "earthmem"


def test_an_endpoint_that_misses_the_deadline_or_is_down_is_a_typed_error(
    recall_model_dir: Path,
) -> None:
    gate = threading.Event()  # the server answers only once the test lets it
    with serve_embeddings(recall_model_dir, gate) as (url, _):
        emb = load_embedder(url)
        with pytest.raises(EmbedDeadline):
            emb.embed(["flood"], deadline=time.monotonic() + 0.3)
        gate.set()
        assert emb.embed(["flood"]).shape == (1, 48)
    with pytest.raises(EmbedderFailed):
        emb.embed(["flood"])  # the server is gone
    with pytest.raises(EmbedDeadline):
        load_embedder(str(recall_model_dir)).embed(["flood"], deadline=time.monotonic() - 1)


def test_the_context_loads_the_setting_once_and_embeds_items(
    recall_model_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("EARTHMEM_EMBEDDER", raising=False)
    ctx = ServiceContext(tmp_path, signer=Signer.generate())
    assert ctx.embedder() is None
    monkeypatch.setenv("EARTHMEM_EMBEDDER", str(recall_model_dir))
    ctx = ServiceContext(tmp_path, signer=Signer.generate())
    emb = ctx.embedder()
    assert isinstance(emb, LocalEmbedder)
    assert ctx.embedder() is emb

    draft = SimpleNamespace(
        fields={
            "title": "Flood",
            "statement": "the paddy flooded",
            "details": None,
            "tags": ("river",),
        }
    )
    assert embed_item(None, draft) is None  # no embedder configured: stored without one
    vec = embed_item(ctx.embedder(), draft)
    assert vec is not None
    assert len(vec) == 48
    want = emb.embed([item_text("Flood", "the paddy flooded", None, ("river",))])[0]
    assert np.allclose(vec, want)
    monkeypatch.setenv("EARTHMEM_EMBEDDER", str(tmp_path / "nowhere"))
    bad = ServiceContext(tmp_path, signer=Signer.generate())
    with pytest.raises(EmbedderMisconfigured):
        bad.embedder()
    assert bad.warm() is False  # a server logs the misconfiguration at start
