"""A small real text embedder for the recall tests, trained here on text this module generates.

:func:`build_model` trains gensim Word2Vec on generated sentences about fields, rivers,
forests, floods, fires, roads... in which each concept is written with one of several
synonyms (so synonyms share contexts and end up close), trains a ``tokenizers``
WordLevel tokenizer on the same text, and writes both as a model2vec ``StaticModel``
directory with model2vec's own ``save_pretrained`` (``config.json``, ``model.safetensors``,
``tokenizer.json``). Word vectors are SIF-weighted (``a / (a + p(word))``, as model2vec's
distillation weights tokens), so frequent function words barely move a mean. Tests point
``EARTHMEM_EMBEDDER`` at that directory: it goes through the same loader a user's model
directory does. :func:`serve_embeddings` runs the same model behind a loopback
OpenAI-style ``/v1/embeddings`` endpoint.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import random
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["CONCEPTS", "build_model", "corpus", "serve_embeddings"]

CONCEPTS: dict[str, tuple[str, ...]] = {
    "flood": ("flood", "flooding", "inundation", "deluge", "overflow", "waterlogging"),
    "river": ("river", "stream", "watercourse", "creek", "channel", "tributary"),
    "field": ("field", "farmland", "paddy", "cropland", "acreage", "plot"),
    "rain": ("rain", "monsoon", "downpour", "rainfall", "cloudburst", "storm"),
    "forest": ("forest", "woodland", "grove", "timberland", "jungle", "thicket"),
    "fire": ("fire", "wildfire", "blaze", "burning", "inferno", "flames"),
    "road": ("road", "highway", "track", "lane", "route", "motorway"),
    "village": ("village", "town", "settlement", "hamlet", "township", "community"),
    "drought": ("drought", "dryness", "aridity", "parched", "desiccation", "dearth"),
    "harvest": ("harvest", "crop", "yield", "reaping", "produce", "grain"),
    "logging": ("logging", "felling", "clearing", "deforestation", "chopping", "clearcut"),
    "mine": ("mine", "quarry", "excavation", "pit", "digging", "mining"),
    "snow": ("snow", "frost", "ice", "blizzard", "snowfall", "sleet"),
    "mountain": ("mountain", "peak", "summit", "ridge", "highland", "slope"),
}
"""Concept -> its synonyms (each sentence picks one at random)."""

_TEMPLATES = (
    "the {river} rose and the {flood} covered the {field} after the {rain}",
    "after heavy {rain} the {river} burst its banks and {flood} reached the {field}",
    "{flood} from the {river} damaged the {field} near the {village}",
    "farmers saw {flood} on the {field} when the {rain} swelled the {river}",
    "the {field} lay under {flood} because the {river} overflowed in the {rain}",
    "{fire} spread through the {forest} near the {village}",
    "smoke from the {fire} hung over the {forest} for days",
    "the {forest} burned in a {fire} that crews fought from the {road}",
    "{logging} removed much of the {forest} beside the {road}",
    "trucks on the {road} carried timber after {logging} in the {forest}",
    "{logging} thinned the {forest} and opened tracks to the {village}",
    "{drought} withered the {field} and the {harvest} failed",
    "the {harvest} was poor after months of {drought} on the {field}",
    "during the {drought} the {field} cracked and the {harvest} was lost",
    "a good {harvest} came from the {field} near the {village}",
    "the {harvest} was gathered from the {field} before the {rain}",
    "a {mine} was dug near the {road} and spoil covered the ground",
    "the {mine} expanded and dust drifted over the {road}",
    "workers at the {mine} widened the {road} to the {village}",
    "{snow} covered the {mountain} and closed the {road}",
    "on the {mountain} the {snow} lasted until spring",
    "the {road} over the {mountain} was blocked by {snow}",
    "the {village} grew along the {road} beside the {river}",
    "people in the {village} fetched water from the {river}",
)


def _tokens(text: str) -> list[str]:
    import re

    return re.findall(r"\w+|[^\w\s]+", text.lower())


def corpus(n: int = 2000, seed: int = 0) -> list[str]:
    """``n`` generated sentences (deterministic for a seed)."""
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        template = rng.choice(_TEMPLATES)
        out.append(template.format(**{k: rng.choice(v) for k, v in CONCEPTS.items()}))
    return out


def _stable_hash(text: str) -> int:
    # gensim seeds each word's initial vector with hashfxn(word + seed); Python's hash of a str
    # changes per process, so the model would too
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "little") >> 1


def build_model(directory: Path, *, dim: int = 48, seed: int = 0) -> Path:
    """Train the model and write it as a model2vec directory; return the directory."""
    from gensim.models import Word2Vec
    from model2vec import StaticModel
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, trainers

    sentences = corpus(seed=seed)
    tokenizer = Tokenizer(models.WordLevel(unk_token="[UNK]"))
    tokenizer.normalizer = normalizers.Lowercase()
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer.train_from_iterator(
        sentences, trainers.WordLevelTrainer(special_tokens=["[UNK]"], min_frequency=1)
    )
    tokenized = [_tokens(s) for s in sentences]
    w2v = Word2Vec(
        tokenized,
        vector_size=dim,
        window=6,
        min_count=1,
        sg=1,
        negative=8,
        epochs=10,
        seed=seed,
        workers=1,
        hashfxn=_stable_hash,
    )
    counts: dict[str, int] = {}
    for sent in tokenized:
        for tok in sent:
            counts[tok] = counts.get(tok, 0) + 1
    total = sum(counts.values())
    vocab = tokenizer.get_vocab()
    vectors = np.zeros((len(vocab), dim), dtype=np.float32)
    sif = 1e-3
    for token, idx in vocab.items():
        if token in w2v.wv:
            v = w2v.wv[token]
            weight = sif / (sif + counts.get(token, 0) / total)
            vectors[idx] = weight * v / np.linalg.norm(v)
    model = StaticModel(vectors=vectors, tokenizer=tokenizer, normalize=True)
    directory.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(directory)
    return directory


class _Handler(BaseHTTPRequestHandler):
    server: Any

    def do_POST(self) -> None:
        gate = self.server.gate
        if gate is not None:
            gate.wait(60)
        length = int(self.headers.get("Content-Length") or 0)
        body = json.loads(self.rfile.read(length))
        self.server.requests.append(body)
        texts = body["input"] if isinstance(body["input"], list) else [body["input"]]
        vecs = self.server.model.encode(texts)
        out = {
            "object": "list",
            "model": body.get("model"),
            "data": [
                {"object": "embedding", "index": i, "embedding": [float(x) for x in v]}
                for i, v in enumerate(vecs)
            ],
        }
        data = json.dumps(out).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: Any) -> None:
        return


@contextlib.contextmanager
def serve_embeddings(
    model_dir: Path, gate: threading.Event | None = None
) -> Iterator[tuple[str, list[dict[str, Any]]]]:
    """A loopback ``/v1/embeddings`` server running the model (yields its URL and the
    request bodies it received). With ``gate``, each request waits until it is set."""
    from model2vec import StaticModel

    server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    server.daemon_threads = True
    server.model = StaticModel.from_pretrained(model_dir)  # type: ignore[attr-defined]
    server.gate = gate  # type: ignore[attr-defined]
    server.requests = []  # type: ignore[attr-defined]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        host, port = server.server_address[:2]
        yield f"http://{host!s}:{port}/v1/embeddings", server.requests  # type: ignore[attr-defined]
    finally:
        if gate is not None:
            gate.set()
        server.shutdown()
        server.server_close()
